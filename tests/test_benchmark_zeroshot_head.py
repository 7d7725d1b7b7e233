"""benchmarks/zeroshot_head.py (`python -m benchmarks zeroshot-head`) runs its steps on tiny settings and records what it did.

Its figures belong to benchmarks/RESULTS.md; this checks that the steps still work together: a
CLIP folder trained by transformers that keras_vit reads, and the `keras-vit train` arms run
in this process instead of worker processes.
"""

from __future__ import annotations

import importlib
import json
import os

import numpy as np
import pytest


def test_zeroshot_head_benchmark_pretrains_a_clip_folder_and_adapts_from_its_head(tmp_path, monkeypatch):
    from PIL import Image

    from benchmarks import workers

    module = importlib.import_module("benchmarks.zeroshot_head")
    missing = module._fixtures().missing()
    if missing:
        pytest.skip(missing)
    rng = np.random.default_rng(0)
    for name in module.CLASSES:
        (tmp_path / "cifar" / name).mkdir(parents=True)
        for i in range(5):
            Image.fromarray(rng.integers(0, 255, (32, 32, 3)).astype("uint8")).save(tmp_path / "cifar" / name / f"{i}.jpg")
    work = str(tmp_path / "work")
    module.main(["prepare", "--source", str(tmp_path / "cifar"), "--work", work, "--train-per-class", "2",
                 "--test-per-class", "2"])
    # Disjoint: the first two of each class adapt, the last two score, the one between pre-trains.
    assert sorted(os.listdir(os.path.join(work, "pretrain", "cat"))) == ["2.jpg"]
    assert sorted(os.listdir(os.path.join(work, "adapt", "test", "cat"))) == ["3.jpg", "4.jpg"]
    module.main(["pretrain", "--work", work, "--towers", "smoke", "--max-steps", "2", "--batch-size", "8"])
    with open(os.path.join(work, "pretrain.json")) as f:
        pretrained = json.load(f)
    assert (pretrained["steps"], pretrained["pretrain_images"]) == (2, 10)
    assert {"config.json", "model.safetensors", "vocab.json", "preprocessor_config.json"} <= set(
        os.listdir(os.path.join(work, "clip")))
    assert not os.path.exists(os.path.join(work, "clip.partial"))

    def in_process(target, kwargs, **_):
        module_name, function = target.split(":")
        return getattr(importlib.import_module(module_name), function)(**kwargs)

    monkeypatch.setattr(workers, "run_worker", in_process)
    # XLA's compilation of the step would be most of a one-epoch run.
    monkeypatch.setitem(module.ARMS, "zeroshot_head", (*module.ARMS["zeroshot_head"], "--jit-compile", "off"))
    module.main(["adapt", "--work", work, "--budget-minutes", "0.5", "--epochs", "1", "--arms", "zeroshot_head",
                 "--out", str(tmp_path / "out")])
    (lines,) = (tmp_path / "out").glob("zeroshot-head-*.jsonl")
    _, _, only, tuned = [json.loads(line) for line in lines.read_text().splitlines()]
    # keras_vit's zero-shot classifier scores the 20 images as transformers does (one near-tie may differ).
    assert abs(only["accuracy"] - pretrained["transformers_zeroshot_accuracy"]) <= 1 / 20, (only, pretrained)
    assert (tuned["arm"], tuned["adapt"], tuned["epochs_done"], tuned["num_test"]) == ("zeroshot_head", "finetune", 1, 20)
    assert "--head zeroshot" in tuned["command"]
    table = next((tmp_path / "out").glob("zeroshot-head-*.md")).read_text()
    assert "| zero-shot only, no training |" in table and "| zeroshot_head | `--head zeroshot " in table, table
