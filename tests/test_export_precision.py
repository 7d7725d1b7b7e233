"""Every export format from a model trained or built under each dtype policy computes in float32.

A model built under mixed_bfloat16 or mixed_float16 keeps float32 variables; the exports rebuild it
in float32 (`keras_vit.export.compute_precision.float32_model`), so each exported file must match the
float32 Keras model with the same weights, to the tolerance its own quantization allows. Before
that rule TFLite refused every mixed-precision model ("'tf.Conv2D' op is neither a custom op nor
a flex op") and ONNX refused them by design.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit import export
from keras_vit.export import compute_precision

POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")
# Largest difference in probability from the float32 Keras model, per format. Float32 files
# differ only by summation order; float16 weights by their rounding; dynamic and int8 by 8-bit
# quantization of weights (and activations), on a random model whose logits spread over ~5.
TOLERANCES = {
    "saved_model": 1e-5,
    "serve_bytes": 1e-5,
    "tflite_none": 1e-5,
    "tflite_float16": 5e-3,
    "tflite_dynamic": 0.05,
    "tflite_int8": 0.15,
    "onnx": 1e-5,
}


def _models(policy):
    """A tiny random 32 px ViT built under `policy`, and the float32 model with the same weights."""
    keras.config.set_dtype_policy(policy)
    model = keras_vit.ViT("tiny", num_classes=4, preprocessing="unit")
    keras.config.set_dtype_policy("float32")
    rng = np.random.default_rng(0)
    # Builders zero the head: random weights everywhere, so that every class has its own logit.
    model.set_weights([rng.normal(0, 0.3, w.shape).astype("float32") for w in model.get_weights()])
    reference = keras_vit.ViT("tiny", num_classes=4, preprocessing="unit")
    reference.set_weights(model.get_weights())
    return model, reference


def _images():
    return np.random.default_rng(1).integers(0, 256, (6, 32, 32, 3)).astype("float32")


def _exported_probabilities(formats, model, images, tmp_path):
    """{format: probabilities} of `model` exported in each of `formats` (the SavedModel ones share one export)."""
    result = {}
    if {"saved_model", "serve_bytes"} & set(formats):
        signatures = tf.saved_model.load(export.saved_model(model, str(tmp_path / "serving"))).signatures
        result["saved_model"] = signatures["serving_default"](images=tf.constant(images))["probabilities"].numpy()
        encoded = [tf.io.encode_png(tf.constant(image.astype("uint8"))).numpy() for image in images]
        result["serve_bytes"] = signatures["serve_bytes"](image_bytes=tf.constant(encoded))["probabilities"].numpy()
    if "onnx" in formats:
        result["onnx"] = export.load_predictor(export.onnx(model, str(tmp_path / "vit.onnx")).path).predict(images)
    for fmt in formats:
        if fmt.startswith("tflite_"):
            quantization = fmt.removeprefix("tflite_")
            written = export.tflite(model, str(tmp_path / f"{fmt}.tflite"), quantization,
                                    representative_data=images if quantization == "int8" else None)
            assert not any(op.startswith("Flex") for op in written.ops), written.ops
            result[fmt] = export.load_predictor(written.path).predict(images)
    return {fmt: result[fmt] for fmt in formats}


# Each format once under a low-precision policy, each policy at least once. `float32_model` has two
# branches: a float32 model is exported as it is; a model computing below float32 is rebuilt in
# float32, mixed_bfloat16 and mixed_float16 alike (one `_float32_config` rewrite of every
# low-precision "dtype"). Every format calls it the same way, so each format runs under one low
# policy, the two alternating over the formats. The float32 branch, the default of every other
# export test, is checked here once, on the float32 TFLite file. The SavedModel case reads both of
# its signatures (serving_default and serve_bytes) from one export.
CASES = (
    ("float32", ("tflite_none",)),
    ("mixed_bfloat16", ("saved_model", "serve_bytes")),
    ("mixed_float16", ("tflite_none",)),
    ("mixed_bfloat16", ("tflite_float16",)),
    ("mixed_float16", ("tflite_dynamic",)),
    ("mixed_bfloat16", ("tflite_int8",)),
    ("mixed_float16", ("onnx",)),
)


@pytest.fixture(scope="module")
def models():
    """models(policy): `_models(policy)`, built once per policy for the module."""
    cache = {}

    def get(policy):
        if policy not in cache:
            cache[policy] = _models(policy)
        return cache[policy]

    return get


@pytest.mark.parametrize("policy, formats", CASES, ids=[f"{p}-{'+'.join(f)}" for p, f in CASES])
def test_every_export_of_every_policy_matches_the_float32_model(policy, formats, models, tmp_path):
    """Every format (`TOLERANCES`) from a model of each policy matches the float32 model; see `CASES` for why
    each format runs under one low-precision policy."""
    model, reference = models(policy)
    images = _images()
    expected = np.asarray(reference(images, training=False))
    assert expected.max() - expected.min() > 0.2, "the random model must not predict uniformly"
    exported = _exported_probabilities(formats, model, images, tmp_path)
    for fmt in formats:
        out = exported[fmt]
        assert out.dtype == np.float32 and out.shape == expected.shape, fmt
        np.testing.assert_allclose(out, expected, atol=TOLERANCES[fmt], err_msg=fmt)
        if fmt in ("saved_model", "tflite_none", "onnx") and policy != "float32":
            # Computing in the training precision (as SavedModel did before) would fail the tolerance.
            low = np.asarray(model(images, training=False))
            assert np.abs(low - expected).max() > TOLERANCES[fmt], fmt


def test_the_cases_cover_every_format_under_a_low_precision_policy_and_the_float32_branch():
    low = [fmt for policy, formats in CASES if policy != "float32" for fmt in formats]
    assert sorted(low) == sorted(TOLERANCES)
    assert {policy for policy, _ in CASES} == set(POLICIES)


def test_float32_model_copies_only_what_computes_below_float32():
    model, reference = _models("mixed_bfloat16")
    copy = compute_precision.float32_model(model)
    assert copy is not model
    assert {layer.compute_dtype for layer in copy.layers} == {"float32"}
    assert copy.get_config()["name"] == model.name and len(copy.weights) == len(model.weights)
    np.testing.assert_array_equal(copy.get_weights()[3], model.get_weights()[3])
    # The original keeps its policy; a float32 model is exported as it is.
    assert model.get_layer("encoderblock_0").dtype_policy.name == "mixed_bfloat16"
    assert compute_precision.float32_model(reference) is reference
    assert keras.config.dtype_policy().name == "float32"


def test_hybrid_with_keras_applications_backbone_exports_float32(tmp_path):
    """A nested model (a keras.applications stem) is rebuilt in float32 as well; at 32 px, the smallest input
    MobileNetV3Small takes (a 1x1 feature map: one token behind the class token)."""
    keras.config.set_dtype_policy("mixed_bfloat16")
    backbone = keras.applications.MobileNetV3Small(
        input_shape=(32, 32, 3), include_top=False, weights=None, include_preprocessing=False
    )
    model = keras_vit.ViT("tiny", num_classes=3, backbone=backbone, image_size=32, preprocessing="unit")
    keras.config.set_dtype_policy("float32")
    copy = compute_precision.float32_model(model)
    nested = [layer for layer in copy.layers if isinstance(layer, keras.Model)]
    assert nested and {layer.compute_dtype for layer in nested[0].layers} == {"float32"}
    result = export.tflite(model, str(tmp_path / "hybrid.tflite"))
    assert not any(op.startswith("Flex") for op in result.ops)


@pytest.mark.backends("jax", "torch")
def test_exports_from_jax_and_pytorch_compute_in_float32(tmp_path):
    """From JAX and PyTorch the exports run in a TensorFlow child on the .keras file: same rule there
    (the child's code is the TensorFlow path above, so one policy stands for both)."""
    model, reference = _models("mixed_bfloat16")
    images = _images()
    expected = keras.ops.convert_to_numpy(reference(images, training=False))
    with export.shared_process():
        serving = export.saved_model(model, str(tmp_path / "serving"))
        float_file = export.tflite(model, str(tmp_path / "vit.tflite"))
        onnx_file = export.onnx(model, str(tmp_path / "vit.onnx"))
    assert not any(op.startswith("Flex") for op in float_file.ops)
    for path in (serving, float_file.path, onnx_file.path):
        np.testing.assert_allclose(export.load_predictor(path).predict(images), expected, atol=1e-5)
