"""`keras-vit inspect MODEL [IMAGE...] --out DIR`: attention rollout, attention distance and embedding figures (PNG)."""

from __future__ import annotations

import os
import sys

import numpy as np


def add(subparsers):
    from keras_vit import choices

    parser = subparsers.add_parser(
        "inspect",
        help="write attention-rollout, attention-distance and embedding figures of a model as PNG",
        description=(
            "Writes PNG figures of what a ViT learned (ViT paper Fig. 6 and 7): attention rollout "
            "over each image, mean attention distance per head against depth, position-embedding "
            "similarity and the principal components of the patch-embedding filters; prints the "
            "path of each file. Needs matplotlib (pip install 'keras_vit[plot]')."
        ),
    )
    parser.add_argument("model", metavar="MODEL", help="a saved keras_vit model (.keras file)")
    parser.add_argument(
        "images",
        metavar="IMAGE",
        nargs="*",
        help="image files (PNG, JPEG, ...), resized to the model's input size; default: four "
        "test images of the shipped Fashion-MNIST sample",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="folder to write the PNG files to")
    parser.add_argument("--overwrite", action="store_true", help="replace figures of these names already in DIR")
    parser.add_argument(
        "--scale",
        default="auto",
        choices=choices.INSPECT_SCALES,
        help="how to scale [0, 255] pixels before the model: raw (the model has its own "
        "preprocessing), unit [0, 1], symmetric [-1, 1] or imagenet mean/std; auto: raw when the "
        "model has a 'preprocessing' layer, else unit (default: auto)",
    )
    parser.add_argument(
        "--head-fusion", default="mean", choices=("mean", "max", "min"), help="how attention rollout fuses heads (default: mean)"
    )
    parser.add_argument(
        "--components", type=int, default=28, help="principal components of the embedding filters to draw (default: 28)"
    )
    parser.add_argument(
        "--image-size",
        type=int,
        nargs=2,
        metavar=("HEIGHT", "WIDTH"),
        help="size to resize images to when the model accepts any size (default: its built grid)",
    )
    parser.set_defaults(func=run)


# The figures `inspect` writes in --out (probe_attention.png for a model with attention pooling alone).
_FIGURES = {"rollout": "attention_rollout.png", "distance": "mean_attention_distance.png",
            "probe": "probe_attention.png", "similarity": "position_embedding_similarity.png",
            "filters": "patch_embedding_filters.png"}


def run(args):
    from keras_vit._validation import check_new_files, check_positive_int, check_writable_folder

    # The user's own mistakes first, then what is missing from the installation.
    if not os.path.isfile(args.model):
        raise FileNotFoundError(f"Model file not found: MODEL={args.model!r}.")
    if not args.model.endswith(".keras"):
        raise ValueError(f"Invalid MODEL={args.model!r}: expected a saved Keras model file ending in .keras.")
    check_positive_int("--components", args.components)
    check_writable_folder("--out", args.out)  # before the model loads: an existing file there is a mistake
    check_new_files([os.path.join(args.out, name) for name in _FIGURES.values()], args.overwrite)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(
            "keras-vit inspect: error: drawing the figures needs matplotlib: "
            'pip install "keras_vit[plot]" (or pip install matplotlib)',
            file=sys.stderr,
        )
        return 2
    import keras  # loading Keras registers keras_vit's layers for load_model (keras_vit._registration)

    from keras_vit import inspect as vit_inspect
    from keras_vit.inspect import images, plots

    model = keras.saving.load_model(args.model, compile=False)
    probe = vit_inspect.attention_model(model)  # fails early, clearly, on a model that is no ViT

    size, channels = images.input_size(model, args.image_size)
    if args.images:
        pixels = images.load_images(args.images, size, channels)
        titles = [os.path.basename(path) for path in args.images]
    else:
        pixels, titles = images.sample_images(size, channels)
        print("keras-vit inspect: no IMAGE given, using four Fashion-MNIST sample images", file=sys.stderr)
    inputs = images.model_inputs(model, pixels, args.scale)

    attentions = vit_inspect.attention_maps(probe, inputs)
    prefix, grid, pixels_per_token = vit_inspect.token_layout(model, attentions.shape[-1], size)
    rollout = vit_inspect.attention_rollout(attentions, args.head_fusion)
    readout = vit_inspect.probe_readout(model, inputs, args.head_fusion)  # a MAP model's probe (SigLIP), else None
    maps = vit_inspect.upsample_maps(vit_inspect.rollout_to_grid(rollout, grid, prefix, readout), size)
    distances = vit_inspect.mean_attention_distance(attentions, grid, pixels_per_token, prefix)
    patches = grid[0] * grid[1]
    uniform = vit_inspect.mean_attention_distance(np.full((1, 1, patches, patches), 1 / patches), grid, pixels_per_token)

    os.makedirs(args.out, exist_ok=True)
    written = [
        plots.plot_attention_rollout(pixels, maps, os.path.join(args.out, _FIGURES["rollout"]), titles),
        plots.plot_mean_attention_distance(
            distances, os.path.join(args.out, _FIGURES["distance"]), max(size), float(uniform[0])
        ),
    ]
    if readout is not None:
        probe = vit_inspect.upsample_maps(vit_inspect.readout_to_grid(readout, grid, prefix), size)
        written.append(plots.plot_attention_rollout(
            pixels, probe, os.path.join(args.out, _FIGURES["probe"]), titles, label="probe attention"))
    try:
        similarity = vit_inspect.position_embedding_similarity(vit_inspect.position_embeddings(model))
        written.append(
            plots.plot_position_embedding_similarity(
                similarity, os.path.join(args.out, _FIGURES["similarity"])
            )
        )
    except ValueError as reason:
        print(f"keras-vit inspect: skipped {_FIGURES['similarity']}: {reason}", file=sys.stderr)
    try:
        filters = vit_inspect.patch_embedding_filters(model, args.components)
        written.append(plots.plot_patch_embedding_filters(filters, os.path.join(args.out, _FIGURES["filters"])))
    except ValueError as reason:
        print(f"keras-vit inspect: skipped {_FIGURES['filters']}: {reason}", file=sys.stderr)
    for path in written:
        print(path)
    return 0
