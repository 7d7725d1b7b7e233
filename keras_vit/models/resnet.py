"""The BiT ResNet stem of the ViT hybrids (paper section 3.1), as a functional Keras model."""

from __future__ import annotations

import keras

from keras_vit._validation import check_divisible, check_positive_int
from keras_vit.layers import BottleneckUnit, StandardizedConv2D
from keras_vit.layers.bottleneck_unit import GROUPS


def BiTResNet(stage_depths=(3, 4, 9), width=64, channels=3, name="resnet"):
    """Builds the ResNet stem of the ViT hybrids: weight-standardised convolutions + GroupNorm.

    Root: conv_root 7x7 stride 2 (no bias) -> gn_root -> ReLU -> max-pool 3x3 stride 2, all
    with SAME padding. Then one stage per entry of `stage_depths`: stage s (named block{s}) has
    bottleneck units unit1 ... of width `width` * 2**(s-1), unit1 of stages 2+ carrying stride
    2. The output stride is 4 * 2**(len(stage_depths) - 1) (4 for the root alone) and the
    output has 4 * width * 2**(len(stage_depths) - 1) channels (`width` for the root alone).
    The model takes images of any size; layer names follow the original checkpoints
    (conv_root, gn_root, block{s}_unit{u}/conv1 ...).

    Args:
        stage_depths: tuple of int. Units per stage: (3, 4, 9) for R50+ViT-B/16, (3, 4, 6, 3)
            for R50+ViT-L/32, (2, 2, 2, 2) for R26, () for the root alone. Defaults to (3, 4, 9).
        width: int. Channels of the root; a multiple of 32. Defaults to 64.
        channels: int. Channels of the input images. Defaults to 3.
        name: str. Model name. Defaults to "resnet".

    Returns:
        A `keras.Model` mapping (B, H, W, channels) images to (B, H/stride, W/stride, C) features.

    Example:

    >>> stem = BiTResNet((1,), width=32)
    >>> stem.output_shape
    (None, None, None, 128)
    >>> stem.compute_output_shape((2, 64, 64, 3))
    (2, 16, 16, 128)
    """
    stage_depths = tuple(stage_depths)
    for depth in stage_depths:
        check_positive_int("stage_depths entry", depth)
    check_positive_int("width", width)
    check_divisible("width", width, "the GroupNorm groups", GROUPS)
    check_positive_int("channels", channels)
    inputs = keras.Input((None, None, channels), name="images")
    x = StandardizedConv2D(width, 7, strides=2, name="conv_root")(inputs)
    x = keras.layers.GroupNormalization(GROUPS, epsilon=1e-6, name="gn_root")(x)
    x = keras.layers.ReLU(name="root_relu")(x)
    x = keras.layers.MaxPooling2D(3, strides=2, padding="same", name="root_pool")(x)
    for s, depth in enumerate(stage_depths, start=1):
        for u in range(1, depth + 1):
            strides = 2 if s > 1 and u == 1 else 1
            x = BottleneckUnit(width * 2 ** (s - 1), strides=strides, name=f"block{s}_unit{u}")(x)
    return keras.Model(inputs, x, name=name)

