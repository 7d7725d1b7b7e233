"""Bilinear resizing with aligned corners (PyTorch's `interpolate(..., align_corners=True)`), from public ops.

`keras.ops.image.resize` maps pixel centres (half-pixel), as TensorFlow and PyTorch's default
do; DPT's decoders (Depth Anything, DPT) resize with the corner pixels of input and output
aligned, which moves every sample point. Bilinear interpolation is linear in the input, so each
axis is one matrix: row i weighs input j by max(0, 1 - |i * (n_in - 1) / (n_out - 1) - j|), the
tent of its two neighbours; one einsum per axis applies it, for any (also dynamic) size.
"""

from __future__ import annotations

from keras import ops


def _axis_weights(in_size, out_size, dtype):
    """(out_size, in_size) interpolation matrix of one axis; an output of one pixel takes the first input."""
    steps = ops.cast(ops.maximum(out_size - 1, 1), "float32")
    source = ops.cast(ops.arange(out_size), "float32") * (ops.cast(in_size - 1, "float32") / steps)
    offsets = ops.abs(source[:, None] - ops.cast(ops.arange(in_size), "float32")[None, :])
    return ops.cast(ops.relu(1.0 - offsets), dtype)


def resize_align_corners(images, height, width):
    """Resizes channels-last maps (B, h, w, C) to (B, height, width, C) bilinearly with aligned corners.

    Args:
        images: tensor (B, h, w, C).
        height: int or scalar tensor. Output height.
        width: int or scalar tensor. Output width.

    Example:

    >>> import numpy as np
    >>> x = np.arange(3, dtype="float32").reshape(1, 1, 3, 1)
    >>> ops.convert_to_numpy(resize_align_corners(x, 1, 5))[0, 0, :, 0].tolist()
    [0.0, 0.5, 1.0, 1.5, 2.0]
    """
    shape = ops.shape(images)
    rows = _axis_weights(shape[1], height, images.dtype)
    cols = _axis_weights(shape[2], width, images.dtype)
    images = ops.einsum("oh,bhwc->bowc", rows, images)
    return ops.einsum("pw,bowc->bopc", cols, images)
