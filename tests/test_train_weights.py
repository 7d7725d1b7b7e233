"""`keras-vit train --weights`: adapting a checkpoint (fine-tuning, linear probe), the small-data defaults,
layer-wise learning-rate decay, and the refusals of flags that contradict a checkpoint."""

import os

import keras
import numpy as np
import pytest
from PIL import Image

import keras_vit
from keras_vit import cli
from keras_vit.training import optimizers, plan as plan_lib, recipes

from helpers import ALL_BACKENDS
from test_hub import fill_cache

CLASSES = ("ant", "bee", "cow")


def _folder(root, per_class=8, size=16, seed=0):
    """train/ and test/ folders of colour PNGs; each class has its own mean colour, so a probe can separate them."""
    rng = np.random.default_rng(seed)
    for split, count in (("train", per_class), ("test", 4)):
        for index, name in enumerate(CLASSES):
            os.makedirs(root / split / name)
            for i in range(count):
                pixels = rng.integers(0, 80, (size, size, 3)) + 80 * index
                Image.fromarray(pixels.astype("uint8")).save(root / split / name / f"{i}.png")
    return str(root)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny ViT of 5 classes at 16 px written as a vit_jax .npz (which states no pixel scaling)."""
    root = tmp_path_factory.mktemp("checkpoint")
    keras.utils.set_random_seed(1)
    model = keras_vit.ViT("tiny", num_classes=5, image_size=16)
    for variable in model.weights:  # a head and weights unlike a fresh model's, so a load shows
        variable.assign(np.random.default_rng(len(variable.path)).normal(0, 0.05, variable.shape))
    path = str(root / "tiny.npz")
    keras_vit.weights.save_npz(model, path)
    return path


def _train(tmp_path, data, *flags):
    return cli.main(["train", "--dataset", data, "--jit-compile", "off", "--run-dir", str(tmp_path / "run"),
                     "--output-dir", str(tmp_path / "out"), "--name", "m", "--quiet", *flags])


def test_finetune_from_an_npz_builds_its_model_with_a_new_head_and_exports_it(checkpoint, tmp_path, capsys):
    data = _folder(tmp_path / "data")
    assert _train(tmp_path, data, "--weights", checkpoint, "--scaling", "symmetric", "--epochs", "1") == 0
    out = capsys.readouterr().out
    assert f"Weights:  {checkpoint}" in out and "dropped head (5 classes)" in out and "a new zero head for 3 classes" in out
    assert "scaling symmetric (given)" in out and "every weight trained" in out
    # 24 training images: the recipe's batch of 256 would not fit; the default follows the data.
    assert "batch 4 (for 24 training images: at least 4 steps an epoch)" in out
    model = keras.saving.load_model(str(tmp_path / "out" / "m.keras"))
    assert model.input_shape == (None, 16, 16, 3) and model.output_shape == (None, 3)
    assert model.get_layer("preprocessing") is not None
    from keras_vit import export

    image = str(tmp_path / "data" / "test" / "bee" / "0.png")
    keras_probs = export.load_predictor(str(tmp_path / "out" / "m.keras")).predict_files([image])
    for exported in ("m.tflite", os.path.join("m", "1")):
        probs = export.load_predictor(str(tmp_path / "out" / exported)).predict_files([image])
        np.testing.assert_allclose(probs, keras_probs, atol=1e-5)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """The same tiny ImageNet-scaled ViT (16 px) as a Hugging Face folder, a timm Hub folder and a Hub repository."""
    root = tmp_path_factory.mktemp("folders")
    keras.utils.set_random_seed(2)
    model = keras_vit.ViT("tiny", num_classes=7, image_size=16, preprocessing="imagenet")
    keras_vit.weights.save_hf(model, str(root / "hf"))
    keras_vit.weights.save_timm(model, str(root / "timm"))
    fill_cache(str(root / "cache"), "someone/vit-tiny", str(root / "timm"), "d" * 40)
    return root


@pytest.mark.parametrize("kind, source", [
    ("hf", "preprocessor_config.json"), ("timm", "config.json"), ("hub", "hf-hub:someone/vit-tiny (revision dddd"),
])
def test_finetune_from_each_format_reads_its_scaling_and_feeds_grey_images_as_rgb(folders, kind, source, tmp_path,
                                                                                  capsys, monkeypatch):
    spec = str(folders / kind)
    if kind == "hub":
        import socket

        import huggingface_hub.constants

        def refuse(*args, **kwargs):
            raise OSError("network blocked by the test")

        monkeypatch.setattr(socket.socket, "connect", refuse)
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(folders / "cache"))
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        spec = "hf-hub:someone/vit-tiny"
    # The shipped sample: 28 px grey images, to a 16 px RGB checkpoint; the Hub run exports too.
    export = [] if kind == "hub" else ["--no-export"]
    assert _train(tmp_path, "sample", "--weights", spec, "--epochs", "1", "--max-train-examples", "32",
                  "--max-test-examples", "16", *export) == 0
    out = capsys.readouterr().out
    assert "scaling imagenet (from " in out and source in out, out
    assert "images 16x16x3 (" in out and "the checkpoint's, grey images repeated" in out
    model = keras.saving.load_model(str(tmp_path / "out" / "m.keras"))
    assert model.input_shape == (None, 16, 16, 3) and model.output_shape == (None, 10)
    if export:
        return
    from keras_vit import export as exports

    # The model keeps the checkpoint's processor (issue 52): the SavedModel's bytes signature applies it to a photo of
    # any shape, as the .keras predictor does. A .tflite file stores no processor yet (its predict_files resizes to
    # the model's square), so it is compared on pixels already at the model's size.
    photo = str(tmp_path / "photo.png")
    Image.fromarray(np.random.default_rng(3).integers(0, 255, (40, 30, 3)).astype("uint8")).save(photo)
    keras_predictor = exports.load_predictor(str(tmp_path / "out" / "m.keras"))
    saved_model = exports.load_predictor(str(tmp_path / "out" / "m" / "1"))
    np.testing.assert_allclose(saved_model.predict_files([photo]), keras_predictor.predict_files([photo]), atol=1e-5)
    pixels = np.random.default_rng(4).uniform(0, 255, (2, 16, 16, 3)).astype("float32")
    for predictor in (saved_model, exports.load_predictor(str(tmp_path / "out" / "m.tflite"))):
        np.testing.assert_allclose(predictor.predict(pixels), keras_predictor.predict(pixels), atol=1e-5)


def test_an_unknown_hub_id_offline_is_one_line_naming_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    assert _train(tmp_path, "sample", "--weights", "hf-hub:nobody/nothing@v2") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'hf-hub:nobody/nothing@v2'" in err and "HF_HUB_OFFLINE" in err, err


def test_a_family_keras_vit_does_not_have_is_refused_with_the_supported_list(tmp_path, capsys):
    folder = tmp_path / "convnext"
    keras_vit.weights.save_hf(keras_vit.ViT("tiny", num_classes=3), str(folder))
    config = (folder / "config.json").read_text().replace('"model_type": "vit"', '"model_type": "convnext"')
    (folder / "config.json").write_text(config)
    assert _train(tmp_path, "sample", "--weights", str(folder), "--scaling", "unit") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "convnext" in err and "dinov2" in err and "siglip" in err, err


def test_probe_trains_only_the_head_on_features_computed_once(checkpoint, tmp_path, capsys):
    data = _folder(tmp_path / "data")
    assert _train(tmp_path, data, "--weights", checkpoint, "--scaling", "symmetric", "--probe") == 0
    out = capsys.readouterr().out
    assert "the head alone on frozen features (linear probe)" in out and "Probe:    32 features of 24 images" in out
    assert "the probe is the result" in out
    trained = keras.saving.load_model(str(tmp_path / "out" / "m.keras"))
    reference = keras_vit.ViT(weights=checkpoint, num_classes=3, representation_size=None, preprocessing="symmetric")
    for layer in reference.layers:
        if layer.name != "head":
            for mine, theirs in zip(trained.get_layer(layer.name).weights, layer.weights):
                np.testing.assert_array_equal(np.asarray(mine), np.asarray(theirs), err_msg=mine.path)
    assert np.abs(np.asarray(trained.get_layer("head").kernel)).max() > 0
    # The classes differ by colour: the probe separates them.
    from keras_vit import export

    predictor = export.load_predictor(str(tmp_path / "out" / "m.keras"))
    for index, name in enumerate(CLASSES):
        files = [str(tmp_path / "data" / "test" / name / f"{i}.png") for i in range(4)]
        assert (predictor.predict_files(files).argmax(-1) == index).all(), name


def test_a_budget_probes_first_then_fine_tunes_when_the_budget_buys_it(checkpoint, tmp_path, capsys):
    data = _folder(tmp_path / "data")
    # A budget that buys fine-tuning on a loaded machine too; two epochs end the run well before it.
    assert _train(tmp_path, data, "--weights", checkpoint, "--scaling", "symmetric", "--budget-minutes", "5",
                  "--epochs", "2") == 0
    out = capsys.readouterr().out
    assert "a linear probe, then every weight if the budget buys it" in out
    assert "fine-tuning from the probe: the" in out and "Test accuracy:" in out


def test_another_patch_size_resizes_the_checkpoints_patch_kernel(checkpoint, tmp_path, capsys):
    """--patch-size with --weights: FlexiViT's resize of the kernel (4 -> 8 px), the image size kept, the grid resampled."""
    data = _folder(tmp_path / "data", per_class=2)
    assert _train(tmp_path, data, "--weights", checkpoint, "--scaling", "unit", "--patch-size", "8", "--epochs", "1") == 0
    out = capsys.readouterr().out
    assert "patch kernel resized from 4 to 8 px by FlexiViT's pseudo-inverse" in out, out
    assert "position embedding resampled from 4x4 to 2x2" in out, out
    model = keras.saving.load_model(str(tmp_path / "out" / "m.keras"))
    assert model.vit_config["patch_size"] == 8 and model.input_shape == (None, 16, 16, 3)
    # The resized kernel is the checkpoint's, not a fresh one: an 8 px image upsampled to 16 px
    # gives the checkpoint's tokens at 8 px through the 8 px kernel (FlexiViT's eq. 5).
    from keras_vit.transfer import load_pretrained

    source, _ = load_pretrained(checkpoint, scaling="unit", image_size=8)
    resized, info = load_pretrained(checkpoint, scaling="unit", patch_size=8)
    assert "patch kernel resized from 4 to 8" in info.image_size_reason
    kernel = keras.ops.convert_to_numpy(resized.get_layer("embedding").weights[0])
    np.testing.assert_allclose(kernel, keras_vit.weights.resize_patch_kernel(
        keras.ops.convert_to_numpy(source.get_layer("embedding").weights[0]), 8), atol=1e-6)
    with pytest.raises(ValueError, match="patch_size=0"):
        load_pretrained(checkpoint, scaling="unit", patch_size=0)


@pytest.mark.parametrize("flags, message", [
    (["--variant", "Ti16"], "Contradicting variant 'Ti16'"),
    (["--channels", "1"], "Contradicting --channels=1 and weights="),
    (["--stem", "conv"], "Contradicting --stem='conv' and --weights"),
    (["--pooling", "gap"], "Contradicting --pooling='gap' and --weights"),
])
def test_model_flags_that_contradict_the_checkpoint_are_refused_by_name(checkpoint, flags, message, tmp_path, capsys):
    data = _folder(tmp_path / "data", per_class=2)
    assert _train(tmp_path, data, "--weights", checkpoint, "--scaling", "unit", *flags) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_a_checkpoint_that_states_no_scaling_needs_the_flag(checkpoint, tmp_path, capsys):
    data = _folder(tmp_path / "data", per_class=2)
    assert _train(tmp_path, data, "--weights", checkpoint) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--scaling" in err and "tiny.npz" in err, err


def test_adapt_without_weights_is_refused(tmp_path, capsys):
    assert _train(tmp_path, "sample", "--probe") == 2
    assert "--adapt='probe' adapts a checkpoint: pass --weights too" in capsys.readouterr().err


def test_small_data_gets_a_batch_and_learning_rate_that_train(tmp_path):
    # The run: 250 images with the recipe's batch of 256 stopped with an error.
    assert plan_lib.resolve_batch_size(None, 256, 250) == (32, "for 250 training images: at least 4 steps an epoch")
    assert plan_lib.resolve_batch_size(None, 256, 1024)[0] == 256
    compact = recipes.get_recipe("compact")
    # Linear scaling down to batch 128 (the measured runs keep their rates), the square root below.
    assert compact.learning_rate_for(256) == pytest.approx(1e-3)
    assert compact.learning_rate_for(32) == pytest.approx(compact.learning_rate_for(128) / 2)


def test_a_small_training_set_validates_on_a_sample_of_a_large_validation_set(tmp_path):
    data = _folder(tmp_path / "data", per_class=2)
    for name in CLASSES:  # 3 x 400 test images against 6 training images
        for i in range(4, 400):
            Image.new("RGB", (16, 16)).save(tmp_path / "data" / "test" / name / f"{i}.png")
    plan = plan_lib.resolve(plan_lib.TrainConfig(dataset=data, variant="tiny", image_size=16, epochs=1,
                                                 run_dir=None, output_dir=None, precision="float32"))
    assert plan.validation.num_examples == plan_lib.VALIDATION_SAMPLE and plan.test.num_examples == 1200
    assert "a sample for the per-epoch validation" in plan.validation.description


@ALL_BACKENDS
def test_layer_decay_scales_each_layers_learning_rate():
    keras.utils.set_random_seed(0)
    model = keras_vit.ViT("tiny", num_classes=3, image_size=8, classifier_activation=None)
    scales = optimizers.layer_learning_rate_scales(model, 0.5)
    assert scales["embedding/kernel"] == 0.125 and scales["encoderblock_1/norm1/gamma"] == 0.5
    assert scales["encoder_norm/gamma"] == 1.0 and scales["head/kernel"] == 1.0
    x = np.random.default_rng(0).normal(size=(4, 8, 8, 3)).astype("float32")
    y = keras.ops.one_hot(np.array([0, 1, 2, 0]), 3)
    moved = {}
    for optimizer in (keras.optimizers.SGD(0.1), optimizers.LayerDecaySGD(0.1, layer_scales=scales)):
        clone = keras.models.clone_model(model)
        clone.set_weights(model.get_weights())
        # A head of zeros passes no gradient back: give it weights so every layer moves.
        clone.get_layer("head").kernel.assign(np.random.default_rng(1).normal(size=clone.get_layer("head").kernel.shape))
        before = {v.path: keras.ops.convert_to_numpy(v) for v in clone.trainable_variables}
        clone.compile(optimizer=optimizer, loss=keras.losses.CategoricalCrossentropy(from_logits=True))
        clone.train_on_batch(x, y)
        moved[type(optimizer).__name__] = {v.path: keras.ops.convert_to_numpy(v) - before[v.path]
                                           for v in clone.trainable_variables}
    plain, decayed = moved["SGD"], moved["LayerDecaySGD"]
    for path in ("embedding/kernel", "encoderblock_0/attention/query/kernel", "head/kernel"):
        np.testing.assert_allclose(decayed[path], scales[path] * plain[path], rtol=1e-3, atol=1e-7, err_msg=path)
    assert np.abs(plain["embedding/kernel"]).max() > 0
