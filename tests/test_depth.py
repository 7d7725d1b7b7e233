"""Depth Anything: DPT decoder on ViT feature maps, Hugging Face folders equal to transformers'."""

import json
import os

import keras
import numpy as np
import pytest

import keras_vit
from helpers import ALL_BACKENDS, FAMILY_ROWS, to_numpy
from keras_vit.layers import DPTDepthHead
from keras_vit.layers.align_corners import resize_align_corners
from keras_vit.weights import CheckpointError

pytestmark = ALL_BACKENDS

DECODER = dict(neck_hidden_sizes=[6, 8, 10, 12], fusion_hidden_size=8, head_hidden_size=4)


def _depth_anything_folder(folder, depth_estimation_type="relative", out_indices=(1, 2, 3, 4), backbone_type=None):
    """A tiny transformers DepthAnythingForDepthEstimation, every weight redrawn, saved to `folder`."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    backbone = transformers.Dinov2Config(
        hidden_size=24, num_hidden_layers=4, num_attention_heads=2, intermediate_size=48, patch_size=4,
        image_size=32, out_indices=list(out_indices), reshape_hidden_states=False, layerscale_value=0.5)
    config = transformers.DepthAnythingConfig(
        backbone_config=backbone, patch_size=4, reassemble_hidden_size=24,
        depth_estimation_type=depth_estimation_type, max_depth=3, **DECODER)
    torch.manual_seed(0)
    model = transformers.DepthAnythingForDepthEstimation(config).eval()
    with torch.no_grad():
        for name, weight in model.named_parameters():
            # Convolutions scaled by their fan-in keep the depth O(1), so 1e-4 is a tight bound.
            fan_in = int(np.prod(weight.shape[1:])) if weight.ndim == 4 else 1
            weight.normal_(0.0, 0.3 if fan_in == 1 or name.startswith("backbone.") else fan_in ** -0.5)
    model.save_pretrained(folder)
    if backbone_type is not None:
        path = os.path.join(folder, "config.json")
        config = json.load(open(path))
        config["backbone_config"]["model_type"] = backbone_type
        json.dump(config, open(path, "w"))
    return model


# The metric head differs from the relative one in its last activation and scale, backend-independent
# code: JAX and PyTorch check the relative one (45 s of the JAX pass each).
@pytest.mark.parametrize("depth_estimation_type", ["relative", pytest.param("metric", marks=pytest.mark.backends(
    "tensorflow"))])
def test_depth_anything_folder_equals_transformers_predicted_depth(tmp_path, depth_estimation_type):
    import torch
    import transformers

    reference = _depth_anything_folder(tmp_path, depth_estimation_type)
    model = keras_vit.DepthEstimator(weights=str(tmp_path))
    # Odd and even grids, not square: the stride-2 reassembly pads as PyTorch does on both.
    for rows, cols in ((5, 7), (6, 4)):
        images = np.random.default_rng(rows).normal(size=(2, 3, 4 * rows, 4 * cols)).astype("float32")
        with torch.no_grad():
            expected = reference(torch.from_numpy(images)).predicted_depth.numpy()
        images = np.transpose(images, (0, 2, 3, 1))
        got = to_numpy(model(images))
        assert got.shape == expected.shape == (2, 4 * rows, 4 * cols)
        assert np.abs(expected).max() > 0.5 and (expected > 0).mean() > 0.3  # a map, not a few values
        np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)
    # Older transformers saved backbone_config as a diff against Dinov2Config's defaults, stages by name.
    path = tmp_path / "config.json"
    config = json.load(open(path))
    defaults = transformers.Dinov2Config().to_dict()
    config["backbone_config"] = {key: value for key, value in config["backbone_config"].items()
                                 if key == "model_type" or (key != "out_indices" and defaults.get(key) != value)}
    assert "apply_layernorm" not in config["backbone_config"] and "out_features" in config["backbone_config"]
    json.dump(config, open(path, "w"))
    np.testing.assert_array_equal(to_numpy(keras_vit.DepthEstimator(weights=str(tmp_path))(images)), got)


def test_resize_align_corners_equals_pytorch_interpolate():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).normal(size=(2, 3, 5, 4)).astype("float32")
    for size in ((7, 9), (10, 8), (1, 3), (3, 2)):
        expected = torch.nn.functional.interpolate(
            torch.from_numpy(x).permute(0, 3, 1, 2), size=size, mode="bilinear", align_corners=True)
        got = to_numpy(resize_align_corners(x, *size))
        np.testing.assert_allclose(got, expected.permute(0, 2, 3, 1).numpy(), atol=1e-6)


@pytest.mark.parametrize("variant", FAMILY_ROWS)
def test_depth_estimator_on_every_family_gives_a_depth_per_pixel(variant):
    model = keras_vit.DepthEstimator(backbone=variant, **DECODER)
    side = model.pixel_multiple
    images = np.random.default_rng(0).uniform(size=(2, 3 * side, 5 * side, 3)).astype("float32")
    depth = to_numpy(model(images))
    assert depth.shape == (2, 3 * side, 5 * side) and depth.dtype == np.float32
    assert np.all(depth >= 0)


def test_depth_estimator_shares_a_given_backbone_trains_and_saves(tmp_path):
    backbone = keras_vit.ViT("tiny_dinov2", image_size=None, include_top=False)
    model = keras_vit.DepthEstimator(backbone=backbone, indices=[0, 1], neck_hidden_sizes=[8, 8],
                                     reassemble_factors=[2, 1], fusion_hidden_size=8, head_hidden_size=4,
                                     depth_estimation_type="metric", max_depth=10.0)
    assert model.get_layer("encoderblock_0") is backbone.get_layer("encoderblock_0")
    head = model.get_layer("depth_head")
    assert head.compute_dtype == "float32" and head.max_depth == 10.0
    model.compile(optimizer="sgd", loss="mse")
    x = np.random.default_rng(0).uniform(size=(2, 16, 24, 3)).astype("float32")
    history = model.fit(x, np.ones((2, 16, 24), "float32"), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    model.save(tmp_path / "depth.keras")
    loaded = keras.saving.load_model(tmp_path / "depth.keras", safe_mode=True)
    assert type(loaded).__name__ == "DepthModel" and loaded.pixel_multiple == 4
    np.testing.assert_array_equal(to_numpy(loaded(x)), to_numpy(model(x)))


def test_depth_head_contract():
    head = DPTDepthHead(4, "metric", max_depth=20.0)
    assert DPTDepthHead.from_config(head.get_config()).get_config() == head.get_config()
    features, images = np.ones((1, 3, 4, 8), "float32"), np.zeros((1, 6, 10, 3), "float32")
    depth = to_numpy(head(features, images))
    assert depth.shape == (1, 6, 10) and np.all((depth > 0) & (depth < 20))
    mixed = DPTDepthHead(4, dtype="mixed_bfloat16")
    assert keras.backend.standardize_dtype(mixed(features, images).dtype) == "bfloat16"
    assert all(w.dtype == "float32" for w in mixed.weights)


def test_off_grid_image_is_refused_naming_the_side():
    model = keras_vit.DepthEstimator(backbone="tiny_dinov2", **DECODER)
    with pytest.raises(ValueError, match=r"Invalid image width=18 .* multiples of patch_size=4"):
        model(np.zeros((1, 16, 18, 3), "float32"))


@pytest.mark.parametrize("arguments, message", [
    (dict(indices=[0, 5]), r"Invalid indices=\[0, 5\]: block\(s\) \[5\] beyond the depth"),
    (dict(indices=[0, 1]), r"Invalid neck_hidden_sizes=\[48, 96, 192, 384\]: expected a list with one entry per chosen block \(2"),
    (dict(reassemble_factors=[4, 2, 1, 0.3], neck_hidden_sizes=[4] * 4), r"Invalid factor=0.3"),
    (dict(backbone=None), r"Invalid backbone=None"),
])
def test_bad_depth_estimator_arguments_are_refused_by_name(arguments, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.DepthEstimator(**{"backbone": "tiny_dinov2", **arguments})


def test_bad_depth_anything_folders_are_refused_by_name(tmp_path):
    _depth_anything_folder(tmp_path / "dinov3", backbone_type="dinov3_vit")
    with pytest.raises(CheckpointError, match=r"backbone_config.model_type is 'dinov3_vit'; .*\['dinov2'\]"):
        keras_vit.DepthEstimator(weights=str(tmp_path / "dinov3"))
    _depth_anything_folder(tmp_path / "deep", out_indices=(1, 2, 3, 4))
    path = tmp_path / "deep" / "config.json"
    config = json.load(open(path))
    config["backbone_config"]["out_indices"] = [1, 2, 3, 9]
    json.dump(config, open(path, "w"))
    with pytest.raises(CheckpointError, match=r"out_indices is \[1, 2, 3, 9\] \(\[9\] beyond the backbone's 4 blocks\)"):
        keras_vit.DepthEstimator(weights=str(tmp_path / "deep"))
    with pytest.raises(CheckpointError, match=r"model_type='depth_anything' .* keras_vit.DepthEstimator\(weights="):
        keras_vit.ViT(weights=str(tmp_path / "deep"))
    with pytest.raises(ValueError, match=r"Invalid backbone=, fusion_hidden_size= with weights="):
        keras_vit.DepthEstimator(weights=str(tmp_path / "deep"), backbone="tiny_dinov2", fusion_hidden_size=8)


@pytest.mark.backends("tensorflow")
def test_depth_model_exports_to_saved_model_and_tflite_within_1e_5(tmp_path):
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    from keras_vit import export

    model = keras_vit.DepthEstimator(backbone="tiny_dinov2", image_size=(16, 24), preprocessing="unit", **DECODER)
    rng = np.random.default_rng(0)
    for weight in model.weights:  # convolutions scaled by their fan-in: a depth of order 1
        scale = 0.3 if len(weight.shape) < 4 else np.prod(weight.shape[:-1]) ** -0.5
        weight.assign(rng.normal(size=weight.shape).astype("float32") * scale)
    pixels = rng.uniform(0, 255, (2, 16, 24, 3)).astype("float32")
    expected = to_numpy(model(pixels))
    assert (expected > 0).mean() > 0.3 and np.abs(expected).max() > 0.5
    loaded = tf.saved_model.load(export.saved_model(model, str(tmp_path / "served")))
    served = loaded.signatures["serving_default"](images=tf.constant(pixels))
    assert set(served) == {"depth"}
    np.testing.assert_allclose(served["depth"].numpy(), expected, atol=1e-5, rtol=0)
    result = export.tflite(model, str(tmp_path / "depth.tflite"), batch_size=2)
    assert result.output_name == "depth"
    interpreter = Interpreter(model_path=result.path)
    got = interpreter.get_signature_runner("serving_default")(images=pixels)["depth"]
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="Invalid class_names: a depth model has no classes"):
        export.tflite(model, str(tmp_path / "named.tflite"), class_names=["a"])


def test_cli_predict_refuses_a_depth_model_in_one_line(tmp_path, capsys):
    from PIL import Image

    from keras_vit.cli import main

    path = str(tmp_path / "depth.keras")
    keras_vit.DepthEstimator(backbone="tiny").save(path)
    Image.fromarray(np.zeros((8, 8, 3), "uint8")).save(tmp_path / "photo.png")
    assert main(["predict", path, str(tmp_path / "photo.png"), "--scaling", "symmetric"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "depth model 'depth_anything': it returns depth maps, not classes" in error[0]


def test_a_depth_model_has_a_bfloat16_copy_as_the_predictors_use():
    # Its graph passes symbolic tensors as call arguments: the copy keeps their dtypes.
    from keras_vit.export.compute_precision import compute_model

    model = keras_vit.DepthEstimator(backbone="tiny")
    images = np.random.default_rng(0).uniform(-1, 1, (1, 32, 32, 3)).astype("float32")
    copy = compute_model(model, "bfloat16")
    assert copy.get_layer("encoderblock_0").compute_dtype == "bfloat16"
    expected = to_numpy(model(images))
    np.testing.assert_allclose(to_numpy(copy(images)).astype("float32"), expected, atol=0.05 * np.abs(expected).max() + 1e-3)
