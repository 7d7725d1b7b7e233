"""TFLite/LiteRT files: probabilities out for every head, labels inside the file, a quiet converter."""

from __future__ import annotations

import os
import zipfile

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import export
from keras_vit.export import tflite_metadata

NAMES = ("cat", "dog", "fox")


def random_model(classifier_activation=None, seed=0):
    """A tiny ViT with random weights everywhere, head included (builders zero the head)."""
    keras.utils.set_random_seed(seed)
    model = keras_vit.ViT(
        "tiny", num_classes=len(NAMES), preprocessing="unit", classifier_activation=classifier_activation
    )
    rng = np.random.default_rng(seed)
    model.get_layer("head").set_weights(
        [rng.normal(0, 0.5, w.shape).astype("float32") for w in model.get_layer("head").get_weights()]
    )
    return model


def images(n, seed=1):
    return np.random.default_rng(seed).uniform(0, 255, (n, 32, 32, 3)).astype("float32")


def _run(path, x):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=path)
    assert interpreter.get_signature_list()["serving_default"]["outputs"] == ["probabilities"]
    runner = interpreter.get_signature_runner("serving_default")
    return np.concatenate([runner(images=x[i : i + 1])["probabilities"] for i in range(len(x))])


@pytest.fixture(scope="module")
def logits_file(tmp_path_factory):
    """A model whose head emits logits, exported with class names; the side labels file removed."""
    folder = tmp_path_factory.mktemp("tflite")
    model = random_model(None)
    x = images(4)
    logits = np.asarray(model.predict(x, verbose=0))
    keras_path, path = str(folder / "m.keras"), str(folder / "m.tflite")
    model.save(keras_path)
    result = export.tflite(model, path, class_names=NAMES)
    os.remove(folder / "m.labels.txt")  # the file alone must carry them
    return {"result": result, "path": path, "keras_path": keras_path, "x": x, "logits": logits}


def test_logits_head_gives_probabilities(logits_file):
    expected = np.asarray(keras.ops.softmax(logits_file["logits"]))
    assert expected.max() > 0.5  # a head that separates the classes, so a missing softmax would show
    assert logits_file["result"].output_name == "probabilities"
    probabilities = _run(logits_file["path"], logits_file["x"])
    np.testing.assert_allclose(probabilities, expected, atol=1e-5)
    predicted = export.load_predictor(logits_file["path"]).predict(logits_file["x"])
    np.testing.assert_allclose(predicted, expected, atol=1e-5)


def test_softmax_head_is_not_applied_twice_and_export_is_quiet(tmp_path, capfd):
    model = random_model("softmax")
    x = images(4)
    expected = np.asarray(model.predict(x, verbose=0))
    capfd.readouterr()
    path = export.tflite(model, str(tmp_path / "m.tflite")).path
    assert capfd.readouterr().out == ""  # nothing from the converter on stdout
    probabilities = _run(path, x)
    np.testing.assert_allclose(probabilities, expected, atol=1e-5)
    assert np.abs(probabilities - np.asarray(keras.ops.softmax(expected))).max() > 0.1
    # Without class names: the metadata, but no labels archive.
    assert tflite_metadata.read_metadata(path)[4:8] == b"M001"
    assert not zipfile.is_zipfile(path)
    assert tflite_metadata.labels_in(path) is None
    assert export.load_predictor(path).class_names is None


def test_labels_travel_inside_the_file(logits_file, tmp_path):
    path = logits_file["path"]
    # Independent readers: the zip archive the metadata tools read, and the interpreter.
    with zipfile.ZipFile(path) as files:
        assert files.namelist() == ["labels.txt"]
        assert files.getinfo("labels.txt").compress_type == zipfile.ZIP_STORED
        assert files.read("labels.txt").decode().splitlines() == list(NAMES)
    np.testing.assert_allclose(_run(path, logits_file["x"][:1]).sum(-1), 1.0, atol=1e-5)
    from ai_edge_litert import schema_py_generated as schema

    with open(path, "rb") as f:
        model = schema.Model.GetRootAs(bytearray(f.read()), 0)
    names = [model.Metadata(i).Name().decode() for i in range(model.MetadataLength())]
    assert "TFLITE_METADATA" in names
    assert export.load_predictor(path).class_names == NAMES
    # The file's own labels come before a side file; class_names= before both.
    copy = tmp_path / "m.tflite"
    copy.write_bytes(open(path, "rb").read())
    (tmp_path / "labels.txt").write_text("x\ny\nz\n")
    assert export.load_predictor(str(copy)).class_names == NAMES
    assert export.load_predictor(str(copy), class_names=["a", "b", "c"]).class_names == ("a", "b", "c")

    # Metadata that names a labels file the archive lost: a clear error, not a guess.
    with zipfile.ZipFile(path) as files:
        start = files.infolist()[0].header_offset  # absolute: zipfile adds the model bytes before it
    copy.write_bytes(open(path, "rb").read()[:start])
    with pytest.raises(ValueError, match="labels file 'labels.txt'"):
        export.load_predictor(str(copy))


def test_int8_export_prints_nothing_on_stdout(tmp_path, capfd):
    model = random_model()
    capfd.readouterr()
    export.tflite(model, str(tmp_path / "m.tflite"), "int8", representative_data=images(8), calibration_samples=8)
    assert capfd.readouterr().out == ""


@pytest.mark.parametrize("quantization, float_ops", [("none", None), ("dynamic", None), ("int8", None), ("int8", ())],
                         ids=["float32", "dynamic", "int8", "int8_full"])
def test_non_finite_pixels_at_the_interpreter(quantization, float_ops, tmp_path):
    """Issue 43: the int8 file answered an image with a NaN pixel with plausible probabilities (the float file
    gives NaN); issue 55: the same for +Inf and -Inf. Now int8 and dynamic files give NaN for any non-finite pixel,
    as the float file does; a full-integer file cannot (README, deployment)."""
    model = random_model()
    x = images(8)
    extra = dict(representative_data=x, calibration_samples=8) if quantization == "int8" else {}
    if float_ops is not None:
        extra["float_ops"] = float_ops
    path = str(tmp_path / "m.tflite")
    export.tflite(model, path, quantization, **extra)
    bad = x[:4].copy()
    for index, value in enumerate((np.nan, np.inf, -np.inf)):
        bad[index, 5, 7, 1] = value
    out = _run(path, bad)
    assert np.isfinite(out[3]).all() and abs(out[3].sum() - 1) < 0.02  # the clean image is answered
    for index, value in enumerate(("NaN", "+Inf", "-Inf")):
        if float_ops == ():  # its first op quantizes the pixel like any other
            assert np.isfinite(out[index]).all() and abs(out[index].sum() - 1) < 0.02
        else:
            assert np.isnan(out[index]).all(), (value, out[index])


def test_empty_batch_is_refused(logits_file):
    for path in (logits_file["keras_path"], logits_file["path"]):
        predictor = export.load_predictor(path)
        with pytest.raises(ValueError, match=r"\(0, 32, 32, 3\).*empty batch"):
            predictor.predict(np.zeros((0, 32, 32, 3)))
