"""`keras-vit train --weights SPEC --head zeroshot` (issue 52): fine-tuning starts from the zero-shot head an
image-text checkpoint's text tower folds from the data's class names; the refusals name --head.

The checkpoints are the tiny random two-tower folders of `tests/_image_text_fixtures.py`.
"""

import os

import numpy as np
import pytest
from PIL import Image

import _image_text_fixtures as fixtures

pytestmark = pytest.mark.skipif(fixtures.missing() is not None, reason=str(fixtures.missing()))

CLASSES = ("cat", "dog", "airplane")


def _folder(root, classes=CLASSES, per_class=4, size=24):
    """train/ and test/ class folders of random colour PNGs."""
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for name in classes:
            os.makedirs(root / split / name)
            for i in range(per_class):
                Image.fromarray(rng.integers(0, 256, (size, size, 3)).astype("uint8")).save(root / split / name / f"{i}.png")
    return str(root)


def _train(tmp_path, *flags):
    from keras_vit import cli

    return cli.main(["train", "--jit-compile", "off", "--run-dir", str(tmp_path / "run"), "--output-dir",
                     str(tmp_path / "out"), "--name", "m", "--quiet", "--no-export", *flags])


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_the_model_starts_from_the_zero_shot_classifiers_scores(kind, tmp_path, tmp_path_factory):
    import keras_vit
    from keras_vit.train_options import TrainConfig, header_parts
    from keras_vit.training import plan as plan_lib, recipes

    folder, _ = fixtures.made(kind, tmp_path_factory)
    data = _folder(tmp_path / "data")
    plan = plan_lib.resolve(TrainConfig(dataset=data, weights=folder, head="zeroshot", budget_seconds=60,
                                        run_dir=None, output_dir=None, precision="float32"))
    # A budget's auto adaptation would probe first: the zero-shot head takes the probe's place.
    assert plan.adapt == "finetune" and "zero-shot head" in plan.adapt_reason
    assert plan.train.class_names == tuple(sorted(CLASSES))
    model = plan_lib.build_model(plan)
    zeroshot = keras_vit.zeroshot_classifier(folder, plan.train.class_names)
    pixels = np.random.default_rng(1).uniform(0, 255, (3, *model.input_shape[1:])).astype("float32")
    expected = zeroshot.predict(pixels, verbose=0)
    if kind == "siglip":  # its sigmoid logits (the same scale and bias for every class), under softmax
        logits = np.log(expected) - np.log1p(-expected)
        expected = np.exp(logits - logits.max(-1, keepdims=True))
        expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(model.predict(pixels, verbose=0), expected, atol=1e-5)
    # Trained as every keras_vit classifier: softmax cross-entropy on its probabilities.
    assert model.layers[-1].activation.__name__ == "softmax"
    assert recipes.make_loss(plan.recipe, model).get_config()["from_logits"] is False
    scores = {"clip": "its softmax", "siglip": "its sigmoid logits, under softmax"}[kind]
    assert (f"the zero-shot head of its {kind} text tower for 3 class names ('This is a photo of {{}}.'; {scores})"
            in header_parts(plan)["weights"])


@pytest.mark.parametrize("flags, message", [
    (["--head", "zeroshot"], "--head='zeroshot' adapts a checkpoint: pass --weights too"),
    (["--head", "zeroshot", "--weights", "x", "--probe"], "Contradicting --head='zeroshot' and --adapt='probe'"),
])
def test_contradicting_flags_are_refused_before_the_data_is_read(flags, message, tmp_path, capsys):
    assert _train(tmp_path, "--dataset", str(tmp_path / "missing"), *flags) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_a_checkpoint_without_a_text_tower_or_numbered_classes_are_refused_naming_head(tmp_path, tmp_path_factory,
                                                                                       capsys):
    import keras_vit

    image_only = str(tmp_path / "vit")
    keras_vit.weights.save_hf(keras_vit.ViT("tiny", num_classes=2, image_size=16, preprocessing="imagenet"), image_only)
    data = _folder(tmp_path / "data", classes=CLASSES[:2], per_class=2)
    assert _train(tmp_path, "--dataset", data, "--weights", image_only, "--head", "zeroshot") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Contradicting --head='zeroshot' and --weights=" in err, err
    assert "holds no text tower" in err and "Leave --head out" in err

    numbered = _folder(tmp_path / "numbered", classes=("0", "1"), per_class=2)
    folder, _ = fixtures.made("clip", tmp_path_factory)
    capsys.readouterr()  # transformers' own lines while the fixture writes its folder (the first time in a process)
    assert _train(tmp_path, "--dataset", numbered, "--weights", folder, "--head", "zeroshot") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "numbered, not named" in err and "--head" in err, err
