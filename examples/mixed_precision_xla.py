"""Find the fastest training set-up (precision x XLA) for the hardware this runs on.

What it shows: the same small ViT trained with `model.fit` under float32 and mixed_bfloat16
(and mixed_float16 on a GPU), each with and without `jit_compile=True`; it times steady-state
training steps and prints images/s for each, then the fastest set-up. On this project's 2-core
AVX-512 CPU, TensorFlow's oneDNN bfloat16 matrix products run about 2x float32, but under XLA
bfloat16 ran slower than float32, so the answer depends on the machine: measure, don't guess.

Command:
    python examples/mixed_precision_xla.py            # ViT-S-like width, 64 px, batch 64
    python examples/mixed_precision_xla.py --smoke    # tiny model, a few steps, offline check

Expected runtime: about 3-5 minutes on a 2-core CPU (measured 247 s on a quiet machine in a fresh
venv, 2026-11-21); smoke, two set-ups: about 20 s.
It prints one line per set-up, e.g. `float32 xla=True  ...  123.4 img/s`, then
`fastest: <policy> xla=<bool>`. That run printed float32 22.4 (XLA) / 22.1 (no XLA) and
mixed_bfloat16 24.8 (XLA) / 24.0 (no XLA) img/s, "fastest: mixed_bfloat16 xla=True": at this
ViT-S width (D 384) the four set-ups are within 12% of each other, inside the +-20% that single
short runs vary by on this machine, whereas for the D-128 model of `keras-vit train`
float32 + XLA was clearly the fastest (README, "Mixed precision and XLA"). Run it with the
model you will train.
"""

from __future__ import annotations

import argparse
import itertools
import time

import keras
import numpy as np

import keras_vit


def images_per_second(policy, jit_compile, args):
    """Trains for `args.steps` timed steps after warm-up and returns images/s."""
    keras.config.set_dtype_policy(policy)
    keras.utils.clear_session()
    model = keras_vit.ViT(
        patch_size=args.patch_size,
        hidden_size=args.hidden_size,
        num_layers=args.num_layers,
        num_heads=args.num_heads,
        mlp_dim=4 * args.hidden_size,
        image_size=args.image_size,
        num_classes=10,
    )
    optimizer = keras.optimizers.AdamW(1e-3)
    if policy == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    model.compile(
        optimizer=optimizer,
        loss="sparse_categorical_crossentropy",  # the head returns probabilities (softmax)
        jit_compile=jit_compile,
    )
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.batch_size, args.image_size, args.image_size, 3)).astype("float32")
    y = rng.integers(0, 10, args.batch_size)
    model.train_on_batch(x, y)  # compile and warm up outside the timed loop
    model.train_on_batch(x, y)
    start = time.perf_counter()
    for _ in range(args.steps):
        model.train_on_batch(x, y)
    elapsed = time.perf_counter() - start
    keras.config.set_dtype_policy("float32")
    return args.steps * args.batch_size / elapsed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny model and few steps: a quick offline check")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--patch-size", type=int, default=8)
    parser.add_argument("--hidden-size", type=int, default=384)
    parser.add_argument("--num-layers", type=int, default=6)
    parser.add_argument("--num-heads", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args(argv)
    if args.smoke:
        args.image_size, args.patch_size, args.hidden_size = 16, 4, 32
        args.num_layers, args.num_heads, args.batch_size, args.steps = 1, 2, 8, 2

    import tensorflow as tf

    policies = ["float32", "mixed_bfloat16"]
    if tf.config.list_physical_devices("GPU"):
        policies.append("mixed_float16")
    setups = list(itertools.product(policies, (True, False)))
    if args.smoke:
        # Two set-ups still cover both precisions and both XLA settings; each costs a compile.
        setups = [("float32", True), ("mixed_bfloat16", False)]
    results = {}
    for policy, jit_compile in setups:
        results[(policy, jit_compile)] = images_per_second(policy, jit_compile, args)
        print(f"{policy:15s} xla={str(jit_compile):5s} {results[(policy, jit_compile)]:9.1f} img/s", flush=True)
    policy, jit_compile = max(results, key=results.get)
    print(f"fastest: {policy} xla={jit_compile}")
    return results


if __name__ == "__main__":
    main()
