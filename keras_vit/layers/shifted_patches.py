"""ShiftedPatches: each patch with the pixels half a patch away, for a ViT's tokenizer on small images."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_positive_int
from keras_vit.layers.patches import _check_image_shape

# The four diagonal shifts of Lee et al. 2021 ("Vision Transformer for Small-Size Datasets"), as
# (rows, columns) signs: up-left, up-right, down-left, down-right. The views follow the image itself
# in the channels, in this order.
SHIFTS = ((-1, -1), (-1, 1), (1, -1), (1, 1))


@keras.saving.register_keras_serializable(package="keras_vit")
class ShiftedPatches(keras.layers.Layer):
    """Splits images (B, H, W, C) into a grid of patches (B, H/P, W/P, P*P*5C) that also hold shifted views.

    Shifted-patch tokenization (Lee et al. 2021): the image and four copies of it moved by P // 2
    pixels along the diagonals (zeros where a copy leaves the frame) are stacked on the channels,
    then cut into P x P patches, each flattened in (row, column, channel) order as `Patches` does.
    A linear embedding of these vectors lets each token see the pixels around its patch, with no
    convolution. The channels hold the image first, then the views shifted up-left, up-right,
    down-left and down-right (`SHIFTS`). The output is a feature map, the form
    `keras_vit.ViT(backbone=)` reads with `patch_size=1` (`keras_vit.models.stems.shifted_patch_stem`).

    Args:
        patch_size: int. Side P of the square patches, at least 2. H and W must be multiples of it.

    Example:

    >>> import numpy as np
    >>> tuple(ShiftedPatches(4)(np.zeros((2, 8, 12, 3), "float32")).shape)
    (2, 2, 3, 240)
    """

    def __init__(self, patch_size, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("patch_size", patch_size)
        if patch_size < 2:
            raise ValueError(f"Invalid patch_size={patch_size!r}. Expected an integer >= 2: a 1-pixel patch has no half to shift by.")
        self.patch_size = patch_size

    def build(self, input_shape):
        _check_image_shape(input_shape, self.patch_size)
        super().build(input_shape)

    def call(self, images):
        p, s = self.patch_size, self.patch_size // 2
        # One zero border of s pixels serves all four views: each is a window of the image's size.
        padded = ops.pad(images, ((0, 0), (s, s), (s, s), (0, 0)))
        views = [images] + [padded[:, _window(rows, s), _window(cols, s), :] for rows, cols in SHIFTS]
        x = ops.concatenate(views, axis=-1)
        shape = ops.shape(images)
        grid_rows, grid_cols, depth = shape[1] // p, shape[2] // p, 5 * shape[3]
        x = ops.reshape(x, (-1, grid_rows, p, grid_cols, p, depth))
        x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
        return ops.reshape(x, (-1, grid_rows, grid_cols, p * p * depth))

    def compute_output_shape(self, input_shape):
        _check_image_shape(input_shape, self.patch_size)
        batch, height, width, channels = input_shape
        p = self.patch_size
        return (
            batch,
            None if height is None else height // p,
            None if width is None else width // p,
            None if channels is None else p * p * 5 * channels,
        )

    def get_config(self):
        return {**super().get_config(), "patch_size": self.patch_size}


def _window(sign, s):
    """The image-sized part of an axis padded by s on both sides that moves its content by sign * s."""
    return slice(None, -2 * s) if sign > 0 else slice(2 * s, None)

