"""Convert a ViT to TFLite with each quantization and classify images with LiteRT.

What it shows: `keras_vit.export.tflite` writing one file per quantization ("none" float32,
"float16" weights, "dynamic" int8 weights, "int8" weights and activations calibrated on sample
images), then running each file with the LiteRT interpreter (`ai_edge_litert`, the maintained
TFLite runtime): once by hand through the interpreter's signature runner, the way an app would,
and on the whole test set through `keras_vit.export.load_predictor`. For each file it prints the
size, the top-1 agreement with the Keras model and the test accuracy, which is how to choose:
float16 halves the file at no cost, dynamic quarters it, int8 also runs the matrix products in
int8 (what integer accelerators need) at a small cost in agreement.

Command:
    python examples/tflite_inference.py                     # trains a small ViT briefly on the sample
    python examples/tflite_inference.py --model vit.keras --scaling unit
    python examples/tflite_inference.py --smoke             # tiny model, a few steps, offline

Expected runtime: about 2 minutes on a 2-core CPU (measured 112 s on a quiet machine in a fresh
venv, 124 s at load 3: one training epoch, four conversions, 2,000 test images through each
file); smoke: about 20 s ("none" and "int8" only).
It prints one line per file; measured after the one training epoch:
`none      0.61 MB  agreement with Keras 1.000  test accuracy 0.661`,
`float16   0.35 MB  ... 1.000 ...`, `dynamic   0.24 MB  ... 0.997 ...`,
`int8      0.26 MB  agreement with Keras 0.926  test accuracy 0.670` (a model trained this
briefly has many near-ties that int8 rounding flips; a longer-trained one agrees more, see
benchmarks/RESULTS.md), then the labels the int8 file gives a few test images. The fresh-venv
run of 2026-11-21 printed 0.60 / 0.33 / 0.23 / 0.25 MB, agreement 1.000 / 1.000 / 1.000 /
0.934 and test accuracy 0.693 / 0.693 / 0.693 / 0.673.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import keras
import numpy as np

import keras_vit
from keras_vit import export
from keras_vit.data import fashion_mnist


def train_small_model(x_train, y_train, smoke):
    # Smoke: the "tiny" row's width and depth; conversion time grows with the graph.
    width, depth = (32, 1) if smoke else (64, 4)
    model = keras_vit.ViT(
        patch_size=4, hidden_size=width, num_layers=depth, num_heads=4, mlp_dim=2 * width,
        input_shape=(28, 28, 1), num_classes=10,
        preprocessing="unit",  # the files then take [0, 255] pixels, like every keras_vit export
        name="fashion_vit",
    )
    model.compile(
        optimizer=keras.optimizers.AdamW(1e-3, weight_decay=0.05),
        loss="sparse_categorical_crossentropy",  # the head returns probabilities (softmax)
        metrics=["accuracy"],
        jit_compile=not smoke,
        run_eagerly=smoke,  # tracing the training graph costs more than two smoke steps
    )
    model.fit(x_train, y_train, batch_size=16 if smoke else 64, epochs=1, verbose=2)
    return model


def classify_with_interpreter(path, images, class_names):
    """Runs a .tflite file with the LiteRT Interpreter directly: what an app does on a device."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=path)
    # keras_vit files have one signature, serving_default, with input "images" (float32
    # [0, 255] pixels, batch 1 by default) and output "probabilities".
    runner = interpreter.get_signature_runner("serving_default")
    labels = []
    for image in images:
        probabilities = runner(images=image[None].astype("float32"))["probabilities"][0]
        labels.append(class_names[int(np.argmax(probabilities))])
    return labels


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny model, a few steps, offline")
    parser.add_argument("--model", help="a .keras classifier for 28x28x1 images (default: train one here)")
    parser.add_argument("--scaling", default=None, help="for a model without a preprocessing layer: unit, symmetric, ...")
    parser.add_argument("--calibration-samples", type=int, default=200)
    parser.add_argument("--out", default=None, help="folder for the .tflite files (default: a temporary folder)")
    args = parser.parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="tflite_")
    os.makedirs(out, exist_ok=True)

    (x_train, y_train), (x_test, y_test) = fashion_mnist.load_sample()
    x_train, x_test = x_train[..., None].astype("float32"), x_test[..., None].astype("float32")
    if args.smoke:
        x_train, y_train, x_test, y_test = x_train[:32], y_train[:32], x_test[:64], y_test[:64]
        args.calibration_samples = 16
    model = keras.saving.load_model(args.model) if args.model else train_small_model(x_train, y_train, args.smoke)
    names = list(fashion_mnist.CLASS_NAMES)

    # The Keras model's own answers are the reference each file is compared with.
    # (A model without a preprocessing layer gets the scaling the files will apply in-graph.)
    inputs = x_test
    if args.scaling not in (None, "none"):
        mean, std = keras_vit.configs.SCALINGS[args.scaling]
        inputs = (x_test - np.array(mean, "float32")) / np.array(std, "float32")
    reference = model.predict(inputs, batch_size=256, verbose=0).argmax(-1)
    print(f"keras    {'':8s}  test accuracy {np.mean(reference == y_test):.3f}")

    # Smoke runs convert through the two code paths only: Keras' LiteRT export ("none"; "float16"
    # and "dynamic" are options of the same call) and the calibrated int8 converter.
    quantizations = ("none", "int8") if args.smoke else export.QUANTIZATIONS
    for quantization in quantizations:
        path = os.path.join(out, f"fashion_{quantization}.tflite")
        result = export.tflite(
            model, path, quantization=quantization,
            # int8 needs the range of every activation: calibrate on real training images
            # (in [0, 255], as the file's input), never on test images or noise.
            representative_data=x_train[:args.calibration_samples] if quantization == "int8" else None,
            scaling=args.scaling, class_names=names, overwrite=True,
        )
        predictor = export.load_predictor(path)
        predicted = predictor.predict(x_test).argmax(-1)
        print(f"{quantization:8s} {result.size_bytes / 1e6:5.2f} MB  agreement with Keras "
              f"{np.mean(predicted == reference):.3f}  test accuracy {np.mean(predicted == y_test):.3f}", flush=True)

    labels = classify_with_interpreter(path, x_test[:4], names)
    for label, truth in zip(labels, y_test[:4]):
        print(f"  int8 interpreter: {label:12s} (true: {names[truth]})")


if __name__ == "__main__":
    main()
