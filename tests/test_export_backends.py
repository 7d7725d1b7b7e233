"""Exports from JAX and PyTorch models: every format, the TensorFlow signatures and outputs, `keras-vit train`/`export`.

These run only under KERAS_BACKEND=jax or torch (TensorFlow's exports are tested in
test_export*.py). The exports there go through one TensorFlow child process
(`keras_vit.export.shared_process`), so each test pays one TensorFlow start-up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit import cli, export
from keras_vit.export import _tensorflow_process
from keras_vit.export.saved_model import error_text

pytestmark = pytest.mark.backends("jax", "torch")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = ("cat", "dog", "fox")


def _random_model():
    """A tiny 32 px ViT with random weights everywhere (builders zero the head), logits out."""
    keras.utils.set_random_seed(0)
    model = keras_vit.ViT("tiny", num_classes=len(NAMES), preprocessing="unit", classifier_activation=None)
    rng = np.random.default_rng(0)
    model.set_weights([rng.normal(0, 0.3, w.shape).astype("float32") for w in model.get_weights()])
    return model


def test_every_format_gives_the_backend_models_probabilities(tmp_path, capsys):
    model = _random_model()
    x = np.random.default_rng(1).uniform(0, 255, (4, 32, 32, 3)).astype("float32")
    expected = keras.ops.convert_to_numpy(keras.ops.softmax(model(x, training=False)))
    model.save(tmp_path / "vit.keras")
    np.save(tmp_path / "calibration.npy", x)
    with export.shared_process():
        path = export.saved_model(model, str(tmp_path / "serving"), class_names=NAMES, top_k=2)
        float_file = export.tflite(model, str(tmp_path / "vit.tflite"), class_names=NAMES)
        onnx_file = export.onnx(model, str(tmp_path / "vit.onnx"), class_names=NAMES)
        # What only the TensorFlow process checks comes back as the same exception.
        with pytest.raises(ValueError, match="top_k=0"):
            _tensorflow_process.call("saved_model", model, str(tmp_path / "other"), top_k=0)
        # `keras-vit export` on this backend (in this block it reuses the same TensorFlow process).
        code = cli.main(["export", str(tmp_path / "vit.keras"), "--tflite", str(tmp_path / "int8.tflite"),
                         "--quantization", "int8", "--representative-data", str(tmp_path / "calibration.npy")])
        assert code == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "TFLite (int8)" in printed and "QUANTIZE" in printed
    np.testing.assert_allclose(export.load_predictor(str(tmp_path / "int8.tflite")).predict(x), expected, atol=0.25)

    # The SavedModel: TensorFlow's loader, the same two signatures, outputs and errors as from TensorFlow.
    assert path == str(tmp_path / "serving" / "1")
    loaded = tf.saved_model.load(path)
    assert set(loaded.signatures) == {"serving_default", "serve_bytes"}
    out = loaded.signatures["serving_default"](images=tf.constant(x))
    assert sorted(out) == ["probabilities", "top_k_indices", "top_k_labels", "top_k_probabilities"]
    np.testing.assert_allclose(out["probabilities"].numpy(), expected, atol=1e-5)
    assert out["top_k_labels"].numpy().astype(str).tolist() == [
        [NAMES[i] for i in row] for row in np.argsort(-expected, axis=-1, kind="stable")[:, :2]
    ]
    encoded = tf.constant([tf.io.encode_png(tf.constant(image.round().astype("uint8"))).numpy() for image in x])
    from_bytes = loaded.signatures["serve_bytes"](image_bytes=encoded)
    rounded = keras.ops.convert_to_numpy(keras.ops.softmax(model(x.round(), training=False)))
    np.testing.assert_allclose(from_bytes["probabilities"].numpy(), rounded, atol=1e-5)
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        loaded.signatures["serve_bytes"](image_bytes=tf.constant([b"hello"]))
    assert error_text(error.value) == "image_bytes[0] is not a JPEG, PNG, GIF, BMP or WebP file (unknown leading bytes)."
    weight_bytes = sum(int(np.prod(w.shape)) * 4 for w in model.weights)
    assert export.load_predictor(path).class_names == NAMES
    stored = sum(os.path.getsize(os.path.join(path, "variables", f)) for f in os.listdir(os.path.join(path, "variables")))
    # Twice would be 2x; the rest is the checkpoint's own bookkeeping (a few kB).
    assert stored < 1.5 * weight_bytes, f"variables/ holds {stored} bytes for {weight_bytes} bytes of weights"

    # TFLite and ONNX, read back by their own runtimes.
    np.testing.assert_allclose(export.load_predictor(float_file.path).predict(x), expected, atol=1e-5)
    assert export.load_predictor(float_file.path).class_names == NAMES
    assert float_file.ops["GELU"] == 2
    np.testing.assert_allclose(export.load_predictor(onnx_file.path).predict(x), expected, atol=1e-5)
    assert sorted(os.listdir(tmp_path)) == [
        "calibration.npy", "int8.labels.txt", "int8.tflite", "serving", "vit.keras", "vit.labels.txt", "vit.onnx", "vit.tflite"], "a temporary file was left behind"


def test_a_model_that_cannot_be_saved_is_refused_naming_the_backend(tmp_path):
    class Unsaveable(keras.Model):  # not registered: .keras cannot rebuild it
        def __init__(self):
            super().__init__(name="unsaveable")
            self.dense = keras.layers.Dense(3)

        def call(self, x):
            return self.dense(keras.ops.mean(x, axis=(1, 2)))

        def get_config(self):
            raise NotImplementedError("no config")

    model = Unsaveable()
    model(np.zeros((1, 8, 8, 3), "float32"))
    model = keras.Model(inputs := keras.Input((8, 8, 3)), model(inputs))
    with pytest.raises(ValueError, match=f"to TFLite from the {keras.backend.backend()} backend: "):
        export.tflite(model, str(tmp_path / "m.tflite"), scaling="unit")
    assert not os.listdir(tmp_path)


def test_a_child_that_dies_is_reported_with_its_output(tmp_path, monkeypatch):
    fake_python = tmp_path / "python"
    fake_python.write_text("#!/bin/sh\necho 'out of memory' >&2\nexit 3\n")
    fake_python.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake_python))
    with pytest.raises(RuntimeError, match=r"SavedModel from the \w+ backend ended with code 3(.|\n)*out of memory"):
        export.saved_model(_random_model(), str(tmp_path / "serving"))
    assert sorted(os.listdir(tmp_path)) == ["python"]


def test_cli_train_end_to_end(tmp_path):
    """`keras-vit train` in a fresh process on this backend writes every artefact, as on TensorFlow."""
    backend = keras.backend.backend()
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out_dir = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "keras_vit.cli", "train", "--variant", "tiny", "--image-size", "28", "--channels", "1",
         "--num-layers", "1", "--epochs", "1", "--batch-size", "32", "--max-train-examples", "64",
         "--max-test-examples", "32",
         # XLA on JAX (op by op is slower there); on PyTorch torch.compile costs more than it saves.
         "--jit-compile", "on" if backend == "jax" else "off",
         "--run-dir", str(tmp_path / "run"), "--output-dir", str(out_dir), "--name", "m", "--quiet"],
        capture_output=True, text=True, env=env, timeout=400,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(os.listdir(out_dir)) == ["m", "m.json", "m.keras", "m.labels.txt", "m.tflite"]
    summary = json.loads((out_dir / "m.json").read_text())
    assert set(summary["artifacts"]) == {"keras", "labels", "saved_model", "tflite", "summary"}
    model = keras.saving.load_model(str(out_dir / "m.keras"))
    x = np.random.default_rng(2).uniform(0, 255, (3,) + tuple(model.input_shape[1:])).astype("float32")
    expected = keras.ops.convert_to_numpy(model(x, training=False))
    for artefact in (out_dir / "m" / "1", out_dir / "m.tflite"):
        predictor = export.load_predictor(str(artefact))
        assert len(predictor.class_names) == 10
        np.testing.assert_allclose(predictor.predict(x), expected, atol=1e-5)

