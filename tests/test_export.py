"""Deployment: SavedModel (TF Serving) and TFLite/LiteRT exports of a model trained on the shipped sample."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit import cli, export
from keras_vit.data import fashion_mnist

# Test images used for the agreement checks; the full 2,000 go through `python -m benchmarks export-report`.
NUM_TEST = 1000


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """A small ViT trained briefly on part of the shipped Fashion-MNIST sample, saved with labels.txt."""
    (x_train, y_train), (x_test, y_test) = fashion_mnist.load_sample()
    keras.utils.set_random_seed(0)
    model = keras_vit.ViT(
        patch_size=7,
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        mlp_dim=64,
        input_shape=(28, 28, 1),
        num_classes=10,
        preprocessing="unit",
        classifier_activation=None,
        name="vit_fashion_test",
    )
    model.compile(
        optimizer=keras.optimizers.AdamW(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    model.fit(x_train[..., None].astype("float32"), y_train, epochs=3, batch_size=64, verbose=0)
    folder = tmp_path_factory.mktemp("trained")
    model_path = str(folder / "model.keras")
    model.save(model_path)
    with open(folder / export.LABELS_FILENAME, "w") as f:
        f.write("\n".join(fashion_mnist.CLASS_NAMES) + "\n")
    x = x_test[:NUM_TEST, ..., None].astype("float32")
    logits = np.asarray(model.predict(x, verbose=0))
    return {
        "model": model,
        "path": model_path,
        "x": x,
        "y": y_test[:NUM_TEST],
        "logits": logits,
        "probabilities": np.asarray(tf.nn.softmax(logits)),
        "x_train": x_train[:, ..., None].astype("float32"),
    }


@pytest.fixture(scope="session")
def served(trained, tmp_path_factory):
    base = str(tmp_path_factory.mktemp("serving") / "fashion")
    path = export.saved_model(trained["model"], base, class_names=fashion_mnist.CLASS_NAMES, top_k=3)
    return base, path


def _png(image):
    return tf.io.encode_png(tf.constant(np.asarray(image, "uint8"))).numpy()


def test_saved_model_signatures_match_keras(trained, served):
    base, path = served
    assert path == os.path.join(os.path.abspath(base), "1")
    assert sorted(os.listdir(base)) == ["1"], "a temporary folder was left behind"
    loaded = tf.saved_model.load(path)
    assert set(loaded.signatures) == {"serving_default", "serve_bytes"}
    pixels = loaded.signatures["serving_default"]
    for batch in (1, 7, NUM_TEST):
        out = pixels(images=tf.constant(trained["x"][:batch]))
        np.testing.assert_allclose(out["probabilities"].numpy(), trained["probabilities"][:batch], atol=1e-5)
    expected = np.argsort(-trained["probabilities"][:7], axis=-1, kind="stable")[:, :3]
    out = pixels(images=tf.constant(trained["x"][:7]))
    np.testing.assert_array_equal(out["top_k_indices"].numpy(), expected)
    labels = out["top_k_labels"].numpy().astype(str)
    assert labels.tolist() == [[fashion_mnist.CLASS_NAMES[i] for i in row] for row in expected]
    assert out["top_k_probabilities"].dtype == tf.float32

    # Encoded PNG strings decode in the graph to the same pixels.
    encoded = [_png(image) for image in trained["x"][:5]]
    from_bytes = loaded.signatures["serve_bytes"](image_bytes=tf.constant(encoded))
    np.testing.assert_allclose(from_bytes["probabilities"].numpy(), trained["probabilities"][:5], atol=1e-5)

    # A corrupt string fails that request only.
    with pytest.raises(tf.errors.InvalidArgumentError):
        loaded.signatures["serve_bytes"](image_bytes=tf.constant([encoded[0], b"not an image"]))
    again = loaded.signatures["serve_bytes"](image_bytes=tf.constant(encoded[:1]))
    np.testing.assert_allclose(again["probabilities"].numpy(), trained["probabilities"][:1], atol=1e-5)
    with open(os.path.join(path, "assets.extra", "labels.txt")) as f:
        assert f.read().splitlines() == list(fashion_mnist.CLASS_NAMES)


def _saved_model_cli():
    if shutil.which("saved_model_cli"):
        return ["saved_model_cli"]
    return [sys.executable, "-m", "tensorflow.python.tools.saved_model_cli"]


def test_saved_model_cli_in_a_separate_process(trained, served, tmp_path):
    _, path = served
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    shown = subprocess.run(
        _saved_model_cli() + ["show", "--all", "--dir", path],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert shown.returncode == 0, shown.stderr[-2000:]
    for text in ("signature_def['serving_default']", "signature_def['serve_bytes']", "images", "image_bytes",
                 "probabilities", "top_k_indices", "top_k_labels", "DT_STRING", "(-1, 28, 28, 1)"):
        assert text in shown.stdout, text
    np.save(tmp_path / "images.npy", trained["x"][:16])
    outdir = tmp_path / "out"
    ran = subprocess.run(
        _saved_model_cli() + ["run", "--dir", path, "--tag_set", "serve", "--signature_def", "serving_default",
                              "--inputs", f"images={tmp_path / 'images.npy'}", "--outdir", str(outdir)],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    np.testing.assert_allclose(np.load(outdir / "probabilities.npy"), trained["probabilities"][:16], atol=1e-5)


def test_saved_model_versions_and_overwrite(trained, tmp_path):
    from keras_vit.export.saved_model import _resolve_version

    model, base = trained["model"], str(tmp_path / "m")
    assert export.saved_model(model, base).endswith(os.sep + "1")
    assert export.saved_model(model, base, version=7).endswith(os.sep + "7")
    assert _resolve_version(base, None) == 8
    with pytest.raises(FileExistsError, match="already exists"):
        export.saved_model(model, base, version=7)
    before = os.path.getmtime(os.path.join(base, "1", "saved_model.pb"))
    export.saved_model(model, base, version=1, overwrite=True, class_names=fashion_mnist.CLASS_NAMES)
    assert os.path.isfile(os.path.join(base, "1", "assets.extra", "labels.txt"))
    assert os.path.getmtime(os.path.join(base, "1", "saved_model.pb")) >= before
    # Not owner-only like tempfile's folders: a model server running as another user reads it.
    mask = os.umask(0)
    os.umask(mask)
    assert os.stat(os.path.join(base, "7")).st_mode & 0o777 == 0o777 & ~mask
    assert sorted(os.listdir(base)) == ["1", "7"], "temporary or old folders were left behind"
    with pytest.raises(ValueError, match="version=0"):
        export.saved_model(model, base, version=0)


def test_scaling_goes_into_the_graph_for_models_without_preprocessing(tmp_path):
    model = keras_vit.ViT("tiny", num_classes=4, input_shape=(8, 8, 3), classifier_activation=None)
    rng = np.random.default_rng(0)
    for weight in model.weights:
        weight.assign(rng.normal(0, 0.2, weight.shape).astype("float32"))
    x = rng.uniform(0, 255, (3, 8, 8, 3)).astype("float32")
    with pytest.raises(ValueError, match="scaling="):
        export.saved_model(model, str(tmp_path / "a"))
    assert not os.path.exists(tmp_path / "a")
    path = export.saved_model(model, str(tmp_path / "a"), scaling="symmetric")
    out = tf.saved_model.load(path).signatures["serving_default"](images=tf.constant(x))["probabilities"]
    expected = tf.nn.softmax(model(x / 127.5 - 1.0))
    np.testing.assert_allclose(out.numpy(), expected.numpy(), atol=1e-5)
    with_layer = keras_vit.ViT("tiny", num_classes=4, preprocessing="unit")
    with pytest.raises(ValueError, match="already scales"):
        export.saved_model(with_layer, str(tmp_path / "b"), scaling="unit")
    assert not os.path.exists(tmp_path / "b")


def test_mixed_precision_model_exports_float32_io(tmp_path):
    keras.config.set_dtype_policy("mixed_bfloat16")
    model = keras_vit.ViT("tiny", num_classes=3, preprocessing="unit", classifier_activation="softmax")
    keras.config.set_dtype_policy("float32")
    reference = keras_vit.ViT("tiny", num_classes=3, preprocessing="unit", classifier_activation="softmax")
    reference.set_weights(model.get_weights())
    x = np.random.default_rng(1).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    expected = np.asarray(reference(x))
    path = export.saved_model(model, str(tmp_path / "mixed"))
    signature = tf.saved_model.load(path).signatures["serving_default"]
    assert signature.structured_input_signature[1]["images"].dtype == tf.float32
    assert signature.structured_outputs["probabilities"].dtype == tf.float32
    out = signature(images=tf.constant(x))["probabilities"].numpy()
    # Exports compute in float32 (keras_vit.export); the head is float32 and softmax already applied.
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_tflite_float32_matches_keras(trained, tmp_path):
    path = str(tmp_path / "float" / "model.tflite")
    result = export.tflite(trained["model"], path, class_names=fashion_mnist.CLASS_NAMES)
    assert result.path == path and result.size_bytes == os.path.getsize(path)
    mask = os.umask(0)
    os.umask(mask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~mask  # readable beyond its owner, like a plain file
    assert result.output_name == "probabilities"
    assert result.ops["GELU"] == 2 and "FULLY_CONNECTED" in result.ops
    assert not any(name.startswith("Flex") for name in result.ops)
    assert export.read_labels(str(tmp_path / "float" / "model.labels.txt")) == fashion_mnist.CLASS_NAMES
    predictor = export.load_predictor(path)
    assert predictor.class_names == fashion_mnist.CLASS_NAMES
    np.testing.assert_allclose(predictor.predict(trained["x"][:100]), trained["probabilities"][:100], atol=1e-4)
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=path).get_signature_runner("serving_default")
    probabilities = np.concatenate([runner(images=trained["x"][i : i + 1])["probabilities"] for i in range(50)])
    np.testing.assert_allclose(probabilities, trained["probabilities"][:50], atol=1e-5)
    with pytest.raises(FileExistsError):
        export.tflite(trained["model"], path)


@pytest.mark.parametrize("quantization, threshold", [("float16", 0.99), ("dynamic", 0.99), ("int8", 0.97)])
def test_tflite_quantized_agreement(trained, tmp_path, quantization, threshold):
    path = str(tmp_path / f"{quantization}.tflite")
    data = tf.data.Dataset.from_tensor_slices((trained["x_train"][:400], np.zeros(400))).batch(32)
    result = export.tflite(trained["model"], path, quantization, representative_data=data)
    from ai_edge_litert.interpreter import Interpreter

    stored = {np.dtype(t["dtype"]).name for t in Interpreter(model_path=path).get_tensor_details()}
    assert {"float16": "float16", "dynamic": "int8", "int8": "int8"}[quantization] in stored, stored
    if quantization == "int8":
        assert result.ops.get("QUANTIZE", 0) >= 1
    probabilities = export.load_predictor(path).predict(trained["x"])
    agreement = np.mean(probabilities.argmax(-1) == trained["logits"].argmax(-1))
    assert agreement >= threshold, f"{quantization}: top-1 agreement {agreement:.4f} < {threshold}"


def test_tanh_gelu_file_reports_its_ops(trained, tmp_path):
    tanh_model = export.with_tanh_gelu(trained["model"])
    assert tanh_model is not trained["model"]
    assert all(layer.approximate_gelu for layer in tanh_model.layers if hasattr(layer, "approximate_gelu"))
    assert not any(layer.approximate_gelu for layer in trained["model"].layers if hasattr(layer, "approximate_gelu"))
    result = export.tflite(trained["model"], str(tmp_path / "tanh.tflite"), approximate_gelu=True)
    assert result.ops.get("GELU(approximate)") == 2 and "GELU" not in result.ops
    probabilities = export.load_predictor(result.path).predict(trained["x"][:100])
    np.testing.assert_allclose(probabilities, trained["probabilities"][:100], atol=1e-2)


def _assert_nothing_at(path):
    assert not os.path.exists(path), f"{path} was left behind"


def test_bad_input_leaves_nothing_behind(trained, tmp_path):
    model = trained["model"]
    target = tmp_path / "out" / "model.tflite"
    with pytest.raises(ValueError, match="quantization='int4'"):
        export.tflite(model, str(target), "int4")
    with pytest.raises(ValueError, match=r"representative_data: got images of shape \(8, 32, 32, 3\)"):
        export.tflite(model, str(target), "int8", representative_data=np.zeros((8, 32, 32, 3)))
    with pytest.raises(ValueError, match="needs representative_data"):
        export.tflite(model, str(target), "int8")
    _assert_nothing_at(tmp_path / "out")

    dynamic = keras_vit.ViT("tiny", num_classes=2, input_shape=(None, None, 3), position_embedding="sincos2d",
                            preprocessing="unit")
    with pytest.raises(ValueError, match="static"):
        export.tflite(dynamic, str(target))
    _assert_nothing_at(tmp_path / "out")

    class Unbuilt(keras.Model):
        def call(self, x):
            return x

    with pytest.raises(ValueError, match="not built"):
        export.tflite(Unbuilt(), str(target))
    with pytest.raises(ValueError, match="not built"):
        export.saved_model(Unbuilt(), str(tmp_path / "serving"))
    _assert_nothing_at(tmp_path / "serving")
    with pytest.raises(FileNotFoundError, match="missing.keras"):
        export.load_predictor(str(tmp_path / "missing.keras"))

    # A conversion that fails midway (the model cannot be traced) removes its temporary files.
    class Broken(keras.layers.Layer):
        def call(self, x):
            raise RuntimeError("broken on purpose")

        def compute_output_shape(self, shape):
            return shape[:1] + (2,)

    inputs = keras.Input((4, 4, 1))
    broken_target = tmp_path / "broken" / "b.tflite"
    outputs = Broken()(inputs)
    broken = keras.Model(inputs, outputs)
    with pytest.raises(Exception, match="broken on purpose"):
        export.tflite(broken, str(broken_target), scaling="none")
    _assert_nothing_at(tmp_path / "broken")
    with pytest.raises(Exception, match="broken on purpose"):
        export.saved_model(broken, str(tmp_path / "broken_serving"), scaling="none")
    _assert_nothing_at(tmp_path / "broken_serving")


def test_cli_export_and_predict_every_format(trained, tmp_path, capsys):
    images = []
    for i in range(2):
        image_path = str(tmp_path / f"image{i}.png")
        with open(image_path, "wb") as f:
            f.write(_png(trained["x"][i]))
        images.append(image_path)
    serving, tflite_path = str(tmp_path / "serving"), str(tmp_path / "model.tflite")
    assert cli.main(["export", trained["path"], "--saved-model", serving, "--tflite", tflite_path]) == 0
    out = capsys.readouterr().out
    assert "serve_bytes" in out and "GELU x2" in out and "XLA" not in out
    assert cli.main(["export", trained["path"], "--saved-model", serving, "--jit-compile"]) == 0
    assert "serve_bytes, XLA" in capsys.readouterr().out
    from tensorflow.core.protobuf import saved_model_pb2

    stored = saved_model_pb2.SavedModel()
    with open(os.path.join(serving, "2", "saved_model.pb"), "rb") as f:
        stored.ParseFromString(f.read())
    assert any(function.attr["_XlaMustCompile"].b for function in stored.meta_graphs[0].graph_def.library.function)
    expected = [fashion_mnist.CLASS_NAMES[i] for i in trained["probabilities"][:2].argmax(-1)]
    for model_path in (trained["path"], serving, tflite_path):
        assert cli.main(["predict", model_path, *images, "--top-k", "2"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0] == images[0] and lines[3] == images[1]
        top1 = [lines[1].split(None, 2)[2], lines[4].split(None, 2)[2]]
        assert top1 == expected, model_path

    # User mistakes: one line on stderr, exit code 2, nothing written.
    assert cli.main(["export", trained["path"], "--saved-model", serving, "--version", "1"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert cli.main(["export", str(tmp_path / "nope.keras"), "--tflite", str(tmp_path / "x.tflite")]) == 2
    assert "nope.keras" in capsys.readouterr().err
    assert cli.main(["export", trained["path"], "--tflite", str(tmp_path / "q.tflite"), "--quantization", "int3"]) == 2
    assert "int3" in capsys.readouterr().err
    _assert_nothing_at(tmp_path / "q.tflite")
    assert cli.main(["predict", str(tmp_path / "nope.tflite"), images[0]]) == 2


# The export and predict commands' refusals (issue s44): one line, exit 2, named by the flag, nothing written.


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny 16x16 classifier of 3 classes saved as .keras, its .tflite export, a good and a corrupt image."""
    folder = tmp_path_factory.mktemp("tiny")
    path = str(folder / "m.keras")
    keras_vit.ViT("tiny", num_classes=3, input_shape=(16, 16, 3), patch_size=8, preprocessing="unit").save(path)
    tflite_path = str(folder / "m.tflite")
    export.tflite(keras.saving.load_model(path), tflite_path)
    good = folder / "good.png"
    good.write_bytes(tf.io.encode_png(tf.zeros((16, 16, 3), tf.uint8)).numpy())
    corrupt = folder / "corrupt.jpg"
    corrupt.write_bytes(tf.io.encode_jpeg(tf.zeros((16, 16, 3), tf.uint8)).numpy()[:100])
    return {"path": path, "tflite": tflite_path, "good": str(good), "corrupt": str(corrupt)}


def _one_line(capsys):
    err = capsys.readouterr().err.strip()
    # libjpeg's own stderr line may precede ours; it is not a Python traceback.
    lines = [line for line in err.splitlines() if "JPEG library" not in line and not line.startswith(("W0000", "I0000"))]
    assert len(lines) == 1, err
    return lines[0]


def test_cli_export_checks_every_output_folder_before_writing(tiny, tmp_path, capsys):
    afile = tmp_path / "dog.jpg"
    afile.write_bytes(b"not a folder")
    assert cli.main(["export", tiny["path"], "--saved-model", str(afile / "sm")]) == 2
    assert "Invalid --saved-model=" in _one_line(capsys)
    for flag, name in (("--onnx", "x.onnx"), ("--tflite", "x.tflite")):
        outputs = ["--saved-model", str(tmp_path / "sm"), flag, str(afile / name)]
        if flag == "--onnx":
            outputs += ["--tflite", str(tmp_path / "t.tflite")]
        assert cli.main(["export", tiny["path"], *outputs]) == 2
        line = _one_line(capsys)
        assert f"Invalid {flag} {afile / name} (its folder)" in line and "is a file" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dog.jpg"], "a refused export wrote something"


def test_cli_export_names_a_folder_given_as_the_file_first(tiny, tmp_path, capsys):
    (tmp_path / "adir").mkdir()
    for extra in ([], ["--overwrite"]):
        assert cli.main(["export", tiny["path"], "--tflite", str(tmp_path / "adir"), *extra]) == 2
        assert "it is a folder. Expected a file name ending in '.tflite'" in _one_line(capsys)


def test_cli_export_keeps_a_labels_file_it_was_not_asked_to_replace(tiny, tmp_path, capsys):
    labels = tmp_path / "names.txt"
    labels.write_text("a\nb\nc\n")
    mine = tmp_path / "b.labels.txt"
    mine.write_text("mine1\nmine2\n")
    target = str(tmp_path / "b.tflite")
    assert cli.main(["export", tiny["path"], "--tflite", target, "--labels", str(labels)]) == 2
    line = _one_line(capsys)
    assert "b.labels.txt'" in line and "already exists holding other names" in line, line
    assert mine.read_text() == "mine1\nmine2\n" and not os.path.exists(target)
    with pytest.raises(FileExistsError, match="b.labels.txt"):
        export.tflite(keras.saving.load_model(tiny["path"]), target, class_names=["a", "b", "c"])
    # The same names are no replacement: the export goes ahead.
    mine.write_text("a\nb\nc\n")
    assert cli.main(["export", tiny["path"], "--tflite", target, "--labels", str(labels)]) == 0
    assert mine.read_text() == "a\nb\nc\n" and os.path.isfile(target)


@pytest.mark.parametrize("extra, text", [
    (["--tflite", "x.tflite", "--int8-full"], "--int8-full applies to int8 quantization"),
    (["--tflite", "x.tflite", "--version", "2"], "--version applies to the SavedModel"),
    (["--tflite", "x.tflite", "--jit-compile"], "--jit-compile applies to the SavedModel"),
    (["--onnx", "x.onnx", "--top-k", "3"], "--top-k applies to the SavedModel"),
    (["--saved-model", "sm", "--approximate-gelu"], "--approximate-gelu applies to the TFLite file"),
    (["--tflite", "x.tflite", "--quantization", "dynamic", "--representative-data", "d.npy"],
     "--representative-data applies to int8 quantization"),
    (["--tflite", "x.tflite", "--calibration-samples", "10"], "--calibration-samples applies to int8 quantization"),
])
def test_cli_export_refuses_flags_no_output_uses(extra, text, tiny, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["export", tiny["path"], *extra]) == 2
    assert text in _one_line(capsys)
    assert list(tmp_path.iterdir()) == []


def test_cli_export_and_predict_name_a_model_that_is_no_model_file(tiny, tmp_path, capsys):
    (tmp_path / "notimage.txt").write_text("text")
    assert cli.main(["export", str(tmp_path / "notimage.txt"), "--tflite", str(tmp_path / "x.tflite")]) == 2
    assert "Expected a .keras model file" in _one_line(capsys)
    (tmp_path / "sm" / "1").mkdir(parents=True)
    (tmp_path / "sm" / "1" / "saved_model.pb").write_text("junk")
    with open(tiny["path"], "rb") as f:
        (tmp_path / "cut.keras").write_bytes(f.read()[:1000])
    for name, kind in (("junk.onnx", "ONNX"), ("junk.tflite", "TFLite"), ("junk.keras", ".keras"),
                       ("cut.keras", ".keras"), ("sm", "SavedModel")):
        if not (tmp_path / name).exists():
            (tmp_path / name).write_text("junk")
        model = str(tmp_path / name)
        assert cli.main(["predict", model, tiny["good"]]) == 2
        assert f"Invalid MODEL={model!r}: not a readable {kind} file (" in _one_line(capsys), name
    assert cli.main(["export", str(tmp_path / "cut.keras"), "--tflite", str(tmp_path / "x.tflite")]) == 2
    assert "not a readable .keras file" in _one_line(capsys)
    assert not os.path.exists(tmp_path / "x.tflite")


def test_cli_export_and_predict_name_an_existing_folder_as_a_folder(tiny, tmp_path, capsys):
    (tmp_path / "adir").mkdir()
    assert cli.main(["predict", tiny["tflite"], str(tmp_path / "adir")]) == 2
    assert "it is a folder. Expected image files" in _one_line(capsys)
    assert cli.main(["export", str(tmp_path / "adir"), "--tflite", str(tmp_path / "x.tflite")]) == 2
    assert "it is a folder (a SavedModel?). Expected a .keras model file" in _one_line(capsys)


def test_cli_predict_names_its_flags(tiny, tmp_path, capsys):
    assert cli.main(["predict", tiny["tflite"], tiny["good"], "--scaling", "bogus"]) == 2
    assert "Invalid --scaling='bogus'" in _one_line(capsys)
    assert cli.main(["predict", tiny["tflite"], tiny["good"], "--precision", "bfloat16"]) == 2
    line = _one_line(capsys)
    assert "Invalid --precision='bfloat16'" in line and "Pass --precision auto" in line
    labels = tmp_path / "l2.txt"
    labels.write_text("a\nb\n")
    assert cli.main(["predict", tiny["tflite"], tiny["good"], "--labels", str(labels)]) == 2
    assert f"Invalid --labels={str(labels)!r}: got 2 names but the model has 3 classes" in _one_line(capsys)


def test_cli_predict_names_only_the_corrupt_images(tiny, capsys):
    for model in (tiny["tflite"], tiny["path"]):
        assert cli.main(["predict", model, tiny["good"], tiny["corrupt"]]) == 2
        line = _one_line(capsys)
        assert f"Invalid image file {tiny['corrupt']!r}: not a readable image file (Invalid JPEG data" in line, line
        assert tiny["good"] not in line
    assert cli.main(["predict", tiny["tflite"], tiny["good"]]) == 0


def test_cli_help_names_every_export_format():
    help_text = " ".join(cli.build_parser().format_help().split())
    assert "a TF Serving SavedModel, a TFLite file and/or an ONNX file" in help_text
