"""Train a ViT from scratch on CIFAR-10 with `model.fit`, tensorflow-datasets and the DeiT recipe.

What it shows: the from-scratch set-up that makes a ViT learn on a small data set, where it has
none of a CNN's built-in locality and so needs strong regularisation (DeiT, Touvron et al. 2021):
- data: `keras_vit.data.from_tfds("cifar10")` and `make_pipeline` with the "strong" preset:
  random resized crop, flips, Keras RandAugment, MixUp / CutMix (one per batch, on one-hot
  labels) and random erasing;
- model: patch 4 on 32x32 images, so 8x8 = 64 patch tokens plus the class token, each
  `hidden_size` = 192 wide (the width every block keeps; `mlp_dim` = 384 is only the hidden
  width inside each block's MLP), 9 blocks of 3 heads, stochastic depth rising to 0.1;
- recipe `keras_vit.training.get_recipe("deit")`: AdamW at 5e-4 x batch/512, weight decay 0.05
  on kernels only (not on biases, norms, position embedding, class token), 5 warm-up epochs then
  cosine decay (the schedule object is the optimizer's learning rate, so it is used), label
  smoothing 0.1, gradient clipping at norm 1;
- precision and XLA picked for the hardware (`keras_vit.training.default_precision`: mixed
  bfloat16 or float16 on GPUs and TPUs, float32 + XLA on CPUs).
For contrast, the keras.io ViT example (no class token, constant learning rate) reaches about
55% on CIFAR-100 after 100 epochs.

Command:
    python examples/train_cifar10.py --download            # first run: tfds downloads CIFAR-10 (160 MB)
    python examples/train_cifar10.py --epochs 200 --data-dir ~/tensorflow_datasets
    python examples/train_cifar10.py --smoke               # tfds.testing.mock_data: nothing downloads

Expected runtime: the default 100 epochs of 50,000 images are a GPU job (on a 2-core CPU an
epoch takes tens of minutes; not measured here: this machine cannot download CIFAR-10); smoke:
about 20 s on a 2-core CPU.
It prints the model size, the recipe's learning rate and warm-up, one line per epoch, then
`test accuracy: ...` (smoke: random mock images, so about chance) and
`reloaded <path>: same predictions`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile

import keras
import numpy as np

import keras_vit
from keras_vit.data import from_tfds, make_pipeline
from keras_vit.training import default_jit_compile, default_precision, get_recipe, make_loss, make_optimizer, make_schedule


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="mock CIFAR-10 from tfds.testing, tiny model, offline")
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--data-dir", default=None, help="tensorflow-datasets data_dir")
    parser.add_argument("--download", action="store_true", help="let tfds download and prepare CIFAR-10")
    parser.add_argument("--out", default=None, help="folder for the .keras model (default: a temporary folder)")
    args = parser.parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="cifar10_")
    os.makedirs(out, exist_ok=True)
    keras.utils.set_random_seed(0)
    width, depth, heads, mlp = 192, 9, 3, 384

    mock = contextlib.nullcontext()
    if args.smoke:
        import tensorflow_datasets as tfds

        # tfds serves random images with CIFAR-10's features (32x32x3, 10 labels) instead of
        # reading files: the whole pipeline runs, nothing is downloaded.
        mock = tfds.testing.mock_data(num_examples=64)
        args.epochs, args.batch_size = 1, 32
        width, depth, heads, mlp = 32, 1, 2, 64

    with mock:
        train_source = from_tfds("cifar10", "train", data_dir=args.data_dir, download=args.download)
        test_source = from_tfds("cifar10", "test", data_dir=args.data_dir, download=args.download)
        num_train = train_source.num_examples or sum(1 for _ in train_source.dataset)
        recipe = get_recipe("deit")
        # scaling=None: the model scales pixels itself (preprocessing= below), so what is saved
        # or exported takes raw [0, 255] images.
        train_data = make_pipeline(train_source, image_size=32, channels=3, scaling=None, batch_size=args.batch_size,
                                   training=True, augment=recipe.augment, seed=0, cache=True)
        test_data = make_pipeline(test_source, image_size=32, channels=3, scaling=None, batch_size=512)
        steps_per_epoch = num_train // args.batch_size

        # Mixed precision on accelerators (the head still computes in float32); float32 on CPUs.
        precision = "float32" if args.smoke else default_precision()
        keras.config.set_dtype_policy(precision)
        model = keras_vit.ViT(
            patch_size=4, hidden_size=width, num_layers=depth, num_heads=heads, mlp_dim=mlp,
            image_size=32, num_classes=train_source.num_classes,
            preprocessing="unit", drop_path_rate=recipe.drop_path_rate, name="cifar10_vit",
        )
        schedule = make_schedule(recipe, args.batch_size, steps_per_epoch, args.epochs)
        print(f"{model.name}: {model.count_params():,} parameters, 64 patch tokens + class token of width {width}; "
              f"{precision}; peak learning rate {recipe.learning_rate_for(args.batch_size):.2e} after "
              f"{getattr(schedule, 'warmup_steps', 0)} warm-up steps of {steps_per_epoch * args.epochs}")
        optimizer = make_optimizer(recipe, model, schedule)
        if precision == "mixed_float16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)  # float16 gradients underflow
        model.compile(
            optimizer=optimizer,
            loss=make_loss(recipe, model),
            metrics=[keras.metrics.CategoricalAccuracy(name="accuracy")],
            jit_compile=False if args.smoke else default_jit_compile(precision=precision),
            run_eagerly=args.smoke,  # tracing costs more than the two smoke steps
        )
        model.fit(train_data, epochs=args.epochs, shuffle=False, verbose=2)  # the pipeline shuffles
        _, accuracy = model.evaluate(test_data, verbose=0)
        print(f"test accuracy: {accuracy:.4f}")
        images = next(iter(test_data))[0][:8]

    path = os.path.join(out, "cifar10_vit.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    same = np.allclose(model.predict(images, verbose=0), reloaded.predict(images, verbose=0), atol=1e-3)
    print(f"reloaded {path}: {'same' if same else 'DIFFERENT'} predictions")
    if not same:
        raise SystemExit(1)
    return accuracy


if __name__ == "__main__":
    main()
