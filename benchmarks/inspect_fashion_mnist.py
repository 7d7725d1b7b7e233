"""inspect: trains a small ViT on Fashion-MNIST, then measures what the ViT paper's Fig. 7 shows.

Reports (1) how much more similar each patch's position embedding is to its 4-neighbours' than
to patches at least half the grid away (cosine similarity, trained vs. at initialisation), and
(2) the mean attention distance of every head by depth, on test images. Writes the four
inspection figures and the trained model (vit_fashion_mnist.keras, for `keras-vit inspect`) to --out.

    python -m benchmarks inspect                 # shipped 8k sample
    python -m benchmarks inspect --data /work/shared/data/fashion-mnist
    python -m benchmarks inspect --epochs 1 --num-layers 1 --max-train-examples 256 --inspect-images 8 --out /tmp/inspect   # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import time

import keras
import numpy as np

import keras_vit
from benchmarks.machine import machine_record
from keras_vit import inspect as vit_inspect
from keras_vit.configs import CORE_FIELDS
from keras_vit.data import fashion_mnist
from keras_vit.inspect import plots


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks inspect", description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="folder of the full Fashion-MNIST IDX files (default: shipped sample)")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--patch-size", type=int, default=4)
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--num-layers", type=int, default=6)
    parser.add_argument("--num-heads", type=int, default=4)
    parser.add_argument("--mlp-dim", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--inspect-images", type=int, default=256, help="test images for attention distance")
    parser.add_argument("--max-train-examples", type=int, help="train on the first N images (smoke runs)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/inspect_out", help="folder for the figures and results.json")
    args = parser.parse_args(argv)

    keras.utils.set_random_seed(args.seed)
    if args.data:
        (x_train, y_train), (x_test, y_test) = fashion_mnist.read_idx_dataset(args.data)
    else:
        (x_train, y_train), (x_test, y_test) = fashion_mnist.load_sample()
    x_train, y_train = x_train[: args.max_train_examples], y_train[: args.max_train_examples]
    x_train, x_test = x_train[..., None].astype("float32"), x_test[..., None].astype("float32")

    model = keras_vit.ViT(
        patch_size=args.patch_size,
        hidden_size=args.hidden_size,
        num_layers=args.num_layers,
        num_heads=args.num_heads,
        mlp_dim=args.mlp_dim,
        input_shape=(28, 28, 1),
        num_classes=10,
        preprocessing="unit",
        classifier_activation=None,  # logits, as the loss below expects
        name="vit_fashion_mnist",
    )
    initial_similarity = vit_inspect.position_embedding_similarity(model)
    initial_near, initial_far = vit_inspect.neighbour_contrast(initial_similarity)

    steps = args.epochs * int(np.ceil(len(x_train) / args.batch_size))
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0, steps, warmup_target=args.learning_rate, warmup_steps=max(steps // 10, 1)
    )
    model.compile(
        optimizer=keras.optimizers.AdamW(schedule, weight_decay=0.05, clipnorm=1.0),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        jit_compile=True,
    )
    start = time.time()
    history = model.fit(
        x_train, y_train, batch_size=args.batch_size, epochs=args.epochs, verbose=2, shuffle=True
    )
    train_seconds = time.time() - start
    _, test_accuracy = model.evaluate(x_test, y_test, batch_size=512, verbose=0)

    similarity = vit_inspect.position_embedding_similarity(model)
    near, far = vit_inspect.neighbour_contrast(similarity)
    images = x_test[: args.inspect_images]
    distances = vit_inspect.attention_distances(model, images)

    print(f"\ntest accuracy: {test_accuracy:.4f}  ({len(x_train)} training images, {args.epochs} epochs, "
          f"{train_seconds:.0f} s)")
    print("position-embedding cosine similarity, 4-neighbours vs. patches >= half the grid away:")
    print(f"  at initialisation: near {initial_near:+.3f}  far {initial_far:+.3f}  difference {initial_near - initial_far:+.3f}")
    print(f"  trained:           near {near:+.3f}  far {far:+.3f}  difference {near - far:+.3f}")
    grid = model.get_layer("embedding").grid_size
    tokens = grid[0] * grid[1]
    uniform = vit_inspect.mean_attention_distance(np.full((1, 1, tokens, tokens), 1 / tokens), grid, args.patch_size)
    print(f"mean attention distance in pixels ({len(images)} test images, 28 px images, "
          f"{args.patch_size} px patches), per layer: mean [min, max] over heads; "
          f"uniform attention would give {float(uniform[0]):.2f}")
    for layer, row in enumerate(distances):
        heads = " ".join(f"{value:5.2f}" for value in row)
        print(f"  layer {layer}: {row.mean():5.2f} [{row.min():5.2f}, {row.max():5.2f}]   heads: {heads}")

    os.makedirs(args.out, exist_ok=True)
    model.save(os.path.join(args.out, "vit_fashion_mnist.keras"))
    sample = x_test[[int(np.flatnonzero(y_test == label)[0]) for label in (0, 1, 7, 9)]]
    maps = vit_inspect.rollout_maps(model, sample)
    titles = [fashion_mnist.CLASS_NAMES[label] for label in (0, 1, 7, 9)]
    paths = [
        plots.plot_attention_rollout(sample, maps, os.path.join(args.out, "attention_rollout.png"), titles),
        plots.plot_mean_attention_distance(distances, os.path.join(args.out, "mean_attention_distance.png"), 28),
        plots.plot_position_embedding_similarity(similarity, os.path.join(args.out, "position_embedding_similarity.png")),
        plots.plot_patch_embedding_filters(
            vit_inspect.patch_embedding_filters(model, 14), os.path.join(args.out, "patch_embedding_filters.png")
        ),
    ]
    results = {
        "data": args.data or "shipped sample",
        "train_images": int(len(x_train)),
        "epochs": args.epochs,
        "architecture": {k: getattr(args, k) for k in CORE_FIELDS},
        "train_seconds": round(train_seconds, 1),
        "final_train_accuracy": round(float(history.history["accuracy"][-1]), 4),
        "test_accuracy": round(float(test_accuracy), 4),
        "position_similarity_near": round(near, 4),
        "position_similarity_far": round(far, 4),
        "position_similarity_near_initial": round(initial_near, 4),
        "position_similarity_far_initial": round(initial_far, 4),
        "mean_attention_distance_px": np.round(distances, 3).tolist(),
        "mean_attention_distance_uniform_px": round(float(uniform[0]), 3),
        "machine": machine_record(),
    }
    with open(os.path.join(args.out, "results.json"), "w") as handle:
        json.dump(results, handle, indent=1)
    print("figures:", *paths, sep="\n  ")
