"""The SavedModel export run the way TF Serving runs it: TF1 loader, SignatureDef tensor names.

TF Serving loads `base_dir/<version>` with the `serve` tag into a session and feeds the tensors
named by each SignatureDef; these tests do the same (plus one `saved_model_cli run`), with real
encoded photos of every format, size and colour kind.
"""

from __future__ import annotations

import functools
import io
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import keras_vit
from keras_vit import _atomic, cli, export
from keras_vit.export import _common
from keras_vit.export.saved_model import MAX_PIXELS, decode_images

SIZE = 32
NAMES = ("ant", "bee", "cat", "dog", "eel")
FORMATS = ("JPEG", "PNG", "GIF", "BMP", "WEBP")
# (height, width, PIL mode): a large landscape photo, a small greyscale one, a portrait with
# alpha (JPEG and GIF have none: saved as RGB / palette), and one already at the model's size.
KINDS = ((512, 600, "RGB"), (40, 50, "L"), (70, 45, "RGBA"), (SIZE, SIZE, "RGB"))
# Largest mean / max |difference| in pixel levels between serve_bytes' decoding and PIL's
# (keras.utils.load_img): lossless formats differ by PIL's rounding to integers only; JPEG
# decoders also differ in chroma upsampling.
TOLERANCE = {"JPEG": (2.0, 12.0), "lossless": (0.5, 1.5)}


def _photo(height, width, mode):
    """A smooth synthetic photo with noise, in the PIL mode asked for."""
    y, x = np.mgrid[0:height, 0:width] / max(height, width)
    rng = np.random.default_rng(height * width)
    planes = [128 + 100 * np.sin(6 * x + c) * np.cos(4 * y - c) for c in range(4)]
    pixels = np.clip(np.stack(planes, -1) + rng.normal(0, 8, (height, width, 4)), 0, 255).astype("uint8")
    return Image.fromarray(pixels, "RGBA").convert(mode)


def _encode(image, fmt):
    if fmt == "JPEG" and image.mode == "RGBA":
        image = image.convert("RGB")
    buffer = io.BytesIO()
    image.save(buffer, fmt, **({"quality": 95} if fmt in ("JPEG", "WEBP") else {}))
    return buffer.getvalue()


def _model(channels, classifier_activation=None, hidden_size=32):
    keras.utils.set_random_seed(channels)
    model = keras_vit.ViT("tiny", num_classes=len(NAMES), input_shape=(SIZE, SIZE, channels), hidden_size=hidden_size,
                          preprocessing="unit", classifier_activation=classifier_activation)
    rng = np.random.default_rng(channels)
    for weight in model.weights:  # large random weights: outputs move with every pixel
        weight.assign(rng.normal(0, 0.3, weight.shape).astype("float32"))
    return model


class Served:
    """A SavedModel version loaded like TF Serving does: TF1 loader, `serve` tag, SignatureDefs."""

    def __init__(self, path):
        self.graph = tf.Graph()
        self.session = tf.compat.v1.Session(graph=self.graph)
        self.meta = tf.compat.v1.saved_model.loader.load(self.session, ["serve"], path)
        self._callables = {}

    def run(self, signature, value, output="probabilities"):
        """Feeds `value` to the signature's only input as the C++ server does (no Python shape checks)."""
        from tensorflow.core.protobuf import config_pb2

        if (signature, output) not in self._callables:
            definition = self.meta.signature_def[signature]
            (feed,) = [tensor.name for tensor in definition.inputs.values()]
            options = config_pb2.CallableOptions(feed=[feed], fetch=[definition.outputs[output].name])
            self._callables[signature, output] = self.session._make_callable_from_options(options)
        return self._callables[signature, output](value)[0]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """exported(channels): a random-weight model saved as .keras and exported with class names, made once."""
    cache = {}

    def get(channels):
        if channels not in cache:
            model = _model(channels)
            folder = tmp_path_factory.mktemp(f"served{channels}")
            keras_path = str(folder / "model.keras")
            model.save(keras_path)
            path = export.saved_model(model, str(folder / "serving"), class_names=NAMES)
            cache[channels] = {"channels": channels, "model": model, "keras": keras_path, "path": path,
                               "server": Served(path), "folder": folder}
        return cache[channels]

    return get


@pytest.fixture(params=[1, 3], ids=["grey_model", "rgb_model"])
def served(request, exported):
    return exported(request.param)


@functools.cache
def _files():
    """{name: encoded file} of every format and kind, made once for the module."""
    return {f"{fmt}-{h}x{w}-{mode}": _encode(_photo(h, w, mode), fmt) for fmt in FORMATS for h, w, mode in KINDS}


def _pil_pixels(data, channels):
    """What the .keras path with PIL (keras.utils.load_img) makes of the same file."""
    image = Image.open(io.BytesIO(data))
    image.seek(0)
    image = image.convert("L" if channels == 1 else "RGB").resize((SIZE, SIZE), Image.BILINEAR)
    return np.asarray(image, "float32").reshape(SIZE, SIZE, channels)


def test_serve_bytes_takes_every_format_size_and_colour_kind(served):
    channels, server = served["channels"], served["server"]
    files = _files()
    names, data = list(files), list(files.values())
    # One request holding every file, as a client batching mixed photos would send it.
    from_bytes = server.run("serve_bytes", np.array(data, dtype=object))
    assert from_bytes.shape == (len(data), len(NAMES))
    pixels = decode_images(tf.constant(data), SIZE, SIZE, channels).numpy()
    # The graph the server runs decodes exactly as decode_images does eagerly...
    np.testing.assert_allclose(from_bytes, server.run("serving_default", pixels), atol=1e-5)
    # ...which matches PIL's decoding and resizing within the stated tolerance.
    for name, file, image in zip(names, data, pixels):
        mean, most = TOLERANCE["JPEG" if name.startswith("JPEG") else "lossless"]
        difference = np.abs(image - _pil_pixels(file, channels))
        assert difference.mean() <= mean and difference.max() <= most, (name, difference.mean(), difference.max())
    # The .keras predictor decodes the same way.
    folder = served["folder"]
    paths = []
    for name, file in zip(names, data):
        paths.append(str(folder / f"{name}.{name.split('-')[0].lower()}"))
        with open(paths[-1], "wb") as f:
            f.write(file)
    keras_predictor = export.load_predictor(served["keras"], class_names=NAMES)
    np.testing.assert_allclose(keras_predictor.predict_files(paths), from_bytes, atol=1e-5)
    labels = server.run("serve_bytes", np.array(data[:2], dtype=object), output="top_k_labels")
    assert set(labels.ravel().astype(str)) <= set(NAMES)


def _patched(data, offset, fmt, *values):
    """`data` with integers written from `offset` (struct format `fmt`): a header lying about size."""
    import struct

    packed = struct.pack(fmt, *values)
    return data[:offset] + packed + data[offset + len(packed) :]


def _bombs():
    """Small files whose headers declare 60000 x 60000 pixels (16000 x 16000 for WebP): decompression bombs."""
    small = {fmt: _encode(_photo(20, 30, "RGB"), fmt) for fmt in FORMATS}
    jpeg = small["JPEG"]
    sof = jpeg.index(b"\xff\xc0")  # baseline frame header: length, precision, height, width
    buffer = io.BytesIO()
    _photo(20, 30, "RGB").save(buffer, "WEBP", lossless=True)
    lossless = buffer.getvalue()
    bits = (16000 - 1) | ((16000 - 1) << 14)  # 14-bit sizes
    return {
        "JPEG": _patched(jpeg, sof + 5, ">HH", 60000, 60000),
        "PNG": _patched(small["PNG"], 16, ">II", 60000, 60000),
        "GIF": _patched(small["GIF"], 6, "<HH", 60000, 60000),
        "BMP": _patched(small["BMP"], 18, "<ii", 60000, -60000),
        "WEBP-VP8L": _patched(lossless, 21, "<I", bits),
    }


def test_bad_requests_fail_with_a_clear_invalid_argument_and_the_server_keeps_working(served):
    server, channels = served["server"], served["channels"]
    good = _encode(_photo(40, 50, "RGB"), "PNG")
    expected = server.run("serve_bytes", np.array([good], dtype=object))

    def refused(signature, value, *words):
        with pytest.raises(tf.errors.InvalidArgumentError) as error:
            server.run(signature, value)
        for word in words:
            assert word in error.value.message, (word, error.value.message)
        # The same session answers the next good request.
        np.testing.assert_allclose(server.run("serve_bytes", np.array([good], dtype=object)), expected, atol=1e-6)

    refused("serve_bytes", np.array([], dtype=object), "empty batch")
    refused("serve_bytes", np.array([good, b""], dtype=object), "image_bytes[1]", "empty string")
    refused("serve_bytes", np.array([b"hello, not an image"], dtype=object), "image_bytes[0]", "not a JPEG, PNG, GIF")
    refused("serve_bytes", np.array([good[:60]], dtype=object), "PNG")  # truncated: the decoder's own message
    for fmt, bomb in _bombs().items():
        assert len(bomb) < 10_000, fmt
        side = "16000" if fmt.startswith("WEBP") else "60000"
        refused("serve_bytes", np.array([good, bomb], dtype=object), "image_bytes[1]", side, str(MAX_PIXELS))
    palette = io.BytesIO()
    _photo(20, 30, "RGB").convert("P").save(palette, "BMP")
    refused("serve_bytes", np.array([palette.getvalue()], dtype=object), "image_bytes[0]", "colour palette")

    pixels = np.zeros((1, SIZE, SIZE, channels), "float32")
    assert server.run("serving_default", pixels).shape == (1, len(NAMES))
    refused("serving_default", np.zeros((0, SIZE, SIZE, channels), "float32"), "batch >= 1", "[0 32 32")
    refused("serving_default", np.zeros((1, 28, 28, channels), "float32"), f"(batch, 32, 32, {channels})", "[1 28 28")
    refused("serving_default", np.zeros((SIZE, SIZE, channels), "float32"), "got shape")
    refused("serving_default", pixels.astype("float64"), "double", "float")
    # The rest of the signature's table: channels, rank, other dtypes, non-finite pixels.
    other = 3 if channels == 1 else 1
    refused("serving_default", np.zeros((2, SIZE, SIZE, other), "float32"), f"(batch, 32, 32, {channels})", f"[2 32 32 {other}]")
    refused("serving_default", np.zeros((1, 1, SIZE, SIZE, channels), "float32"), "got shape", "[1 1 32 32")
    refused("serving_default", np.zeros((1, 1, 1, 1), "float32"), "got shape [1 1 1 1]")
    refused("serving_default", np.zeros((1, SIZE, SIZE, channels), "int32"), "int32", "float")
    refused("serving_default", np.array([b"photo"], dtype=object), "string", "float")
    bad = np.zeros((2, SIZE, SIZE, channels), "float32")
    bad[1, 0, 0, 0] = np.inf
    refused("serving_default", bad, "images[1] holds NaN or infinite pixels")
    refused("serve_bytes", np.zeros((1,), "float32"), "float", "string")


def test_saved_model_cli_runs_serve_bytes(exported, tmp_path):
    served = exported(3)
    files = [_encode(_photo(512, 600, "RGB"), "JPEG"), _encode(_photo(40, 50, "L"), "GIF")]
    np.save(tmp_path / "image_bytes.npy", np.array(files, dtype=bytes))  # no trailing NULs in these files
    command = [sys.executable, "-m", "tensorflow.python.tools.saved_model_cli", "run", "--dir", served["path"],
               "--tag_set", "serve", "--signature_def", "serve_bytes",
               "--inputs", f"image_bytes={tmp_path / 'image_bytes.npy'}", "--outdir", str(tmp_path / "out")]
    ran = subprocess.run(command, capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert ran.returncode == 0, ran.stderr[-2000:]
    expected = served["server"].run("serve_bytes", np.array(files, dtype=object))
    np.testing.assert_allclose(np.load(tmp_path / "out" / "probabilities.npy"), expected, atol=1e-6)


def test_cli_predict_gif_and_bmp_with_a_one_channel_model(exported, tmp_path, capsys):
    served = exported(1)
    keras_path, serving = served["keras"], os.path.dirname(served["path"])
    images = []
    for fmt, (h, w, mode) in (("GIF", (70, 45, "RGB")), ("BMP", (40, 50, "L")), ("JPEG", (512, 600, "RGB"))):
        images.append(str(tmp_path / f"photo.{fmt.lower()}"))
        with open(images[-1], "wb") as f:
            f.write(_encode(_photo(h, w, mode), fmt))
    printed = []
    for path in (keras_path, serving):
        # float32, as the SavedModel computes: `auto` runs the .keras model in bfloat16 on some CPUs.
        argv = ["predict", path, *images, "--top-k", "1", "--labels", _labels(tmp_path), "--precision", "float32"]
        assert cli.main(argv) == 0, capsys.readouterr().err
        printed.append(capsys.readouterr().out)
    assert printed[0] == printed[1]
    assert [line for line in printed[0].splitlines() if not line.startswith(" ")] == images


def _labels(folder):
    path = str(folder / "labels.txt")
    with open(path, "w") as f:
        f.write("\n".join(NAMES) + "\n")
    return path


def test_variables_are_stored_once(tmp_path):
    model = _model(3, hidden_size=128)
    weight_bytes = sum(int(np.prod(weight.shape)) * 4 for weight in model.weights)
    path = export.saved_model(model, str(tmp_path / "serving"))
    stored = _common.file_size(os.path.join(path, "variables"))
    assert stored <= 1.05 * weight_bytes, f"variables/ holds {stored} bytes for {weight_bytes} bytes of float32 weights"


@pytest.mark.parametrize("activation", [None, "softmax"])
def test_every_export_returns_probabilities(exported, tmp_path, activation):
    """A logits head gets softmax in the graph (the shared export's model has one), a softmax head not again."""
    if activation is None:
        served = exported(3)
        model, server = served["model"], served["server"]
    else:
        model = _model(3, classifier_activation=activation)
        server = Served(export.saved_model(model, str(tmp_path / "serving")))
    x = np.random.default_rng(0).uniform(0, 255, (4, SIZE, SIZE, 3)).astype("float32")
    outputs = np.asarray(model(x))
    expected = outputs if activation == "softmax" else np.asarray(tf.nn.softmax(outputs))
    probabilities = server.run("serving_default", x)
    np.testing.assert_allclose(probabilities, expected, atol=1e-5)
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-5)


def test_other_output_activations_are_refused(tmp_path):
    # Sigmoid heads (SigLIP's zero-shot classifiers) export: tests/test_zeroshot.py.
    with pytest.raises(ValueError, match="activation 'tanh'"):
        export.saved_model(_model(3, classifier_activation="tanh"), str(tmp_path / "serving"))
    assert not os.path.exists(tmp_path / "serving")


def test_xla_compiled_export_loads_with_the_tf1_loader(tmp_path):
    model = _model(3)
    x = np.random.default_rng(0).uniform(0, 255, (2, SIZE, SIZE, 3)).astype("float32")
    path = export.saved_model(model, str(tmp_path / "serving"), jit_compile=True)
    from tensorflow.core.protobuf import saved_model_pb2

    stored = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        stored.ParseFromString(f.read())
    assert any(function.attr["_XlaMustCompile"].b for function in stored.meta_graphs[0].graph_def.library.function)
    np.testing.assert_allclose(Served(path).run("serving_default", x), tf.nn.softmax(model(x)).numpy(), atol=1e-5)


# Exports a small model to argv[1] (version argv[3]) and SIGKILLs itself inside the step named
# argv[2] of keras_vit's export code, as a killed job or a machine losing power would.
_KILLED_EXPORT = """
import os, signal, sys
import keras
from keras_vit import export
from keras_vit import _atomic
from keras_vit.export import _common
base, step, version = sys.argv[1], sys.argv[2], int(sys.argv[3])
setattr(_atomic if hasattr(_atomic, step) else _common, step, lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL))
inputs = keras.Input((8, 8, 3))
model = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.Flatten()(inputs)))
export.saved_model(model, base, version, class_names=["a", "b", "c"], scaling="none", overwrite=True)
"""


def test_a_killed_export_leaves_no_version_and_the_next_export_cleans_up(tmp_path):
    inputs = keras.Input((8, 8, 3))
    model = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.Flatten()(inputs)))
    base = str(tmp_path / "serving")
    first = export.saved_model(model, base, scaling="none")
    with open(os.path.join(first, "saved_model.pb"), "rb") as f:
        first_graph = f.read()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    # Killed after the SavedModel is written but before it is complete (labels) and renamed;
    # then killed while replacing version 1 (overwrite) just before the swap.
    for step, version in (("write_labels", 2), ("_move_into_place", 1)):
        killed = subprocess.run([sys.executable, "-c", _KILLED_EXPORT, base, step, str(version)],
                                capture_output=True, text=True, timeout=300, env=env)
        assert killed.returncode == -9, (step, killed.stderr[-2000:])
        assert [name for name in os.listdir(base) if not name.startswith(".")] == ["1"], step
        with open(os.path.join(first, "saved_model.pb"), "rb") as f:
            assert f.read() == first_graph, f"version 1 changed by the export killed in {step}"
        # Each export removes what the previous killed one left; only its own remains.
        leftovers = [name for name in os.listdir(base) if name.startswith(".")]
        assert len(leftovers) == 1 and leftovers[0].startswith(f".tmp-{version}-"), (step, leftovers)
    export.saved_model(model, base, scaling="none")
    assert sorted(os.listdir(base)) == ["1", "2"], "the killed exports' temporary folders are still there"


def test_cli_int8_export_checks_calibration_images_before_writing(exported, tmp_path, capsys):
    served = exported(3)
    folder = tmp_path / "calibration"
    folder.mkdir()
    for i in range(2):
        (folder / f"photo{i}.jpg").write_bytes(_encode(_photo(40 + i, 50, "RGB"), "JPEG"))
    (folder / "notes.txt").write_bytes(b"not an image")
    serving, lite = str(tmp_path / "serving"), str(tmp_path / "model.tflite")
    command = ["export", served["keras"], "--saved-model", serving, "--tflite", lite, "--quantization", "int8"]
    assert cli.main(command + ["--representative-data", str(folder)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "'notes.txt' is not a readable image" in err, err
    assert cli.main(command + ["--representative-data", str(tmp_path / "missing.npy")]) == 2
    assert "missing.npy" in capsys.readouterr().err
    np.save(tmp_path / "wrong.npy", np.zeros((4, 28, 28, 3), "float32"))
    assert cli.main(command + ["--representative-data", str(tmp_path / "wrong.npy")]) == 2
    assert "(4, 28, 28, 3)" in capsys.readouterr().err
    assert cli.main(command) == 2
    assert "needs --representative-data" in capsys.readouterr().err
    assert not os.path.exists(serving) and not os.path.exists(lite), "written before the checks failed"


def test_stale_temporaries_are_removed_and_an_old_version_put_back(tmp_path):
    dead, alive = 999_999_999, os.getpid()  # above any Linux pid_max: no such process
    (tmp_path / f".tmp-2-{dead}-abcd_123").mkdir()
    (tmp_path / f".old-1-{dead}-efgh_456" / "old").mkdir(parents=True)
    (tmp_path / f".old-1-{dead}-efgh_456" / "old" / "saved_model.pb").write_bytes(b"version 1")
    (tmp_path / f".tmp-3-{alive}-ijkl_789").mkdir()  # an export running now
    (tmp_path / ".tmp-notes").mkdir()  # not named like ours
    removed = _atomic.remove_stale_temporaries(str(tmp_path))
    assert removed == [f".old-1-{dead}-efgh_456", f".tmp-2-{dead}-abcd_123"]
    assert sorted(os.listdir(tmp_path)) == [f".tmp-3-{alive}-ijkl_789", ".tmp-notes", "1"]
    assert (tmp_path / "1" / "saved_model.pb").read_bytes() == b"version 1"
