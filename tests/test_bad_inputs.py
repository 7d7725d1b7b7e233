"""Bad input, table-driven: each wrong value is refused with its argument's name, or accepted for a stated reason.

Recipes and learning-rate schedules first (issue 29): a negative, zero, NaN or infinite rate used
to be accepted and trained with a negative or NaN learning rate.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from keras_vit.training import recipes

NAN, INF = float("nan"), float("inf")
BASE = recipes.get_recipe("deit")

# (field, bad value): every one must be refused naming the field and the value.
RECIPE_REFUSED = [
    ("learning_rate", -5), ("learning_rate", 0), ("learning_rate", NAN), ("learning_rate", INF), ("learning_rate", "1e-3"),
    ("weight_decay", -0.1), ("weight_decay", NAN), ("warmup_epochs", -1), ("warmup_steps", -1), ("warmup_steps", 2.5),
    ("min_learning_rate_ratio", 1.5), ("min_learning_rate_ratio", -0.1), ("label_smoothing", 1.0),
    ("label_smoothing", -0.1), ("drop_path_rate", 1.0), ("beta_2", 1.0), ("momentum", -0.5), ("clip_norm", 0),
    ("clip_norm", -1.0), ("clip_norm", NAN), ("reference_batch_size", 0), ("batch_size", 0), ("batch_size", 2.0),
    ("optimizer", "adam"), ("schedule", "linear"), ("augment", "heavy"), ("decay_all", "yes"), ("name", ""),
    ("learning_rate", True),
]
# Accepted, and why: edges that mean something.
RECIPE_ACCEPTED = [
    ("weight_decay", 0.0),  # no decay
    ("warmup_epochs", 0.0),  # no warmup
    ("min_learning_rate_ratio", 1.0),  # a cosine that stays at the peak: constant after warmup
    ("clip_norm", None),  # no clipping
    ("learning_rate", np.float32(1e-3)),  # NumPy scalars are numbers
]


@pytest.mark.backends("tensorflow", "jax", "torch")
@pytest.mark.parametrize("field, value", RECIPE_REFUSED)
def test_recipe_refuses(field, value):
    with pytest.raises(ValueError, match=rf"Invalid {field}="):
        dataclasses.replace(BASE, **{field: value})


@pytest.mark.backends("tensorflow", "jax", "torch")
@pytest.mark.parametrize("field, value", RECIPE_ACCEPTED)
def test_recipe_accepts(field, value):
    assert getattr(dataclasses.replace(BASE, **{field: value}), field) == value


@pytest.mark.backends("tensorflow", "jax", "torch")
@pytest.mark.parametrize("arguments, field", [
    (dict(peak=NAN, total_steps=10), "peak"), (dict(peak=-1.0, total_steps=10), "peak"),
    (dict(peak=0.0, total_steps=10), "peak"), (dict(peak=INF, total_steps=10), "peak"),
    (dict(peak=1.0, total_steps=0), "total_steps"), (dict(peak=1.0, total_steps=NAN), "total_steps"),
    (dict(peak=1.0, total_steps=10, warmup_steps=-2), "warmup_steps"),
    (dict(peak=1.0, total_steps=10, min_ratio=2.0), "min_ratio"),
])
def test_warmup_cosine_refuses(arguments, field):
    with pytest.raises(ValueError, match=rf"Invalid {field}="):
        recipes.WarmupCosine(**arguments)


@pytest.mark.backends("tensorflow", "jax", "torch")
def test_every_schedule_value_is_finite_and_non_negative():
    schedule = recipes.make_schedule(BASE, batch_size=256, steps_per_epoch=7, epochs=3)
    rates = [float(schedule(step)) for step in range(0, 30)]
    assert all(math.isfinite(r) and r >= 0 for r in rates) and max(rates) == pytest.approx(BASE.learning_rate_for(256))


def test_non_finite_pixels_are_refused_before_any_model_sees_them(tmp_path):
    """The int8 TFLite file answered NaN pixels with plausible probabilities; now every route refuses them."""
    import keras_vit
    import tensorflow as tf
    from keras_vit import export
    from keras_vit.export.saved_model import error_text

    model = keras_vit.ViT("tiny", num_classes=3, preprocessing="unit")
    images = np.random.default_rng(0).uniform(0, 255, (3, 32, 32, 3)).astype("float32")
    bad = images.copy()
    bad[1, 4, 4, 0] = np.nan
    serving = tf.saved_model.load(export.saved_model(model, str(tmp_path / "serving"))).signatures["serving_default"]
    assert serving(images=tf.constant(images))["probabilities"].shape == (3, 3)
    for value in (np.nan, np.inf, -np.inf):
        bad[1, 4, 4, 0] = value
        with pytest.raises(tf.errors.InvalidArgumentError) as error:
            serving(images=tf.constant(bad))
        assert error_text(error.value) == "images[1] holds NaN or infinite pixels; expected values in [0, 255]."
    int8 = export.tflite(model, str(tmp_path / "int8.tflite"), "int8", representative_data=images).path
    for path in (int8, str(tmp_path / "serving"), str(tmp_path / "serving" / "1")):
        predictor = export.load_predictor(path)
        assert predictor.predict(images).shape == (3, 3)
        with pytest.raises(ValueError, match=r"images\[1\] holds NaN or infinite pixels"):
            predictor.predict(bad)


@pytest.mark.backends("tensorflow", "jax", "torch")
def test_contradicting_num_classes_and_classes_is_refused():
    """Issue 29: ViT(num_classes=3, classes=5) built a 5-class head in silence."""
    import keras_vit

    with pytest.raises(ValueError, match=r"num_classes=3 and classes=5"):
        keras_vit.ViT("tiny", num_classes=3, classes=5)
    assert keras_vit.ViT("tiny", num_classes=3, classes=3).output_shape == (None, 3)  # the same: accepted
    assert keras_vit.ViT("tiny", classes=4).output_shape == (None, 4)


@pytest.mark.backends("tensorflow", "jax", "torch")
def test_wrong_channels_are_named_before_the_convolution():
    """Issue 29: a 1-channel model on a 3-channel batch failed with Conv2D's 'number of groups (3)'."""
    import keras_vit

    model = keras_vit.ViT("tiny", num_classes=3, input_shape=(32, 32, 1), preprocessing="unit")
    with pytest.raises(ValueError, match=r"shape \(2, 32, 32, 3\).*takes 1 channel"):
        model(np.zeros((2, 32, 32, 3), "float32"))
    assert tuple(model(np.zeros((2, 32, 32, 1), "float32")).shape) == (2, 3)


@pytest.mark.backends("tensorflow", "jax", "torch")
@pytest.mark.parametrize("side", [0, 30, 2])
def test_free_image_size_refuses_sides_the_patch_does_not_divide(side):
    """Issue 29: with image_size=None a 30x30 image for patch 4 gave the output of its 28x28 crop, a 0x0
    image vanished from the batch, and 2x2 failed in a reshape about 'a multiple of 128'."""
    import keras_vit

    model = keras_vit.ViT("tiny", num_classes=3, input_shape=(None, None, 3), position_embedding="sincos2d",
                          preprocessing="unit")
    with pytest.raises(ValueError, match=rf"Invalid image height={side} .*multiples of patch_size=4"):
        model(np.zeros((1, side, side, 3), "float32"))
    assert tuple(model(np.zeros((1, 28, 28, 3), "float32")).shape) == (1, 3)


def test_free_image_size_refuses_sides_unknown_until_run_time():
    """Issue 29: in a user's tf.function with unknown sides, a 30x30 image for patch 4 gave the output of its
    28x28 crop and a 0x0 image vanished from the batch (shape (0, classes)): only known sides were checked."""
    import keras_vit
    import tensorflow as tf
    from keras_vit.data.image_io import error_text

    model = keras_vit.ViT("tiny", num_classes=3, input_shape=(None, None, 3), position_embedding="sincos2d",
                          preprocessing="unit")
    call = tf.function(lambda images: model(images), input_signature=[tf.TensorSpec([None, None, None, 3])])
    assert tuple(call(tf.zeros((2, 28, 32, 3))).shape) == (2, 3)
    for shape, side, value in [((1, 30, 30, 3), "height", 30), ((1, 0, 0, 3), "height", 0), ((1, 28, 2, 3), "width", 2)]:
        with pytest.raises(tf.errors.InvalidArgumentError) as error:
            call(tf.zeros(shape))
        assert error_text(error.value) == (
            f"Invalid image {side}={value} for model vit_tiny (images of shape [{' '.join(map(str, shape))}]): with "
            "a free image size, height and width must be positive multiples of patch_size=4.")


def test_known_sides_add_no_run_time_check():
    """The check of unknown sides costs nothing where the sides are known (every fixed-size model, XLA training)."""
    import keras_vit
    import tensorflow as tf

    model = keras_vit.ViT("tiny", num_classes=3, input_shape=(None, None, 3), position_embedding="sincos2d",
                          preprocessing="unit")
    graph = tf.function(lambda images: model(images)).get_concrete_function(tf.TensorSpec([None, 28, 28, 3])).graph
    assert not [op for op in graph.get_operations() if op.type == "Assert"]


def test_saved_model_with_a_free_size_refuses_sides_the_patch_does_not_divide(tmp_path):
    import keras_vit
    import tensorflow as tf
    from keras_vit import export
    from keras_vit.export.saved_model import error_text

    model = keras_vit.ViT("tiny", num_classes=3, input_shape=(None, None, 3), position_embedding="sincos2d",
                          preprocessing="unit")
    serving = tf.saved_model.load(export.saved_model(model, str(tmp_path / "s"))).signatures["serving_default"]
    assert serving(images=tf.zeros((2, 28, 28, 3)))["probabilities"].shape == (2, 3)
    for shape in [(1, 30, 30, 3), (1, 0, 0, 3), (1, 2, 2, 3)]:
        with pytest.raises(tf.errors.InvalidArgumentError) as error:
            serving(images=tf.zeros(shape))
        assert "positive multiples of 4 (the patch)" in error_text(error.value), error_text(error.value)


def test_evaluate_names_a_keras_file_that_is_no_image_classifier(tmp_path, capsys):
    """Issue 29: `keras-vit evaluate` on another .keras file said 'not enough values to unpack (expected 3, got 1)'."""
    import keras
    from keras_vit import cli

    path = str(tmp_path / "dense.keras")
    keras.Sequential([keras.Input((8,)), keras.layers.Dense(10)]).save(path)
    assert cli.main(["evaluate", path, "--max-examples", "16"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "dense.keras" in err and "expected images (batch, height, width, channels)" in err


def test_inspect_out_that_is_a_file_is_one_line(tmp_path, capsys):
    """Issue 29: `keras-vit inspect ... --out FILE` with FILE an existing file ended in a FileExistsError traceback."""
    import keras_vit
    from keras_vit import cli

    pytest.importorskip("matplotlib")
    model = str(tmp_path / "vit.keras")
    keras_vit.ViT("tiny", num_classes=3, preprocessing="unit").save(model)
    taken = tmp_path / "figures"
    taken.write_text("not a folder")
    assert cli.main(["inspect", model, "--out", str(taken)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--out" in err and "it is a file" in err
    assert taken.read_text() == "not a folder"


def test_header_counts_the_validation_images_used(tmp_path, capsys):
    """Issue 29: with --max-test-examples 256 the header still said 'validation: 2,000 in-memory images'."""
    from keras_vit import cli

    argv = ["train", "--variant", "tiny", "--image-size", "28", "--num-layers", "1", "--epochs", "1", "--batch-size", "32",
            "--max-train-examples", "64", "--max-test-examples", "48", "--validation-split", "0.1", "--quiet",
            "--jit-compile", "off", "--precision", "float32", "--no-export", "--run-dir", str(tmp_path / "run"),
            "--output-dir", str(tmp_path / "out")]
    assert cli.main(argv) == 0, capsys.readouterr().err
    header = capsys.readouterr().out
    assert "validation: the first 48 of " in header, header


def test_a_folder_run_prints_no_ran_out_of_data_warning(tmp_path, capsys):
    """Issue 29: every folder run printed Keras' 'Your input ran out of data' (its length is unknown)."""
    import warnings

    import tensorflow as tf
    from keras_vit import cli

    for c in range(2):
        (tmp_path / "data" / f"c{c}").mkdir(parents=True)
        for i in range(12):
            pixels = np.random.default_rng(i + 100 * c).integers(0, 256, (16, 16, 3)).astype("uint8")
            (tmp_path / "data" / f"c{c}" / f"{i}.png").write_bytes(tf.io.encode_png(pixels).numpy())
    argv = ["train", "--dataset", str(tmp_path / "data"), "--num-layers", "1", "--epochs", "2", "--batch-size", "8",
            "--quiet", "--jit-compile", "off", "--precision", "float32", "--no-export",
            "--run-dir", str(tmp_path / "run"), "--output-dir", str(tmp_path / "out")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli.main(argv) == 0, capsys.readouterr().err
    assert not [w for w in caught if "ran out of data" in str(w.message)]
    assert not list((tmp_path / "run").rglob(".tmp*")), "a temporary file was left in the run directory"


def _folder_with_a_cut_jpeg(root):
    import tensorflow as tf

    for c in range(2):
        (root / f"c{c}").mkdir(parents=True)
        for i in range(8):
            pixels = np.random.default_rng(i + 100 * c).integers(0, 256, (16, 16, 3)).astype("uint8")
            (root / f"c{c}" / f"{i}.jpg").write_bytes(tf.io.encode_jpeg(pixels).numpy())
    whole = tf.io.encode_jpeg(np.zeros((16, 16, 3), "uint8")).numpy()
    (root / "c0" / "cut.jpg").write_bytes(whole[: len(whole) // 2])  # a valid header, a truncated body
    return str(root)


def test_on_corrupt_error_names_the_file_in_one_line(tmp_path, capsys):
    """Issue 29: a truncated JPEG under --on-corrupt error gave a 50-line TensorFlow traceback in epoch 1."""
    from keras_vit import cli

    root = _folder_with_a_cut_jpeg(tmp_path / "data")
    argv = ["train", "--dataset", root, "--num-layers", "1", "--epochs", "1", "--batch-size", "4", "--quiet",
            "--jit-compile", "off", "--precision", "float32", "--no-export", "--on-corrupt", "error",
            "--run-dir", str(tmp_path / "run"), "--output-dir", str(tmp_path / "out")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cut.jpg" in err and "--on-corrupt skip" in err, err[:3000]


def test_counts_are_of_images_used_and_evaluate_reports_skipped_files(tmp_path, capsys):
    """Issue 29: with --on-corrupt skip, the header, vit.json and evaluate counted the files listed (a JPEG with a
    valid header and a cut body is skipped while decoding, after the count) as images, and evaluate never said it
    skipped one."""
    import json

    from keras_vit import cli

    root = _folder_with_a_cut_jpeg(tmp_path / "data")  # 17 files listed, 16 decode
    out = tmp_path / "out"
    argv = ["train", "--dataset", root, "--num-layers", "1", "--epochs", "1", "--batch-size", "4", "--quiet",
            "--jit-compile", "off", "--precision", "float32", "--no-export", "--validation-split", "0.25",
            "--run-dir", str(tmp_path / "run"), "--output-dir", str(out)]
    assert cli.main(argv) == 0, capsys.readouterr().err
    header = capsys.readouterr().out
    import re

    # The header comes before any decoding: it says what it counts, files listed (the cut one among them).
    listed = int(re.search(r"train (\d+) files listed \(train\)", header).group(1))
    assert re.search(r"validation: \d+ files listed of 2 classes in ", header), header
    summary = json.loads((out / "vit.json").read_text())
    cut_in_train = any("cut.jpg" in f for f in summary["skipped_files"])
    assert summary["num_train_examples"] == listed - cut_in_train
    # The two shares hold 17 files, one of them cut: together 16 images scored and one file reported.
    used, reported = 0, 0
    for split in ("train", "validation"):
        argv = ["evaluate", str(out / "vit.keras"), "--dataset", root, "--split", split, "--validation-split", "0.25"]
        assert cli.main(argv) == 0
        printed = capsys.readouterr().out
        used += int(re.search(r"on (\d+) examples", printed).group(1))
        reported += printed.count("Skipped 1 corrupt image files") and "cut.jpg" in printed
    assert (used, reported) == (16, 1)
