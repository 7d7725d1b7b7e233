"""Bad input, table-driven: each wrong value is refused with its argument's name, or accepted for a stated reason.

Recipes and learning-rate schedules first (issue 29): a negative, zero, NaN or infinite rate used
to be accepted and trained with a negative or NaN learning rate.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os

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
    # Under XLA, which drops assertions, the same images answered as their crops; now they fail to
    # compile or to reshape (XLA's own words: it has no way to raise ours).
    compiled = tf.function(lambda images: model(images), input_signature=[tf.TensorSpec([None, None, None, 3])],
                           jit_compile=True)
    np.testing.assert_allclose(compiled(tf.ones((2, 28, 32, 3))), call(tf.ones((2, 28, 32, 3))), atol=1e-5)
    for shape in [(1, 30, 30, 3), (1, 0, 0, 3), (1, 28, 2, 3), (2, 31, 28, 3)]:
        with pytest.raises(tf.errors.InvalidArgumentError):
            compiled(tf.zeros(shape))


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


def _always_first_class(tmp_path, labels):
    """A saved classifier that predicts its class 0 for every image, `labels` written beside it as train does."""
    import keras_vit

    model = keras_vit.ViT("tiny", num_classes=2, input_shape=(16, 16, 3), patch_size=8, preprocessing="unit")
    kernel, bias = model.get_layer("head").get_weights()
    model.get_layer("head").set_weights([np.zeros_like(kernel), np.array([10.0, -10.0], bias.dtype)])
    path = tmp_path / "vit.keras"
    model.save(path)
    (tmp_path / "vit.labels.txt").write_text("".join(f"{name}\n" for name in labels))
    return str(path)


def _class_folder(root, counts):
    from PIL import Image

    for name, count in counts.items():
        (root / name).mkdir(parents=True)
        for i in range(count):
            Image.fromarray(np.full((16, 16, 3), 40 * i, "uint8")).save(root / name / f"{i}.png")
    return str(root)


def test_evaluate_matches_the_models_class_names_to_the_folders_or_refuses(tmp_path, capsys):
    """`keras-vit evaluate` scored labels by index only: a model of classes (dog, cat) on a folder of cat/ and dog/
    reported the accuracy of the wrong classes, and a model of other classes scored without a word."""
    from keras_vit import cli

    _class_folder(tmp_path / "photos" / "train", {"cat": 1, "dog": 1})
    _class_folder(tmp_path / "photos" / "test", {"cat": 3, "dog": 1})  # labels by sorted names: cat 0, dog 1
    folder = str(tmp_path / "photos")
    model = _always_first_class(tmp_path, ["dog", "cat"])  # predicts "dog" for everything
    assert cli.main(["evaluate", model, "--dataset", folder]) == 0
    out = capsys.readouterr().out
    assert "accuracy 0.2500" in out and "matched to the model's by name" in out, out
    assert cli.main(["evaluate", model, "--dataset", folder, "--by-index"]) == 0
    assert "accuracy 0.7500" in capsys.readouterr().out

    (tmp_path / "vit.labels.txt").write_text("zebra\napple\n")
    assert cli.main(["evaluate", model, "--dataset", folder]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "['cat', 'dog'] are not the model's ['zebra', 'apple']" in err, err
    assert "--by-index" in err


def test_evaluate_names_a_folder_or_a_cut_off_file_given_as_the_model(tmp_path, capsys):
    """A folder read 'Model file not found', and a cut-off .keras file 'File not found: filepath=...'."""
    from keras_vit import cli

    model = _always_first_class(tmp_path, ["a", "b"])
    cut = tmp_path / "cut.keras"
    cut.write_bytes(open(model, "rb").read()[:3000])
    for path, expected in [(tmp_path, "a folder; expected a .keras file"), (cut, "not a readable .keras file")]:
        assert cli.main(["evaluate", str(path), "--max-examples", "4"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and expected in err and str(path) in err, err


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


# A writer killed inside keras_vit's atomic write, between its temporary file and the rename.
_KILLED_WRITER = "import os, sys; from keras_vit import _atomic; write = _atomic.atomic_file(sys.argv[1]); " \
    "open(write.__enter__(), 'w').write('half'); os._exit(9)"


def test_a_run_resumed_after_a_kill_leaves_no_temporary_file_and_evaluate_no_warning(tmp_path, capsys):
    """Issue 43: a run left .tmp-last.keras-* in its checkpoints folder and .tmp-vit.labels.txt-* in the output
    folder (a killed write's temporaries were never removed), and every folder evaluate printed Keras' 'Your input
    ran out of data' warning."""
    import os
    import subprocess
    import sys
    import warnings

    from keras_vit import cli

    for c in range(2):
        _images(tmp_path / "data" / f"c{c}", 6)
    run, out = tmp_path / "run", tmp_path / "out"
    for path in (run / "checkpoints" / "last.keras", out / "vit.labels.txt"):
        subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(path)], env=dict(os.environ), timeout=60)
        assert [p.name.startswith(f".tmp-{path.name}-") for p in path.parent.iterdir()] == [True]
    argv = ["train", "--dataset", str(tmp_path / "data"), "--num-layers", "1", "--epochs", "1", "--batch-size", "4",
            "--quiet", "--jit-compile", "off", "--precision", "float32", "--no-export", "--run-dir", str(run),
            "--output-dir", str(out)]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert not [str(p) for p in (*run.rglob(".tmp*"), *out.rglob(".tmp*"))]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli.main(["evaluate", str(out / "vit.keras"), "--dataset", str(tmp_path / "data"),
                         "--split", "validation"]) == 0, capsys.readouterr().err
    assert not [w for w in caught if "ran out of data" in str(w.message)]


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
    # Batch 1: an epoch of whole batches then reads every training file, whatever the order.
    argv = ["train", "--dataset", root, "--num-layers", "1", "--epochs", "1", "--batch-size", "1", "--quiet",
            "--jit-compile", "off", "--precision", "float32", "--no-export", "--on-corrupt", "error",
            "--run-dir", str(tmp_path / "run"), "--output-dir", str(tmp_path / "out")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cut.jpg" in err and "--on-corrupt skip" in err, err[:3000]


# Run in a fresh process: a cut JPEG first in a folder of 128 px images, so decoding is under way
# when the error comes, then `keras-vit evaluate --on-corrupt error` several times, then exit.
_EXIT_SCRIPT = """
import gc, os, sys
import numpy as np, tensorflow as tf, keras_vit
from keras_vit import cli
root, model = sys.argv[1], sys.argv[1] + ".keras"
for c in range(2):
    os.makedirs(os.path.join(root, f"c{c}"))
    for i in range(40):
        pixels = np.random.default_rng(i + 100 * c).integers(0, 256, (128, 128, 3)).astype("uint8")
        tf.io.write_file(os.path.join(root, f"c{c}", f"{i:02d}.jpg"), tf.io.encode_jpeg(pixels))
whole = tf.io.encode_jpeg(np.zeros((128, 128, 3), "uint8")).numpy()
open(os.path.join(root, "c0", "00cut.jpg"), "wb").write(whole[: len(whole) // 2])
keras_vit.ViT("tiny", num_classes=2, input_shape=(16, 16, 3), num_layers=1, preprocessing="unit").save(model)
for _ in range(int(sys.argv[2])):
    argv = ["evaluate", model, "--dataset", root, "--split", "train", "--on-corrupt", "error", "--batch-size", "32"]
    assert cli.main(argv) == 2
    # Closed before the command returned, not left to the interpreter's shutdown.
    assert not [o for o in gc.get_objects() if isinstance(o, tf.data.Iterator)], "an input pipeline is still open"
print("exiting", flush=True)
"""


def test_on_corrupt_error_closes_the_pipeline_and_the_process_exits(tmp_path):
    """Issue 43: after the one-line error, evaluate --on-corrupt error never exited in 3 of 10 runs (its
    pipeline decoded through Python, whose threads were still at work while the interpreter shut down).
    Two evaluations: the script checks after each that no input pipeline is left open, which is what
    made the exit hang, so a repeat proves no more than the first run did."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    try:
        result = subprocess.run([sys.executable, "-c", _EXIT_SCRIPT, str(tmp_path / "data"), "2"],
                                capture_output=True, text=True, env=env, timeout=150)
    except subprocess.TimeoutExpired as timeout:
        pytest.fail(f"the process did not exit: {(timeout.stdout or b'')[-300:]!r}")
    assert result.returncode == 0 and result.stdout.strip().endswith("exiting"), result.stderr[-2000:]
    assert result.stderr.count("Corrupt image file") == 2 and "00cut.jpg" in result.stderr


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
        reported += printed.count("Skipped 1 corrupt image file:") and "cut.jpg" in printed
    assert (used, reported) == (16, 1)


# --- Folder layouts: refused before any model is built, in one line naming the folder, class or path --------
def _images(folder, count=3):
    import tensorflow as tf

    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        pixels = np.random.default_rng(i).integers(0, 256, (8, 8, 3)).astype("uint8")
        (folder / f"{i}.png").write_bytes(tf.io.encode_png(pixels).numpy())


def _layout_empty_class(root):
    _images(root / "cat"), _images(root / "dog"), (root / "zebra").mkdir()


def _layout_corrupt_only_class(root):
    _images(root / "cat"), _images(root / "dog"), (root / "zebra").mkdir()
    (root / "zebra" / "1.jpg").write_bytes(b"not an image")


def _layout_one_class(root):
    _images(root / "cat")


def _layout_folder_link_loop(root):
    _images(root / "cat"), _images(root / "dog")
    (root / "a").symlink_to(root / "b"), (root / "b").symlink_to(root / "a")


def _layout_file_link_loop(root):
    _images(root / "cat"), _images(root / "dog")
    (root / "cat" / "loop.jpg").symlink_to(root / "cat" / "loop.jpg")


def _layout_split_folder_empty_class(root):
    for split in ("train", "test"):
        _images(root / split / "cat"), _images(root / split / "dog")
    (root / "train" / "zebra").mkdir()


def _layout_dataset_is_a_loop(root):
    root.parent.mkdir(exist_ok=True)
    root.symlink_to(root)


FOLDER_REFUSED = [  # (layout, what the one line must say); {root} is the data set folder
    (_layout_empty_class, "Class sub-folder 'zebra' of directory='{root}' holds no readable image"),
    (_layout_corrupt_only_class, "Class sub-folder 'zebra' (1 file was corrupt) of directory='{root}' holds no readable"),
    (_layout_one_class, "directory='{root}' has one class sub-folder, 'cat': a classifier needs at least 2 classes"),
    (_layout_folder_link_loop, "Symbolic link loop in an image folder: '{root}/a' leads back to itself"),
    (_layout_file_link_loop, "Symbolic link loop in an image folder: '{root}/cat/loop.jpg' leads back to itself"),
    (_layout_split_folder_empty_class, "Class sub-folder 'zebra' of directory='{root}/train' holds no readable image"),
    (_layout_dataset_is_a_loop, "Symbolic link loop in an image folder: '{root}' leads back to itself"),
]


@pytest.mark.parametrize("command", ["train", "evaluate"])
@pytest.mark.parametrize("layout, text", FOLDER_REFUSED, ids=lambda case: getattr(case, "__name__", "")[8:])
def test_folder_layouts_are_refused_in_one_line(layout, text, command, tmp_path, capsys):
    """Issue 43: an empty class trained a model with a class of no example, one class a 1-class softmax that
    always says 1.0, and a symbolic link loop ended train and evaluate in a 25-line OSError traceback."""
    from keras_vit import cli

    root = tmp_path / "data"
    layout(root)
    if command == "train":
        argv = ["train", "--dataset", str(root), "--no-export", "--run-dir", str(tmp_path / "run"),
                "--output-dir", str(tmp_path / "out")]
    else:  # the model file is not read: the data are refused first
        (tmp_path / "m.keras").write_text("")
        split = "train" if (root / "train").is_dir() else "validation"
        argv = ["evaluate", str(tmp_path / "m.keras"), "--dataset", str(root), "--split", split]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and text.format(root=root) in err, err
    assert not (tmp_path / "run").exists() and not (tmp_path / "out").exists()


def test_validation_split_is_checked_against_the_examples_counted(tmp_path):
    """Issue 43: --validation-split 0.8 (any value >= 0.75) was refused as 'of 2 examples' whatever the data,
    the fraction checked against a fixed count before any data was read."""
    from keras_vit.data import sources

    assert sources.load_source("sample", "train", validation_split=0.8).num_examples == 1600  # of 8,000
    _images(tmp_path / "cat", 5), _images(tmp_path / "dog", 5)
    train, validation, test = sources.load_splits(str(tmp_path), validation_split=0.8)
    assert (train.num_examples, validation.num_examples, test) == (2, 8, None)
    with pytest.raises(ValueError, match=r"validation_split=0.95 of 10 examples leaves none to train on"):
        sources.load_splits(str(tmp_path), validation_split=0.95)


# --- Every key a Hugging Face family's config.json is read for: CheckpointError naming the file and the key --
_TINY = dict(patch_size=4, hidden_size=12, num_layers=1, num_heads=2, mlp_dim=24, image_size=8)
# model_type -> the keras_vit.ViT arguments save_hf writes it from.
_FAMILY_MODELS = {
    "vit": dict(num_classes=3),
    "deit": dict(distillation_token=True, num_classes=3),
    "dinov2": dict(layer_scale_init=0.1, include_top=False),
    "dinov2_with_registers": dict(layer_scale_init=0.1, num_register_tokens=2, include_top=False),
    "siglip_vision_model": dict(class_token=False, pooling="map", include_top=False),
    "clip_vision_model": dict(pre_norm=True, patch_bias=False, mlp_activation="quick_gelu", include_top=False),
}
_COMMON_KEYS = ("model_type", "hidden_act", "layer_norm_eps", "patch_size", "image_size", "hidden_size",
                "num_hidden_layers", "num_attention_heads", "num_channels")
_DINOV2_KEYS = _COMMON_KEYS + ("use_swiglu_ffn", "layerscale_value", "num_register_tokens")
# save_hf writes no DINOv3 (rotary position): its folder is written here as transformers' save_pretrained does.
_DINOV3_CONFIG = dict(
    model_type="dinov3_vit", hidden_act="gelu", layer_norm_eps=1e-5, patch_size=4, image_size=8, hidden_size=16,
    num_hidden_layers=1, num_attention_heads=2, num_channels=3, intermediate_size=24, use_gated_mlp=False,
    query_bias=True, key_bias=False, value_bias=True, proj_bias=True, mlp_bias=True, rope_theta=100.0,
    num_register_tokens=2, layerscale_value=1.0,
)


def _write_dinov3(folder):
    from keras_vit.weights.files import write_safetensors

    d, m = _DINOV3_CONFIG["hidden_size"], _DINOV3_CONFIG["intermediate_size"]
    shapes = {"embeddings.cls_token": (1, 1, d), "embeddings.mask_token": (1, 1, d),
              "embeddings.register_tokens": (1, 2, d),
              "embeddings.patch_embeddings.weight": (d, 3, 4, 4), "embeddings.patch_embeddings.bias": (d,),
              "norm.weight": (d,), "norm.bias": (d,)}
    for name, shape in (("norm1.weight", (d,)), ("norm1.bias", (d,)), ("attention.q_proj.weight", (d, d)),
                        ("attention.q_proj.bias", (d,)), ("attention.k_proj.weight", (d, d)),
                        ("attention.v_proj.weight", (d, d)), ("attention.v_proj.bias", (d,)),
                        ("attention.o_proj.weight", (d, d)), ("attention.o_proj.bias", (d,)),
                        ("layer_scale1.lambda1", (d,)), ("norm2.weight", (d,)), ("norm2.bias", (d,)),
                        ("mlp.up_proj.weight", (m, d)), ("mlp.up_proj.bias", (m,)), ("mlp.down_proj.weight", (d, m)),
                        ("mlp.down_proj.bias", (d,)), ("layer_scale2.lambda1", (d,))):
        shapes["layer.0." + name] = shape
    os.makedirs(folder)
    write_safetensors(os.path.join(folder, "model.safetensors"), {k: np.zeros(v, "float32") for k, v in shapes.items()})
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(_DINOV3_CONFIG, f)

# model_type -> every config.json key its reader reads (the test below checks there is no other).
FAMILY_KEYS = {
    "vit": _COMMON_KEYS + ("intermediate_size",), "deit": _COMMON_KEYS + ("intermediate_size",),
    "dinov2": _DINOV2_KEYS, "dinov2_with_registers": _DINOV2_KEYS,
    # A two-tower file nests the vision tower's values in vision_config.
    "siglip_vision_model": _COMMON_KEYS + ("intermediate_size", "vision_config"),
    "clip_vision_model": _COMMON_KEYS + ("intermediate_size", "vision_config"),
    "dinov3_vit": tuple(_DINOV3_CONFIG),
}
# Wrong for every key: a string no key takes, JSON null, a list, an object (but for vision_config).
_BAD_VALUES = ("x", None, [1, 2, 3], {"a": 1})
FAMILY_CONFIG_REFUSED = [
    (family, key, value) for family, keys in FAMILY_KEYS.items() for key in keys for value in _BAD_VALUES
    if not (key == "vision_config" and isinstance(value, dict))
]
FAMILY_CONFIG_REFUSED += [  # values of the right type that are still wrong, and those the issue found
    ("dinov2", "layerscale_value", 0), ("dinov2", "layerscale_value", NAN), ("dinov2", "use_swiglu_ffn", "false"),
    ("dinov2_with_registers", "num_register_tokens", "four"), ("dinov2_with_registers", "num_register_tokens", -1),
    ("dinov2_with_registers", "num_register_tokens", 1.5), ("vit", "hidden_size", True), ("deit", "num_hidden_layers", 0),
    ("deit", "layer_norm_eps", -1e-6), ("deit", "layer_norm_eps", INF), ("siglip_vision_model", "patch_size", [4, 2]),
    ("siglip_vision_model", "image_size", [8]), ("clip_vision_model", "hidden_act", "relu"),
    ("clip_vision_model", "intermediate_size", 1.5),
    ("dinov3_vit", "rope_theta", 0), ("dinov3_vit", "rope_theta", -100.0), ("dinov3_vit", "query_bias", False),
    ("dinov3_vit", "value_bias", False), ("dinov3_vit", "use_gated_mlp", True), ("dinov3_vit", "hidden_act", "silu"),
    ("dinov3_vit", "mlp_bias", False), ("dinov3_vit", "proj_bias", False),
]


@pytest.fixture(scope="module")
def family_folders(tmp_path_factory):
    """One tiny save_pretrained folder per model_type, written by keras_vit's own save_hf."""
    import keras_vit
    from keras_vit.weights import save_hf

    root = tmp_path_factory.mktemp("families")
    for family, arguments in _FAMILY_MODELS.items():
        save_hf(keras_vit.ViT(**_TINY, **arguments), str(root / family))
        assert json.loads((root / family / "config.json").read_text())["model_type"] == family
    _write_dinov3(str(root / "dinov3_vit"))
    return root


def _with_config(source, target, change):
    import shutil

    shutil.copytree(source, target)
    config = json.loads((target / "config.json").read_text())
    change(config)
    (target / "config.json").write_text(json.dumps(config))
    return str(target)


@pytest.mark.parametrize("family, key, value", FAMILY_CONFIG_REFUSED, ids=lambda case: repr(case)[:30])
def test_family_config_values_are_refused_naming_file_and_key(family, key, value, family_folders, tmp_path):
    """Issue 43: a DINOv2 config.json with layerscale_value "x" or null, or num_register_tokens "four", raised a bare
    ValueError or TypeError from float()/int() that named neither the file nor the key."""
    from keras_vit.weights import Checkpoint, CheckpointError

    folder = _with_config(family_folders / family, tmp_path / "hf", lambda config: config.update({key: value}))
    with pytest.raises(CheckpointError) as info:
        Checkpoint(folder).architecture
    message = str(info.value)
    assert repr(os.path.join(folder, "config.json")) in message, message
    assert f"{key} is {value!r}" in message or f"{key}={value!r}" in message, message


@pytest.mark.parametrize("family", ["siglip", "clip"])
def test_a_two_tower_vision_config_is_checked_like_a_flat_one(family, family_folders, tmp_path):
    """The vision tower of a two-tower config.json (SigLIP, CLIP) reads its values from vision_config."""
    from keras_vit.weights import Checkpoint, CheckpointError

    def nest(config, vision=None):
        tower = {k: config.pop(k) for k in list(config)}
        config.update(model_type=family, vision_config=tower if vision is None else vision)
        tower.pop("model_type")

    source = family_folders / f"{family}_vision_model"
    assert Checkpoint(_with_config(source, tmp_path / "nested", nest)).architecture["hidden_size"] == 12
    folder = _with_config(source, tmp_path / "bad", lambda config: (nest(config), config["vision_config"].update(hidden_size="12")))
    with pytest.raises(CheckpointError, match=r"config.json'?: hidden_size is '12'; expected an integer >= 1"):
        Checkpoint(folder).architecture
    folder = _with_config(source, tmp_path / "list", lambda config: nest(config, vision=[1]))
    with pytest.raises(CheckpointError, match=r"config.json'?: vision_config is \[1\]; expected a JSON object"):
        Checkpoint(folder).architecture


def test_family_readers_read_no_config_key_the_table_leaves_out(family_folders, monkeypatch):
    """FAMILY_KEYS lists every key a family's reader looks up, so the table above checks each of them."""
    from keras_vit.weights import Checkpoint, formats

    class Recording(dict):
        def __contains__(self, key):
            seen.add(key)
            return super().__contains__(key)

        def __getitem__(self, key):
            seen.add(key)
            return super().__getitem__(key)

        def get(self, key, default=None):
            seen.add(key)
            return super().get(key, default)

    read = formats.read_hf_config
    monkeypatch.setattr(formats, "read_hf_config", lambda *args: Recording(read(*args)))
    for family, keys in FAMILY_KEYS.items():
        seen = set()
        Checkpoint(str(family_folders / family)).architecture
        assert seen <= set(keys), (family, sorted(seen - set(keys)))


# --- Every public builder argument (keras_vit.ViT; the named builders pass their kwargs to it) ---------------
# (arguments, what the error must say). A tiny variant: every refusal comes before or during a 2-block build.
BUILDER_REFUSED = [
    (dict(image_size=0), r"image height=0"), (dict(image_size=-32), r"image height=-32"),
    (dict(image_size=30), r"image height=30: it must be divisible by patch_size=4"),
    (dict(image_size="32"), r"image_size='32'"), (dict(image_size=32.0), r"image_size=32.0"),
    (dict(image_size=(32,)), r"image_size=\(32,\)"), (dict(image_size=True), r"image_size=True"),
    (dict(image_size=NAN), r"image_size=nan"), (dict(image_size=(0, 32)), r"image height=0"),
    (dict(patch_size=0), r"patch_size=0"), (dict(patch_size=-4), r"patch_size=-4"), (dict(patch_size=4.0), r"patch_size=4.0"),
    (dict(patch_size="4"), r"patch_size='4'"), (dict(patch_size=True), r"patch_size=True"),
    (dict(patch_size=64), r"image height=32: it must be divisible by patch_size=64"),
    (dict(hidden_size=0), r"hidden_size=0"), (dict(hidden_size=33), r"hidden_size=33: .*num_heads=2"),
    (dict(hidden_size=NAN), r"hidden_size=nan"), (dict(num_layers=0), r"num_layers=0"), (dict(num_layers=1.5), r"num_layers=1.5"),
    (dict(num_heads=0), r"num_heads=0"), (dict(num_heads=3), r"hidden_size=32: .*num_heads=3"), (dict(mlp_dim=-1), r"mlp_dim=-1"),
    (dict(num_classes=0), r"num_classes=0"), (dict(num_classes=-1), r"num_classes=-1"), (dict(num_classes=2.5), r"num_classes=2.5"),
    (dict(num_classes="3"), r"num_classes='3'"), (dict(num_classes=True), r"num_classes=True"),
    (dict(num_classes=3, classes=5), r"num_classes=3 and classes=5"), (dict(num_classes=None, classes=0), r"num_classes=0"),
    (dict(dropout_rate=-0.1), r"dropout_rate=-0.1"), (dict(dropout_rate=1.0), r"dropout_rate=1.0"),
    (dict(dropout_rate=NAN), r"dropout_rate=nan"), (dict(dropout_rate="0.1"), r"dropout_rate='0.1'"),
    (dict(attention_dropout_rate=INF), r"attention_dropout_rate=inf"), (dict(drop_path_rate=-1), r"drop_path_rate=-1"),
    (dict(pooling="mean"), r"pooling='mean'"), (dict(pooling=""), r"pooling=''"), (dict(pooling=None), r"pooling=None"),
    (dict(include_top="no"), r"include_top='no'"), (dict(include_top=0), r"include_top=0"),
    (dict(weights=3), r"weights=3"), (dict(weights="imagenet"), r"weights='imagenet'"),
    (dict(input_shape=(32, 32)), r"input_shape=\(32, 32\)"), (dict(input_shape=(0, 32, 3)), r"image height=0"),
    (dict(input_shape=(32, 32, 0)), r"channels=0"), (dict(input_shape=(32, 32, 3, 1)), r"input_shape=\(32, 32, 3, 1\)"),
    (dict(input_shape=(30, 30, 3)), r"image height=30"), (dict(input_shape=(32.0, 32, 3)), r"image height=32.0"),
    (dict(classifier_activation="nonexistent"), r"classifier_activation='nonexistent'"),
    (dict(classifier_activation=3), r"classifier_activation=3"),
    (dict(class_token="yes"), r"class_token='yes'"), (dict(class_token=0), r"class_token=0"),
    (dict(approximate_gelu="yes"), r"approximate_gelu='yes'"), (dict(distillation_token="yes"), r"distillation_token='yes'"),
    (dict(pre_norm="yes"), r"pre_norm='yes'"), (dict(patch_bias="no"), r"patch_bias='no'"),
    (dict(prefix_position_embedding="no"), r"prefix_position_embedding='no'"),
    (dict(position_embedding="abc"), r"position_embedding='abc'"), (dict(preprocessing="abc"), r"preprocessing='abc'"),
    (dict(representation_size=0), r"representation_size=0"), (dict(projection_size=-1), r"projection_size=-1"),
    (dict(layer_norm_epsilon=0), r"layer_norm_epsilon=0"), (dict(layer_norm_epsilon=-1e-6), r"layer_norm_epsilon=-1e-06"),
    (dict(layer_norm_epsilon=NAN), r"layer_norm_epsilon=nan"), (dict(layer_norm_epsilon="1e-6"), r"layer_norm_epsilon='1e-6'"),
    (dict(interpolation="abc"), r"interpolation='abc'"), (dict(num_register_tokens=-1), r"num_register_tokens=-1"),
    (dict(num_register_tokens=1.5), r"num_register_tokens=1.5"), (dict(layer_scale_init=0), r"layer_scale_init=0"),
    (dict(layer_scale_init=NAN), r"layer_scale_init=nan"), (dict(mlp_activation="relu"), r"mlp_activation='relu'"),
    (dict(variant="nope"), r"variant='nope'"), (dict(variant=3), r"variant=3"), (dict(backbone="resnet"), r"backbone='resnet'"),
    (dict(distillation_token=True, class_token=False), r"distillation_token=True needs class_token=True"),
    (dict(class_token=False, pooling="token"), r"pooling='token' needs class_token=True"),
    (dict(name="a/b"), r"`name`.*a/b"),  # Keras' own check, which names the argument
    # Huge: built, it ran the machine out of memory on the first image instead of saying why.
    (dict(image_size=2**16), r"image size 65536x65536 with 4-pixel patches: 268,435,456 patch tokens, more than MAX_PATCH_TOKENS"),
    (dict(image_size=(1028, 1028), patch_size=4), r"66,049 patch tokens"),
    # Rotary position: an unknown variant or field, settings out of range, a head width it cannot split.
    (dict(rope="mixed"), r"rope variant='mixed'. Expected one of \['dinov3', 'eva02', 'pe'\]"),
    (dict(rope={"variant": "dinov3", "thetta": 100}), r"rope: unknown field 'thetta'"), (dict(rope=3), r"rope=3"),
    (dict(rope={"theta": -1}), r"rope theta=-1"), (dict(rope={"variant": "eva02", "reference_grid": (0, 4)}),
                                                      r"rope reference_grid rows=0"),
    (dict(rope="dinov3", hidden_size=36, num_heads=6), r"head width .*= 6\) divisible by 4"),
    (dict(qkv_bias="k"), r"qkv_bias='k'"), (dict(qkv_bias=False), r"qkv_bias=False"),
    # A rotary model takes any size, but not a side smaller than one patch.
    (dict(rope="dinov3", position_embedding="none", image_size=2),
     r"image height=2: it must be divisible by patch_size=4"),
    (dict(naflex="yes"), r"naflex='yes'"),
    (dict(naflex=True, class_token=True), r"naflex=True embeds patch sequences alone .* cannot have class_token=True"),
    (dict(naflex=True, position_embedding="sincos2d"), r"cannot have position_embedding='sincos2d'"),
    (dict(naflex=True, preprocessing="symmetric"), r"naflex=True .*takes patch sequences, not images: .*preprocessing="),
    (dict(naflex=True, input_shape=(32, 32, 3)), r"A NaFlex model takes the inputs naflex_input_spec describes"),
    (dict(naflex=True, rope="dinov3", position_embedding="learned"), r"naflex=True .* cannot have rope="),
]
# Accepted, and why.
BUILDER_ACCEPTED = [
    (dict(include_top=None), (None, 3)),  # None is the default: a head
    (dict(include_top=np.bool_(False)), (None, 32)),  # NumPy's bool is a bool
    (dict(name=""), (None, 3)),  # an empty name means the default name, vit_tiny
    (dict(num_classes=3, classes=3), (None, 3)),  # the alias agreeing with the name
    (dict(image_size=None, position_embedding="sincos2d"), (None, 3)),  # a free size, checked per call
    (dict(classifier_activation=None), (None, 3)),  # logits
    (dict(pooling="avg"), (None, 3)),  # keras.applications' name of "gap"
    (dict(num_register_tokens=0, layer_scale_init=None, representation_size=None), (None, 3)),  # each: none of it
    # NumPy's integers are integers (a class count from np.unique): they were refused as "not an integer".
    (dict(num_classes=np.int64(4), image_size=np.int32(16), num_layers=np.int64(1)), (None, 4)),
    (dict(input_shape=(np.int64(16), 16, np.int64(1)), dropout_rate=np.float32(0.25)), (None, 3)),
    (dict(image_size=(1024, 1024), patch_size=4), (None, 3)),  # 65,536 tokens: MAX_PATCH_TOKENS itself
    (dict(rope={"variant": "pe", "reference_grid": [8, 8]}, position_embedding="none", qkv_bias="qv"), (None, 3)),
    (dict(naflex=True), (None, 3)),  # patch sequences of any aspect; no class token unless asked for
]


@pytest.mark.backends("tensorflow", "jax", "torch")
@pytest.mark.parametrize("arguments, message", BUILDER_REFUSED, ids=lambda case: repr(case)[:60] if isinstance(case, dict) else "")
def test_builder_refuses(arguments, message):
    import keras_vit

    with pytest.raises(ValueError, match=message):
        keras_vit.ViT(**{"variant": "tiny", "num_classes": 3, **arguments})


@pytest.mark.backends("tensorflow", "jax", "torch")
@pytest.mark.parametrize("arguments, output_shape", BUILDER_ACCEPTED, ids=lambda case: repr(case)[:60] if isinstance(case, dict) else "")
def test_builder_accepts(arguments, output_shape):
    import keras_vit

    model = keras_vit.ViT(**{"variant": "tiny", "num_classes": 3, **arguments})
    assert model.output_shape == output_shape
    assert model.name == "vit_tiny" or "name" in arguments and arguments["name"]
    json.dumps(model.vit_config)  # only Python values in the config, whatever NumPy scalars came in


@pytest.mark.backends("tensorflow", "jax", "torch")
def test_rotary_model_of_any_size_refuses_an_image_smaller_than_a_patch():
    import keras_vit

    model = keras_vit.ViT("tiny_dinov3", image_size=None, num_classes=3)
    with pytest.raises(ValueError, match=r"image height=2 .*positive multiples of patch_size=4"):
        model(np.zeros((1, 2, 8, 3), "float32"))


@pytest.mark.backends("tensorflow", "jax", "torch")
def test_named_builders_refuse_like_vit():
    """A named builder is ViT with its variant: the same refusals, and an unknown keyword is Python's TypeError."""
    import keras_vit

    with pytest.raises(ValueError, match=r"num_classes=0"):
        keras_vit.ViT_Ti16(num_classes=0, num_layers=1, image_size=32)
    with pytest.raises(TypeError, match=r"num_class\b"):
        keras_vit.ViT_Ti16(num_class=3)


# --- Every CLI flag: parse errors (argparse) and value errors (the handlers), one line and exit 2 -------------
CLI_PARSE_REFUSED = [  # (argv, what the line must name); no model is built or loaded
    (["train", "--epoch", "1"], "--epoch"),  # an abbreviation: read as --epochs, until a flag --epoch-... came
    (["train", "--epochs", "abc"], "--epochs"), (["train", "--epochs", ""], "--epochs"), (["train", "--epochs", "1e3"], "--epochs"),
    (["train", "--batch-size", "2.5"], "--batch-size"), (["train", "--validation-split", "x"], "--validation-split"),
    (["train", "--image-size", "32px"], "--image-size"), (["train", "--patch-size", "x"], "--patch-size"),
    (["train", "--channels", "2"], "--channels"), (["train", "--recipe", "x"], "--recipe"), (["train", "--augment", "x"], "--augment"),
    (["train", "--precision", "x"], "--precision"), (["train", "--jit-compile", "maybe"], "--jit-compile"),
    (["train", "--strategy", "x"], "--strategy"), (["train", "--pooling", "avg"], "--pooling"), (["train", "--scaling", "x"], "--scaling"),
    (["train", "--on-corrupt", "x"], "--on-corrupt"), (["train", "--seed", "x"], "--seed"), (["train", "--budget-minutes", "x"], "--budget-minutes"),
    (["train", "--num-processes", "x"], "--num-processes"), (["train", "--process-id", "x"], "--process-id"),
    (["train", "--max-train-examples", "x"], "--max-train-examples"), (["train", "--epochz", "1"], "--epochz"),
    (["evaluate"], "model"), (["evaluate", "m.keras", "--batch-size", "x"], "--batch-size"),
    (["evaluate", "m.keras", "--on-corrupt", "x"], "--on-corrupt"), (["evaluate", "m.keras", "--seed", "1.5"], "--seed"),
    (["evaluate", "m.keras", "--max-examples", "x"], "--max-examples"), (["evaluate", "m.keras", "--validation-split", "x"], "--validation-split"),
    (["predict", "m.keras"], "IMAGE"), (["predict", "m.keras", "a.png", "--top-k", "x"], "--top-k"),
    (["export", "m.keras", "--version", "x"], "--version"), (["export", "m.keras", "--top-k", "x"], "--top-k"),
    (["export", "m.keras", "--calibration-samples", "x"], "--calibration-samples"),
    (["inspect", "m.keras"], "--out"), (["inspect", "m.keras", "--out", "d", "--components", "x"], "--components"),
    (["inspect", "m.keras", "--out", "d", "--image-size", "32"], "--image-size"), (["inspect", "m.keras", "--out", "d", "--scale", "x"], "--scale"),
    (["inspect", "m.keras", "--out", "d", "--head-fusion", "x"], "--head-fusion"), (["nope"], "nope"),
]


@pytest.mark.backends("tensorflow", "jax", "torch")
@pytest.mark.parametrize("argv, flag", CLI_PARSE_REFUSED, ids=lambda case: " ".join(case) if isinstance(case, list) else "")
def test_cli_parse_errors_are_one_line(argv, flag, capsys):
    from keras_vit import cli

    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and len(err.splitlines()) == 1 and flag in err, err


# (argv, the line's text): refused by the handlers before any data or model is read (train: before its header).
CLI_REFUSED = [
    (["train", "--epochs", "0"], "Invalid --epochs=0"), (["train", "--epochs", "-1"], "Invalid --epochs=-1"),
    (["train", "--batch-size", "0"], "Invalid --batch-size=0"), (["train", "--validation-split", "nan"], "Invalid --validation-split=nan"),
    (["train", "--validation-split", "1"], "Invalid --validation-split=1.0"), (["train", "--validation-split", "inf"], "--validation-split=inf"),
    (["train", "--validation-split", "0"], "--validation-split=0.0"),
    (["train", "--max-train-examples", "0"], "--max-train-examples=0"), (["train", "--max-test-examples", "-5"], "--max-test-examples=-5"),
    (["train", "--image-size", "0"], "--image-size=0"), (["train", "--patch-size", "0"], "--patch-size=0"),
    (["train", "--hidden-size", "-1"], "--hidden-size=-1"), (["train", "--num-layers", "0"], "--num-layers=0"),
    (["train", "--num-heads", "0"], "--num-heads=0"), (["train", "--mlp-dim", "0"], "--mlp-dim=0"),
    (["train", "--budget-minutes", "0"], "--budget-minutes=0.0"), (["train", "--budget-minutes", "nan"], "--budget-minutes=nan"),
    (["train", "--budget-minutes", "inf"], "--budget-minutes=inf"), (["train", "--budget-minutes", "-1"], "--budget-minutes=-1.0"),
    (["train", "--variant", "nope"], "variant='nope'"), (["train", "--mesh", "abc"], "mesh='abc'"), (["train", "--mesh", "0x4"], "mesh='0x4'"),
    (["train", "--seed", "-1"], "--seed=-1"), (["train", "--seed", str(2**40)], f"--seed={2**40}"),
    (["train", "--num-processes", "0"], "--num-processes=0"), (["train", "--process-id", "-1"], "--process-id=-1"),
    (["train", "--process-id", "1"], "pass --num-processes too"), (["train", "--coordinator", "h:1"], "pass --num-processes too"),
    (["train", "--epochs", "0", "--batch-size", "0"], "--epochs=0"),  # the first of several mistakes
    (["evaluate", "m.keras", "--batch-size", "0"], "--batch-size=0"), (["evaluate", "m.keras", "--max-examples", "-1"], "--max-examples=-1"),
    (["evaluate", "m.keras", "--validation-split", "nan"], "--validation-split=nan"), (["evaluate", "m.keras", "--seed", "-1"], "--seed=-1"),
    (["evaluate", "no-such.keras"], "no-such.keras"),
    (["predict", "m.keras", "a.png", "--top-k", "0"], "--top-k=0"), (["predict", "no-such.keras", "a.png"], "no-such.keras"),
    (["export", "m.keras"], "Nothing to export"), (["export", "m.keras", "--tflite", "a.tflite", "--quantization", "x"], "--quantization"),
    (["export", "no-such.keras", "--tflite", "a.tflite"], "no-such.keras"),
    (["export", "m.keras", "--saved-model", "d", "--quantization", "int8"], "--quantization int8 applies to the TFLite file"),
    # Issue 43: named calibration_samples (and top_k, version), the library's arguments, not the flags.
    (["export", "m.keras", "--tflite", "a.tflite", "--calibration-samples", "0"], "Invalid --calibration-samples=0"),
    (["export", "m.keras", "--saved-model", "d", "--top-k", "0"], "Invalid --top-k=0"),
    (["export", "m.keras", "--saved-model", "d", "--version", "0"], "Invalid --version=0"),
    (["inspect", "no-such.keras", "--out", "d"], "no-such.keras"), (["inspect", "m.txt", "--out", "d"], "m.txt"),
    (["inspect", "m.keras", "--out", "d", "--components", "0"], "--components=0"),
]


@pytest.mark.backends("tensorflow", "jax", "torch")
@pytest.mark.parametrize("argv, text", CLI_REFUSED, ids=lambda case: " ".join(case) if isinstance(case, list) else "")
def test_cli_value_errors_are_one_line(argv, text, capsys, tmp_path, monkeypatch):
    from keras_vit import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.keras").write_text("not read: the flags are checked first")
    (tmp_path / "m.txt").write_text("")
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and text in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.keras", "m.txt"], "a refused command wrote something"


@pytest.mark.backends("tensorflow", "jax", "torch")
def test_a_headless_checkpoint_into_a_model_with_a_head_names_include_top_and_num_classes(tmp_path):
    """A Hugging Face ViTModel folder (no classifier): the message says how to build without a head or with a new one."""
    import keras_vit
    from keras_vit.transfer import load_pretrained
    from keras_vit.weights import CheckpointError, save_hf

    folder = str(tmp_path / "headless")
    save_hf(keras_vit.ViT("tiny", include_top=False, image_size=8, num_layers=1), folder)
    for arguments in ({}, {"num_classes": 5}):
        with pytest.raises(CheckpointError) as refused:
            keras_vit.ViT(weights=folder, **arguments)
        message = str(refused.value)
        assert "has no classifier head" in message and "include_top=False" in message, message
        assert "load_pretrained(" in message and "num_classes=" in message, message
    # What the message says works.
    assert keras_vit.ViT(weights=folder, include_top=False).output_shape == (None, 32)
    assert load_pretrained(folder, num_classes=5, scaling="unit")[0].output_shape == (None, 5)
    model = keras_vit.ViT(weights=folder, include_top=False)
    headed = keras_vit.ViT("tiny", image_size=8, num_layers=1, num_classes=5)
    assert len(keras_vit.load_weights(headed, folder, skip_mismatch=True)) == len(model.weights)
