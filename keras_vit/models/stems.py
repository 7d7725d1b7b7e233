"""Stems for ViTs on small images, passed to `ViT(backbone=)`: a convolutional one, and shifted patches.

Early convolutions (Xiao et al. 2021, "Early convolutions help transformers see better"):
3x3 convolutions with BatchNorm and ReLU turn the image into a small feature map whose cells
the encoder reads as 1x1 patches. On 28-32 px images in a CPU budget of minutes it buys more
accuracy per second than a bigger patch grid (benchmarks/RESULTS.md, "Accuracy in a time
budget"); `keras_vit.training.budget` picks it.

Shifted-patch tokenization (Lee et al. 2021, "Vision Transformer for Small-Size Datasets") keeps
the plain ViT free of convolutions: each patch vector also holds the pixels half a patch around
it, normalized, and the encoder's linear embedding reads it as a 1x1 patch
(`shifted_patch_stem`).

Example:

>>> stem = conv_stem(channels=1)
>>> stem.compute_output_shape((None, 32, 32, 1))
(None, 4, 4, 128)
>>> shifted_patch_stem(7, channels=1).compute_output_shape((None, 28, 28, 1))
(None, 4, 4, 245)
"""

from __future__ import annotations

import keras

from keras_vit import _validation
from keras_vit.layers import ShiftedPatches

# Three stride-2 convolutions make 28 or 32 px a 4x4 map, widths doubling as the map halves; a
# fourth, of stride 1 on the 4x4 map, deepens the stem where its map is small (benchmarks/RESULTS.md,
# "Accuracy in a time budget": CIFAR-10 in 8 min 78.70% against 75.88%, Fashion-MNIST in 10 min
# 92.67% against 92.33%).
DEFAULT_FILTERS = (32, 64, 128, 128)
DEFAULT_STRIDES = (2, 2, 2, 1)


# The BatchNorm momentum of the stem: Keras' default, with which the budget rules were measured.
# A short run leaves its moving statistics short of the data's (they start at mean 0, variance 1):
# the trainer then recomputes them (`keras_vit.training.batch_norm`, "precise BatchNorm").
BATCH_NORM_MOMENTUM = 0.99


def conv_stem(filters=DEFAULT_FILTERS, strides=DEFAULT_STRIDES, channels: int = 3, name: str = "conv_stem",
              momentum: float = BATCH_NORM_MOMENTUM):
    """Builds the stem: one 3x3 Conv2D (no bias) + BatchNormalization + ReLU per entry of `filters`.

    Args:
        filters: tuple of int. Output channels of each convolution. Defaults to (32, 64, 128, 128).
        strides: tuple of int. Stride of each convolution, as many as `filters`.
            Defaults to (2, 2, 2, 1).
        channels: int. Input channels. Defaults to 3.
        name: str. Model name. Defaults to "conv_stem".
        momentum: float. Momentum of the BatchNorm moving statistics, in [0, 1). Defaults to
            `BATCH_NORM_MOMENTUM` (0.99).

    Returns:
        A functional `keras.Model` from (B, H, W, channels) images of any size to
        (B, ceil(H / s), ceil(W / s), filters[-1]) with s the product of `strides`.

    Example:

    >>> conv_stem((16, 32), (2, 1)).compute_output_shape((None, 28, 28, 3))
    (None, 14, 14, 32)
    """
    filters, strides = tuple(filters), tuple(strides)
    if not filters or len(filters) != len(strides):
        raise ValueError(
            f"Invalid filters={filters!r} and strides={strides!r}. Expected as many strides as filters, at least one."
        )
    for i, (width, stride) in enumerate(zip(filters, strides)):
        _validation.check_positive_int(f"filters[{i}]", width)
        _validation.check_positive_int(f"strides[{i}]", stride)
    _validation.check_positive_int("channels", channels)
    _validation.check_number_in("momentum", momentum, 0, 1, include_high=False)
    inputs = keras.Input((None, None, channels), name="images")
    x = inputs
    for i, (width, stride) in enumerate(zip(filters, strides)):
        x = keras.layers.Conv2D(width, 3, strides=stride, padding="same", use_bias=False, name=f"stem_conv{i}")(x)
        x = keras.layers.BatchNormalization(momentum=momentum, name=f"stem_bn{i}")(x)
        x = keras.layers.ReLU(name=f"stem_relu{i}")(x)
    return keras.Model(inputs, x, name=name)


def stem_arguments(stem_args: dict | None = None) -> dict:
    """The filters and strides `conv_stem(**stem_args)` builds with, its defaults filled in.

    Example:

    >>> stem_arguments({"strides": (2, 2, 2, 2)})
    {'filters': [32, 64, 128, 128], 'strides': [2, 2, 2, 2]}
    """
    stem_args = stem_args or {}
    return {"filters": [int(f) for f in stem_args.get("filters", DEFAULT_FILTERS)],
            "strides": [int(s) for s in stem_args.get("strides", DEFAULT_STRIDES)]}


def stem_stride(strides=DEFAULT_STRIDES) -> int:
    """Pixels per feature-map cell of a stem with these `strides`.

    Example:

    >>> stem_stride(), stem_stride((2, 1))
    (8, 2)
    """
    stride = 1
    for s in strides:
        stride *= int(s)
    return stride


def shifted_patch_stem(patch_size: int, channels: int = 3, name: str = "shifted_patches"):
    """Builds the shifted-patch tokenizer: `ShiftedPatches` + LayerNormalization of each patch vector.

    The ViT it feeds takes `patch_size=1`: its patch embedding becomes the linear map of the
    normalized vectors, as in Lee et al. 2021 (`keras_vit.training.budget` picks it for the plain
    ViT).

    Args:
        patch_size: int. Side of the square patches in pixels, at least 2.
        channels: int. Input channels. Defaults to 3.
        name: str. Model name. Defaults to "shifted_patches".

    Returns:
        A functional `keras.Model` from (B, H, W, channels) images to (B, H / P, W / P, P * P * 5 * channels).

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT(backbone=shifted_patch_stem(7, channels=1), patch_size=1, hidden_size=32,
    ...                       num_layers=1, num_heads=2, mlp_dim=64, input_shape=(28, 28, 1), num_classes=10)
    >>> model.output_shape
    (None, 10)
    """
    _validation.check_positive_int("channels", channels)
    inputs = keras.Input((None, None, channels), name="images")
    x = ShiftedPatches(patch_size, name="shifted_patches")(inputs)
    x = keras.layers.LayerNormalization(epsilon=1e-6, name="patch_norm")(x)
    return keras.Model(inputs, x, name=name)


def conv_stem_arguments(model) -> dict | None:
    """The `conv_stem` arguments (filters, strides) of the conv stem inside `model`; None where it has none.

    What a precision trial needs to build a checkpoint's model again at its cost: the stem sets
    how many tokens the encoder reads.

    Args:
        model: keras.Model. A ViT, e.g. one `keras_vit.transfer.load_pretrained` read.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT(patch_size=1, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
    ...                       input_shape=(32, 32, 3), backbone=conv_stem((8, 16), (2, 2)), num_classes=2)
    >>> conv_stem_arguments(model)
    {'filters': [8, 16], 'strides': [2, 2]}
    """
    try:
        stem = model.get_layer("conv_stem")
    except ValueError:
        return None
    convolutions = [layer for layer in stem.layers if isinstance(layer, keras.layers.Conv2D)]
    return stem_arguments({"filters": [layer.filters for layer in convolutions],
                           "strides": [layer.strides[0] for layer in convolutions]})
