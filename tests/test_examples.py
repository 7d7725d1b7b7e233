"""Every script in examples/ runs with --smoke, offline, and prints what its header promises."""

import os
import pathlib
import subprocess
import sys

import pytest

EXAMPLES = sorted(pathlib.Path(__file__).resolve().parents[1].joinpath("examples").glob("*.py"))

# The result line each example's header promises (an example not listed must print something).
PROMISED = {
    "distributed_training.py": ["over 2 replica(s)", "test accuracy:", "saved "],
    "export_tf_serving.py": ["exported ", "serve_bytes and serving_default agree: True"],
    "finetune_families.py": ["dinov2: linear probe: test accuracy", "siglip: fine-tuned: test accuracy"],
    "finetune_pretrained.py": ["8x8 grid -> 12x12 grid", "test accuracy:", "same predictions"],
    "hybrid_vit.py": ["r_tiny_hybrid: test accuracy", "mobilenetv2_hybrid: test accuracy", "same predictions"],
    "mixed_precision_xla.py": ["fastest: "],
    "serving_client.py": [":predict: 3 images", ".png: "],
    "tflite_inference.py": ["none ", "int8 ", "agreement with Keras", "int8 interpreter: "],
    "train_cifar10.py": ["test accuracy:", "same predictions"],
    "train_fashion_mnist.py": ["test accuracy:", "same predictions"],
    "visualize_attention.py": ["rollout.png", "position_embedding_similarity.png",
                               "mean_attention_distance.png", "patch_embedding_filters.png"],
}


def test_every_example_has_a_header():
    assert EXAMPLES, "examples/ has no scripts"
    for path in EXAMPLES:
        header = path.read_text().split('"""')[1]
        for field in ("Command:", "Expected runtime:", "--smoke"):
            assert field in header, f"{path.name}: header lacks {field!r}"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_smoke_run(path, tmp_path):
    # TMPDIR keeps the examples' temporary output folders inside pytest's, which it cleans up.
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", TMPDIR=str(tmp_path))
    before = sorted(os.listdir(path.parent))
    result = subprocess.run(
        [sys.executable, str(path), "--smoke"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert result.stdout.strip(), f"{path.name} printed nothing"
    for promised in PROMISED.get(path.name, []):
        assert promised in result.stdout, f"{path.name} did not print {promised!r}:\n{result.stdout[-2000:]}"
    # Outputs go to temporary folders or under the working directory, never into the repository.
    assert sorted(os.listdir(path.parent)) == before, f"{path.name} wrote into examples/"
