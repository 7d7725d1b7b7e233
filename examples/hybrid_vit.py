"""Hybrid ViTs: a ResNet feature map, not raw pixels, as the transformer's input (paper section 3.1).

What it shows:
1. The paper's R50+ViT-B/16 (`keras_vit.R50_ViT_B16`): a BiT ResNet-50 stem (weight-standardised
   convolutions, GroupNorm) of three stages, stride 16, whose 14x14x1024 map at 224 px is cut
   into 1x1 "patches" and projected to 768 wide tokens: the same 196 tokens as ViT-B/16, each
   seen through a CNN. The script builds it and prints its parameter count and token grid.
2. Any keras.applications model as the stem, through `backbone=`: ResNet50V2 (stride 32, 7x7
   tokens of 2048 channels at 224 px). Its input scaling is [-1, 1], which the model applies
   itself with `preprocessing="symmetric"`, so it takes [0, 255] pixels.
3. Both kinds train with `model.fit` and save/reload as one `.keras` file: a small hybrid
   (the "R_tiny" row: one 32-wide ResNet stage, stride 4) and a small keras.applications
   backbone (MobileNetV2, width 0.35) are trained on the shipped Fashion-MNIST sample.

Command:
    python examples/hybrid_vit.py            # builds R50+ViT-B/16 and ResNet50V2+ViT-B/16, trains the small ones
    python examples/hybrid_vit.py --smoke    # tiny hybrids, a few steps, offline

Expected runtime: about 4 minutes on a quiet 2-core CPU (measured 214 s in a fresh venv,
2026-11-21; about 6 minutes shared with other jobs at load 4): building the two
100M-parameter models, 2 epochs of the tiny BiT hybrid on the 8,000-image sample, 1 epoch of
the MobileNetV2 hybrid on 2,000 images; smoke: about 30 s.
It prints e.g. `R50+ViT-B/16: 97,897,802 parameters (10 classes; 98,659,112 with 1000), 14x14 tokens of 1024 channels -> 768`,
`ResNet50V2+ViT-B/16: ... parameters, 7x7 tokens of 2048 channels -> 768`, then per small
model `<name>: test accuracy 0.xx, reloaded: same predictions` (measured: r_tiny_hybrid 0.65
and 0.64 after 2 epochs; the MobileNetV2 stem from scratch is still at chance, 0.10, after its one short
epoch: it is there to show the mechanics).
"""

from __future__ import annotations

import argparse
import os
import tempfile

import keras
import numpy as np
import tensorflow as tf

import keras_vit
from keras_vit.data import fashion_mnist


def describe(name, model):
    """Prints the parameter count and the token grid the stem hands to the encoder."""
    # The embedding layer's input is the stem's feature map (batch, rows, cols, channels).
    feature_map = model.get_layer("embedding").input.shape
    width = model.get_layer("embedding").hidden_size
    print(f"{name}: {model.count_params():,} parameters, {feature_map[1]}x{feature_map[2]} tokens "
          f"of {feature_map[3]} channels -> {width}", flush=True)


def load_data(image_size, channels, train_limit, test_limit):
    """The Fashion-MNIST sample as float32 [0, 255] images resized to `image_size`."""
    (x_train, y_train), (x_test, y_test) = fashion_mnist.load_sample()

    def prepare(images):
        images = tf.convert_to_tensor(images[..., None], tf.float32)
        if images.shape[1] != image_size:
            images = tf.image.resize(images, (image_size, image_size))
        if channels == 3:
            images = tf.image.grayscale_to_rgb(images)
        return images.numpy()

    return (prepare(x_train[:train_limit]), y_train[:train_limit]), (prepare(x_test[:test_limit]), y_test[:test_limit])


def train_and_reload(name, model, data, args, out, jit_compile=True):
    """Trains `model` with AdamW + warm-up/cosine, evaluates, saves and reloads it."""
    (x_train, y_train), (x_test, y_test) = data
    steps = args.epochs * (len(x_train) // args.batch_size)
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0, decay_steps=max(steps - steps // 10, 1), warmup_target=1e-3, warmup_steps=steps // 10
    )
    model.compile(
        optimizer=keras.optimizers.AdamW(schedule, weight_decay=0.05, global_clipnorm=1.0),
        loss="sparse_categorical_crossentropy",  # the head returns probabilities (softmax)
        metrics=["accuracy"],
        jit_compile=jit_compile and not args.smoke,
        # Tracing the training graph of a CNN stem costs 10 s or more on a CPU; for the few
        # steps of a smoke run, eager execution is faster.
        run_eagerly=args.smoke,
    )
    model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs, verbose=2)
    _, accuracy = model.evaluate(x_test, y_test, batch_size=256, verbose=0)
    # The stem (a nested BiTResNet or keras.applications model) is saved inside the .keras file.
    path = os.path.join(out, f"{name}.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    same = np.allclose(model.predict(x_test[:8], verbose=0), reloaded.predict(x_test[:8], verbose=0), atol=1e-4)
    print(f"{name}: test accuracy {accuracy:.4f}, reloaded: {'same' if same else 'DIFFERENT'} predictions", flush=True)
    if not same:
        raise SystemExit(1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny hybrids, a few steps, offline")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--out", default=None, help="folder for the .keras files (default: a temporary folder)")
    args = parser.parse_args(argv)
    train_limit, test_limit = None, None
    if args.smoke:
        args.epochs, args.batch_size, train_limit, test_limit = 1, 16, 32, 16
    out = args.out or tempfile.mkdtemp(prefix="hybrid_")
    os.makedirs(out, exist_ok=True)

    if not args.smoke:
        # 1. The paper's hybrid. 98,659,112 parameters with the 1000-class head (timm counts
        # the same); 10 classes here.
        describe("R50+ViT-B/16", keras_vit.R50_ViT_B16(num_classes=10))
        # 2. A keras.applications stem. include_top=False: the backbone must end in a feature
        # map, not pooled features. patch_size defaults to 1 (one token per feature-map cell).
        backbone = keras.applications.ResNet50V2(include_top=False, weights=None, input_shape=(224, 224, 3))
        describe(
            "ResNet50V2+ViT-B/16",
            keras_vit.ViT("B16", backbone=backbone, image_size=224, num_classes=10, preprocessing="symmetric"),
        )
        keras.utils.clear_session()

    # 3a. The tiny BiT hybrid row trained on 28 px grey images: stride 4 gives 7x7 tokens.
    # input_shape=(28, 28, 1): the stem's root convolution takes any number of channels.
    tiny = keras_vit.ViT("R_tiny", input_shape=(28, 28, 1), num_classes=10, preprocessing="unit")
    describe("R_tiny hybrid", tiny)
    train_and_reload("r_tiny_hybrid", tiny, load_data(28, 1, train_limit, test_limit), args, out)

    # 3b. A small keras.applications stem: MobileNetV2 at width 0.35 has stride 32, so 64 px
    # images give 2x2 tokens. It expects [-1, 1] inputs like the ViT checkpoints. A CNN stem
    # costs far more than the tiny encoder on a CPU (about 0.7 s per batch of 64 here), so the
    # full run trains it one epoch on 2,000 images, without XLA (its compilation of this CNN
    # had not finished the first epoch after 5 minutes on our 2-core CPU).
    size = 64
    if not args.smoke:
        train_limit, args.epochs = 2000, 1
    mobilenet = keras.applications.MobileNetV2(
        include_top=False, weights=None, input_shape=(size, size, 3), alpha=0.35
    )
    small = keras_vit.ViT(
        "tiny", backbone=mobilenet, image_size=size, num_classes=10, preprocessing="symmetric"
    )
    describe("MobileNetV2(0.35)+ViT-tiny", small)
    train_and_reload("mobilenetv2_hybrid", small, load_data(size, 3, train_limit, test_limit), args, out,
                     jit_compile=False)


if __name__ == "__main__":
    main()
