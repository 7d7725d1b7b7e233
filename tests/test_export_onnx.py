"""ONNX export: a valid graph (Erf, not Erfc; statistics as initializers), probabilities out, run by onnxruntime."""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import cli, export

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")

NAMES = ("cat", "dog", "fox")


def random_model(classifier_activation=None, preprocessing="imagenet", seed=0):
    """A tiny ViT with random weights everywhere, head included (builders zero the head)."""
    keras.utils.set_random_seed(seed)
    model = keras_vit.ViT(
        "tiny", num_classes=len(NAMES), preprocessing=preprocessing, classifier_activation=classifier_activation
    )
    rng = np.random.default_rng(seed)
    model.get_layer("head").set_weights(
        [rng.normal(0, 0.5, w.shape).astype("float32") for w in model.get_layer("head").get_weights()]
    )
    return model


def _session(path):
    return onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize(
    "activation, preprocessing, scaling",
    [(None, "imagenet", None), ("softmax", None, "imagenet")],  # scaling inside the model, or added by the export
)
def test_valid_graph_gives_keras_probabilities(activation, preprocessing, scaling, tmp_path, capfd):
    model = random_model(activation, preprocessing)
    x = np.random.default_rng(1).uniform(0, 255, (5, 32, 32, 3)).astype("float32")
    scaled = x
    if scaling is not None:  # the export scales in its graph; Keras gets scaled inputs
        mean, std = keras_vit.configs.SCALINGS[scaling]
        scaled = (x - np.asarray(mean, "float32")) / np.asarray(std, "float32")
    outputs = np.asarray(model.predict(scaled, verbose=0))
    expected = outputs if activation == "softmax" else np.asarray(keras.ops.softmax(outputs))
    assert expected.max() > 0.5  # a head that separates the classes, so a missing softmax would show

    capfd.readouterr()
    result = export.onnx(model, str(tmp_path / "m.onnx"), scaling=scaling, class_names=NAMES)
    assert capfd.readouterr().out == ""  # nothing from the converter on stdout

    proto = onnx.load(result.path)
    onnx.checker.check_model(proto, full_check=True)
    assert result.ops["Erf"] == 2 and "Erfc" not in result.ops
    assert [i.name for i in proto.graph.input] == ["images"]  # no statistics as required inputs
    assert [o.name for o in proto.graph.output] == ["probabilities"]
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    session = _session(result.path)
    for batch in (1, 5):  # dynamic batch
        probabilities = session.run(None, {"images": x[:batch]})[0]
        np.testing.assert_allclose(probabilities, expected[:batch], atol=1e-5)
        np.testing.assert_allclose(np.log(probabilities), np.log(expected[:batch]), atol=1e-4)

    predictor = export.load_predictor(result.path)
    assert predictor.kind == "onnx" and predictor.class_names == NAMES
    np.testing.assert_allclose(predictor.predict(x), expected, atol=1e-5)
    with pytest.raises(ValueError, match="empty batch"):
        predictor.predict(np.zeros((0, 32, 32, 3)))


def test_cli_export_onnx(tmp_path, capsys):
    model = random_model()
    keras_path = str(tmp_path / "m.keras")
    model.save(keras_path)
    (tmp_path / "labels.txt").write_text("".join(name + "\n" for name in NAMES))
    target = str(tmp_path / "out" / "m.onnx")
    assert cli.main(["export", keras_path, "--onnx", target]) == 0
    assert capsys.readouterr().out.startswith(f"ONNX (opset 17): {target}, ")
    assert _session(target).get_modelmeta().custom_metadata_map["labels"] == "\n".join(NAMES)

    # User mistakes: one line on stderr, exit code 2, nothing written.
    assert cli.main(["export", keras_path, "--onnx", target]) == 2
    assert "already exists" in capsys.readouterr().err
    assert cli.main(["export", keras_path, "--onnx", str(tmp_path / "m.txt")]) == 2
    err = capsys.readouterr().err
    assert "m.txt" in err and ".onnx" in err and len(err.strip().splitlines()) == 1
    assert not os.path.exists(tmp_path / "m.txt")


def test_refuses_what_onnxruntime_cannot_run(tmp_path):
    # A mixed-precision model exports in float32 (tests/test_export_precision.py); a dynamic size cannot.
    dynamic = keras_vit.ViT(
        "tiny", num_classes=2, input_shape=(None, None, 3), position_embedding="sincos2d", preprocessing="unit"
    )
    with pytest.raises(ValueError, match="dynamic height or width"):
        export.onnx(dynamic, str(tmp_path / "m.onnx"))
    assert os.listdir(tmp_path) == []


def test_shifted_patch_model_exports_to_onnx(tmp_path, capsys):
    """The plain ViT on shifted patches (`--tokenizer shifted`): onnxruntime gives Keras' outputs."""
    from keras_vit.models import stems

    keras.utils.set_random_seed(0)
    model = keras_vit.ViT(backbone=stems.shifted_patch_stem(7, channels=3), patch_size=1, hidden_size=32, num_layers=1,
                          num_heads=2, mlp_dim=64, input_shape=(28, 28, 3), num_classes=len(NAMES), preprocessing="unit")
    keras_path, target = str(tmp_path / "m.keras"), str(tmp_path / "m.onnx")
    model.save(keras_path)
    assert cli.main(["export", keras_path, "--onnx", target]) == 0, capsys.readouterr().err
    images = np.random.default_rng(1).uniform(0, 255, (2, 28, 28, 3)).astype("float32")
    session = _session(target)
    got = session.run(None, {session.get_inputs()[0].name: images})[0]
    np.testing.assert_allclose(got, keras.ops.convert_to_numpy(model(images)), atol=1e-5)
