"""Patches: split images into the flattened patch sequence of the ViT paper."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_divisible, check_positive_int


@keras.saving.register_keras_serializable(package="keras_vit")
class Patches(keras.layers.Layer):
    """Splits images (B, H, W, C) into patches (B, N, P*P*C), N = (H/P) * (W/P).

    Patches are taken row by row; each is flattened in (row, column, channel) order, the order
    of a Conv2D kernel of shape (P, P, C, D). Works under XLA and for non-square images.

    Args:
        patch_size: int. Side P of the square patches. H and W must be multiples of it.

    Example:

    >>> import numpy as np
    >>> tuple(Patches(4)(np.zeros((2, 8, 12, 3), "float32")).shape)
    (2, 6, 48)
    """

    def __init__(self, patch_size, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("patch_size", patch_size)
        self.patch_size = patch_size

    def build(self, input_shape):
        _check_image_shape(input_shape, self.patch_size)
        super().build(input_shape)

    def call(self, images):
        p = self.patch_size
        shape = ops.shape(images)
        rows, cols, channels = shape[1] // p, shape[2] // p, shape[3]
        x = ops.reshape(images, (-1, rows, p, cols, p, channels))
        x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
        return ops.reshape(x, (-1, rows * cols, p * p * channels))

    def compute_output_shape(self, input_shape):
        _check_image_shape(input_shape, self.patch_size)
        batch, height, width, channels = input_shape
        p = self.patch_size
        num = None if height is None or width is None else (height // p) * (width // p)
        depth = None if channels is None else p * p * channels
        return (batch, num, depth)

    def get_config(self):
        return {**super().get_config(), "patch_size": self.patch_size}


def _check_image_shape(input_shape, patch_size):
    if len(input_shape) != 4:
        raise ValueError(
            f"Expected images of shape (batch, height, width, channels), got input_shape={tuple(input_shape)}."
        )
    for axis_name, size in (("image height", input_shape[1]), ("image width", input_shape[2])):
        if size is not None:
            check_divisible(axis_name, size, "patch_size", patch_size)
