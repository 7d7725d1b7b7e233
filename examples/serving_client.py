"""A TF Serving REST client for an exported ViT, in the Python standard library only.

What it shows: the request body TF Serving's REST API expects for the `serve_bytes` signature
written by `keras_vit.export.saved_model` (see examples/export_tf_serving.py): image files sent
as they are, base64-encoded inside `{"b64": ...}` objects (TF Serving decodes them into the
string tensor `image_bytes`; the model decodes and resizes the images in its graph), posted
with urllib to `http://HOST:8501/v1/models/NAME:predict`, and the answer read back: one
`predictions` entry per image with `top_k_labels`, `top_k_probabilities`, `top_k_indices`
and `probabilities`. The client needs no TensorFlow, NumPy or requests.

With `--smoke` no server is needed: the script exports a tiny model to a temporary folder (or
uses `--saved-model DIR`), writes a few Fashion-MNIST sample images as PNG files, builds the
exact same JSON body, and answers it locally the way the server would: the body is parsed, the
base64 strings decoded, and the SavedModel's `serve_bytes` signature (tf.saved_model.load)
called on them.

Command:
    python examples/serving_client.py --model-name fashion shoe.png bag.jpg    # server on localhost:8501
    python examples/serving_client.py --host 10.0.0.5 --port 8501 --model-name fashion --version 2 shoe.png
    python examples/serving_client.py --smoke                                   # offline, no server
    python examples/serving_client.py --smoke --saved-model saved_models/fashion

Expected runtime: under a second per request against a server; smoke: about 10 s on a 2-core
CPU (importing TensorFlow and exporting the tiny model).
It prints, per image, `<file>: <label> (<probability>), <label> (...), ...`, best first.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import struct
import sys
import tempfile
import urllib.error
import urllib.request
import zlib


def build_request(paths, signature_name="serve_bytes"):
    """The JSON body for TF Serving's predict API: one {"b64": ...} instance per image file.

    "instances" is the row format: a list with one entry per example. A JSON object with the
    single key "b64" is how REST carries binary strings; the server base64-decodes it.
    """
    instances = []
    for path in paths:
        with open(path, "rb") as f:
            instances.append({"b64": base64.b64encode(f.read()).decode("ascii")})
    return {"signature_name": signature_name, "instances": instances}


def post(url, body, timeout=30.0):
    """POSTs `body` as JSON and returns the decoded JSON answer; raises with the server's error text."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode("utf-8"), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as error:
        # TF Serving explains a bad request (e.g. a file that is not an image) in {"error": ...}.
        raise SystemExit(f"{url}: HTTP {error.code}: {error.read().decode('utf-8', 'replace')}") from None
    except urllib.error.URLError as error:
        raise SystemExit(f"{url}: cannot connect ({error.reason}); is TF Serving running?") from None


def predict_url(host, port, model_name, version=None):
    """The REST predict endpoint; without a version the server uses its latest one."""
    version_part = f"/versions/{version}" if version is not None else ""
    return f"http://{host}:{port}/v1/models/{model_name}{version_part}:predict"


def print_predictions(paths, response, k=3):
    for path, prediction in zip(paths, response["predictions"]):
        names = prediction.get("top_k_labels") or [str(i) for i in prediction["top_k_indices"]]
        best = ", ".join(f"{name} ({p:.3f})" for name, p in list(zip(names, prediction["top_k_probabilities"]))[:k])
        print(f"{os.path.basename(path)}: {best}")


# --- smoke mode: everything below stands in for the server, offline -----------------------


def write_png(path, pixels):
    """Writes a grey 8-bit image (a list of rows of ints 0..255) as a PNG, with zlib only."""

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    height, width = len(pixels), len(pixels[0])
    raw = b"".join(b"\x00" + bytes(row) for row in pixels)  # filter type 0 on every row
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(raw)))
        f.write(chunk(b"IEND", b""))


def answer_locally(saved_model_dir, body):
    """Answers a predict request body as TF Serving would, with the SavedModel loaded in-process."""
    import tensorflow as tf

    loaded = tf.saved_model.load(saved_model_dir)
    signature = loaded.signatures[body["signature_name"]]
    request = json.loads(json.dumps(body))  # exactly what went over the wire
    image_bytes = [base64.b64decode(instance["b64"]) for instance in request["instances"]]
    outputs = signature(image_bytes=tf.constant(image_bytes))
    # Row format answer: one dict of outputs per instance; strings come back as text.
    rows = []
    for i in range(len(image_bytes)):
        row = {}
        for name, tensor in outputs.items():
            value = tensor.numpy()[i]
            row[name] = [v.decode() for v in value] if value.dtype == object else value.tolist()
        rows.append(row)
    return {"predictions": rows}


def smoke_setup(folder, saved_model_dir):
    """Sample PNG files and, unless given, a tiny exported model (untrained: labels are arbitrary)."""
    import keras_vit
    from keras_vit import export
    from keras_vit.data import fashion_mnist

    _, (x_test, y_test) = fashion_mnist.load_sample()
    paths = []
    for i in range(3):
        path = os.path.join(folder, f"{fashion_mnist.CLASS_NAMES[y_test[i]].replace('/', '_')}_{i}.png")
        write_png(path, x_test[i].tolist())
        paths.append(path)
    if saved_model_dir is None:
        model = keras_vit.ViT("tiny", input_shape=(28, 28, 1), patch_size=4, num_classes=10, preprocessing="unit")
        saved_model_dir = export.saved_model(model, os.path.join(folder, "fashion"), class_names=fashion_mnist.CLASS_NAMES)
    elif not os.path.isfile(os.path.join(saved_model_dir, "saved_model.pb")):
        versions = [int(name) for name in os.listdir(saved_model_dir) if name.isdigit()]
        saved_model_dir = os.path.join(saved_model_dir, str(max(versions)))
    return paths, saved_model_dir


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("images", nargs="*", help="JPEG/PNG/BMP/GIF files")
    parser.add_argument("--host", default="localhost")
    parser.add_argument("--port", type=int, default=8501, help="TF Serving's REST port")
    parser.add_argument("--model-name", default="fashion")
    parser.add_argument("--version", type=int, default=None, help="default: the latest version the server has")
    parser.add_argument("--top", type=int, default=3, help="labels to print per image")
    parser.add_argument("--smoke", action="store_true", help="offline: answer the request with a local SavedModel")
    parser.add_argument("--saved-model", default=None, help="smoke mode: a SavedModel (or TF Serving base) folder")
    args = parser.parse_args(argv)

    if args.smoke:
        folder = tempfile.mkdtemp(prefix="serving_client_")
        paths, saved_model_dir = smoke_setup(folder, args.saved_model)
        paths = args.images or paths
    elif args.images:
        paths = args.images
    else:
        parser.error("give one or more image files (or --smoke)")

    body = build_request(paths)
    url = predict_url(args.host, args.port, args.model_name, args.version)
    print(f"POST {url}: {len(body['instances'])} images, {len(json.dumps(body))} bytes of JSON")
    if args.smoke:
        print(f"(smoke: answered locally by {saved_model_dir})")
        response = answer_locally(saved_model_dir, body)
    else:
        response = post(url, body)
    print_predictions(paths, response, args.top)
    return response


if __name__ == "__main__":
    sys.exit(0 if main() is not None else 1)
