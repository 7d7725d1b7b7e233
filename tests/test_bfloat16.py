"""bfloat16 inference and serving (issue 41): the opt-in bfloat16 SavedModel, `predict --precision`,
and the attention softmax that skips its float32 round trip for bfloat16 where the kernels
accumulate in float32. The training rule's branches are in tests/test_machine.py.

The AMX CPU is forced (`keras_vit.machine.detect` replaced), so these run on any machine; the
speed and the agreement on real photos are measured in benchmarks/bfloat16_inference.py.
"""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit import cli, export, machine
from keras_vit.export import compute_precision
from keras_vit.layers import self_attention
from keras_vit.machine import Machine

AMX = Machine("cpu", cpu_flags=frozenset({"avx512f", "amx_tile", "amx_bf16"}))
NO_AMX = Machine("cpu", cpu_flags=frozenset({"avx2", "avx512_bf16"}))
WIDE = {"hidden_size": machine.TENSORFLOW_AMX_MIN_WIDTH, "num_heads": 2, "mlp_dim": 64, "num_layers": 1}


def _images(n=4, side=32, channels=3, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, side, side, channels)).astype("float32")


def _model(**overrides):
    """A tiny random ViT whose head is random too (a zero head answers 0.2 for every class in any precision)."""
    keras.utils.set_random_seed(0)
    model = keras_vit.ViT("tiny", num_classes=5, preprocessing="unit", classifier_activation="softmax",
                          **{"num_layers": 1, **overrides})
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(1).normal(0, 0.5, head.kernel.shape).astype("float32"))
    return model


def test_bfloat16_copy_keeps_the_head_and_scaling_in_float32_and_agrees():
    model = _model()
    copy = compute_precision.bfloat16_model(model)
    assert copy.get_layer("encoderblock_0").dtype_policy.name == "mixed_bfloat16"
    assert copy.get_layer("encoderblock_0").compute_dtype == "bfloat16"
    for name in ("head", "preprocessing"):
        assert copy.get_layer(name).compute_dtype == "float32", name
    assert {v.dtype for v in copy.weights} == {"float32"}  # the weights stay exact
    assert copy.jit_compile is False  # XLA's CPU bfloat16 is slower than oneDNN's
    images = _images()
    want, got = np.asarray(model(images)), np.asarray(copy(images))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=3e-2)
    assert not np.array_equal(got, want)  # it does compute in bfloat16
    assert compute_precision.compute_model(model, "float32") is model
    with pytest.raises(ValueError, match=r"precision='float16'.*\['float32', 'bfloat16'\]"):
        compute_precision.compute_model(model, "float16")


def test_bfloat16_saved_model_computes_in_bfloat16_from_float32_variables(tmp_path):
    model = _model()
    path = export.saved_model(model, str(tmp_path / "m"), precision="bfloat16")
    loaded = tf.saved_model.load(path)
    graph = loaded.signatures["serving_default"].graph
    matmuls = {op.get_attr("T") for f in graph.as_graph_def().library.function for op in _ops(f)
               if op.op in ("MatMul", "BatchMatMulV2")}
    assert tf.bfloat16.as_datatype_enum in matmuls, matmuls
    stored = tf.train.load_checkpoint(os.path.join(path, "variables", "variables")).get_variable_to_dtype_map()
    floats = {dtype for dtype in stored.values() if dtype.is_floating}
    assert floats == {tf.float32}, stored  # the weights are stored exactly, once
    images = _images()
    predictor = export.load_predictor(path)
    assert predictor.precision == "bfloat16"  # the file says what it computes in
    np.testing.assert_allclose(predictor.predict(images), np.asarray(model(images)), atol=3e-2)
    float32_path = export.saved_model(model, str(tmp_path / "m"))  # the default stays float32: version 2
    predictor = export.load_predictor(float32_path)
    assert predictor.precision == "float32"
    np.testing.assert_allclose(predictor.predict(images), np.asarray(model(images)), atol=1e-5)
    with pytest.raises(ValueError, match="precision='half'"):
        export.saved_model(model, str(tmp_path / "bad"), precision="half")
    assert not (tmp_path / "bad").exists()


def _ops(function_def):
    class Op:
        def __init__(self, node):
            self.op, self._node = node.op, node

        def get_attr(self, name):
            return self._node.attr[name].type

    return [Op(node) for node in function_def.node_def]


@pytest.mark.parametrize("forced, model_overrides, expected", [
    (AMX, WIDE, "bfloat16"),  # wide enough on TensorFlow with AMX
    (AMX, {}, "float32"),  # the tiny width: float32 + XLA ran faster
    (NO_AMX, {}, "bfloat16"),  # avx512_bf16 without AMX: bfloat16 at every width on TensorFlow (a Zen 4)
])
def test_predict_auto_precision_per_branch(forced, model_overrides, expected, tmp_path, monkeypatch):
    monkeypatch.setattr(machine, "detect", lambda *args, **kwargs: forced)
    path = str(tmp_path / "m.keras")
    model = _model(**model_overrides)
    model.save(path)
    predictor = export.load_predictor(path, precision="auto")
    assert predictor.precision == expected
    images = _images()
    np.testing.assert_allclose(predictor.predict(images), np.asarray(model(images)),
                               atol=3e-2 if expected == "bfloat16" else 1e-5)
    assert export.load_predictor(path).precision == "float32"  # the library's default


def test_cli_precision_flags(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(machine, "detect", lambda *args, **kwargs: AMX)
    path = str(tmp_path / "m.keras")
    _model(**WIDE).save(path)
    image = tmp_path / "photo.png"
    from PIL import Image

    Image.fromarray(_images(1)[0].astype("uint8")).save(image)
    assert cli.main(["predict", path, str(image), "--top-k", "1"]) == 0
    printed = capsys.readouterr()
    assert "precision bfloat16 (AMX bfloat16 tiles" in printed.err and str(image) in printed.out
    assert cli.main(["predict", path, str(image), "--precision", "float32"]) == 0
    assert capsys.readouterr().err == ""
    # A file's precision was fixed when it was exported: asking for another is refused.
    assert cli.main(["export", path, "--saved-model", str(tmp_path / "sm"), "--precision", "bfloat16"]) == 0
    assert "computes in bfloat16" in capsys.readouterr().out
    assert cli.main(["predict", str(tmp_path / "sm"), str(image), "--precision", "bfloat16"]) == 0
    assert "precision bfloat16 (the file's)" in capsys.readouterr().err
    assert cli.main(["export", path, "--saved-model", str(tmp_path / "sm32")]) == 0
    capsys.readouterr()
    assert cli.main(["predict", str(tmp_path / "sm32"), str(image), "--precision", "bfloat16"]) == 2
    err = capsys.readouterr().err
    assert "precision='bfloat16'" in err and "computes in float32" in err and len(err.strip().splitlines()) == 1
    assert cli.main(["export", path, "--tflite", str(tmp_path / "m.tflite"), "--precision", "bfloat16"]) == 2
    assert "--precision bfloat16 applies to the SavedModel" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "m.tflite")


@pytest.mark.backends("tensorflow", "jax", "torch")
def test_attention_softmax_dtype_per_backend():
    backend = keras.backend.backend()
    assert self_attention._softmax_dtype("float16") == "float32"  # float16 logits overflow
    assert self_attention._softmax_dtype("float32") == "float32"
    assert self_attention._softmax_dtype("bfloat16") == ("bfloat16" if backend in ("tensorflow", "torch") else "float32")
    # The skipped round trip changes nothing that matters: bfloat16 attention agrees with float32.
    layer = self_attention.MultiHeadSelfAttention(64, 4)
    x = np.random.default_rng(0).normal(size=(2, 17, 64)).astype("float32")
    want = keras.ops.convert_to_numpy(layer(x))
    keras.config.set_dtype_policy("mixed_bfloat16")
    mixed = self_attention.MultiHeadSelfAttention(64, 4)
    mixed.build(x.shape)
    mixed.set_weights(layer.get_weights())
    got = keras.ops.convert_to_numpy(keras.ops.cast(mixed(x), "float32"))
    np.testing.assert_allclose(got, want, atol=0.1, rtol=0.05)
