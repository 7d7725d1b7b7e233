"""Resampling of a 2-D grid of embeddings (a position embedding) to another grid size.

Each method is separable: the grid is multiplied on each axis by a (new, old) interpolation
matrix built from the kernel and the coordinate convention of the reference implementation it
reproduces. Built from Keras ops, so it runs at call time with a dynamic output size (under
XLA and in an exported graph) and at load time on NumPy arrays alike.

- "bilinear": vit_jax (`scipy.ndimage.zoom(order=1)`): corners aligned, the new sample i sits
  at old coordinate i * (old - 1) / (new - 1).
- "bicubic": timm `resample_abs_pos_embed` (`torch.nn.functional.interpolate(mode="bicubic",
  antialias=True)`): half-pixel centres, Keys cubic with a = -0.5 (as PIL), each row of weights
  normalised over the taps inside the grid; when shrinking, the kernel widens by old / new.
- "bicubic_hf": Hugging Face transformers `ViTEmbeddings.interpolate_pos_encoding`
  (`interpolate(mode="bicubic", align_corners=False)`, no antialias): half-pixel centres,
  Keys cubic with a = -0.75, taps beyond the border clamped to the edge row.
- "bilinear_antialias": SigLIP 2 NaFlex (`Siglip2VisionEmbeddings.resize_positional_embeddings`,
  `interpolate(mode="bilinear", align_corners=False, antialias=True)`; PIL's bilinear filter):
  half-pixel centres, a triangle kernel, each row of weights normalised over the taps inside
  the grid; when shrinking, the kernel widens by old / new.

`interpolation_weights` gives the weights of any output positions, each with its own output
size: NaFlex resamples one table to a different grid for every image of a batch. Both take
`xp=NUMPY_OPS` to compute in NumPy instead (image resizing of `keras_vit.naflex`: on JAX, Keras
ops on a new size compile anew).
"""

from __future__ import annotations

import types

import numpy as np
from keras import ops

from keras_vit._validation import check_choice

INTERPOLATIONS = ("bilinear", "bicubic", "bicubic_hf", "bilinear_antialias")
# The keras.ops functions this module uses, in NumPy.
NUMPY_OPS = types.SimpleNamespace(
    cast=lambda x, dtype: np.asarray(x, dtype), arange=np.arange, ones_like=np.ones_like, zeros_like=np.zeros_like,
    maximum=np.maximum, abs=np.abs, relu=lambda x: np.maximum(x, np.zeros_like(x)), sum=np.sum, floor=np.floor,
    clip=np.clip, where=np.where, one_hot=lambda index, size, dtype: np.eye(size, dtype=dtype)[index],
)


def _keys_cubic(x, a, xp=ops):
    x = xp.abs(x)
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    far = ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    return xp.where(x <= 1.0, near, xp.where(x < 2.0, far, xp.zeros_like(x)))


def interpolation_matrix(old_size, new_size, method="bicubic", dtype="float32", xp=ops):
    """Matrix (new_size, old_size) that resamples a 1-D signal of `old_size` samples.

    Args:
        old_size: int. Number of input samples (static).
        new_size: int or scalar tensor. Number of output samples (may be dynamic).
        method: str. One of `INTERPOLATIONS` (see the module docstring). Defaults to "bicubic".
        dtype: str. Dtype of the computation and of the result. Defaults to "float32".
        xp: keras.ops or `NUMPY_OPS`. The array functions. Defaults to keras.ops.

    Example:

    >>> import numpy as np
    >>> np.asarray(interpolation_matrix(2, 3, "bilinear")).tolist()
    [[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]]
    """
    return interpolation_weights(old_size, xp.arange(new_size, dtype=dtype), new_size, method, dtype, xp)


def interpolation_weights(old_size, index, new_size, method="bicubic", dtype="float32", xp=ops):
    """Weights (..., old_size) of output sample `index` of a signal resampled to `new_size` samples.

    Args:
        old_size: int. Number of input samples (static).
        index: tensor (...). Output sample indices.
        new_size: int or tensor broadcastable to `index`. Output samples of each index's signal.
        method: str. One of `INTERPOLATIONS` (see the module docstring). Defaults to "bicubic".
        dtype: str. Dtype of the computation and of the result. Defaults to "float32".
        xp: keras.ops or `NUMPY_OPS`. The array functions. Defaults to keras.ops.

    Example:

    >>> import numpy as np
    >>> weights = interpolation_weights(4, np.array([0, 0]), np.array([2, 8]), "bilinear_antialias")
    >>> np.asarray(weights, "float64").round(2).tolist()  # shrinking averages; enlarging interpolates
    [[0.43, 0.43, 0.14, 0.0], [1.0, 0.0, 0.0, 0.0]]
    """
    check_choice("interpolation", method, INTERPOLATIONS)
    # Offsets between new and old sample positions are formed as whole-number numerators over
    # one division: subtracting positions up to `old` apart would cancel float32's precision
    # (2e-6 off scipy's zoom on a 14 -> 24 grid), and JAX has no float64 by default.
    old = xp.cast(old_size, dtype)
    dst = xp.cast(index, dtype)[..., None]
    new = xp.cast(new_size, dtype)
    if len(new.shape):  # one size per index: a trailing axis against the old samples
        new = new[..., None]
    src_index = xp.arange(old_size, dtype=dtype)
    # Maxima against tensors, not Python floats: PyTorch's keras.ops.maximum(x, 0.0) drops float64 to float32.
    one = xp.ones_like(new)
    if method == "bilinear":
        # scipy.ndimage.zoom: new sample i at old coordinate i * (old - 1) / (new - 1); at 0 when the output has one sample.
        offset = (dst * (old - 1.0) - src_index * xp.maximum(new - 1.0, one)) / xp.maximum(new - 1.0, one)
        return xp.relu(1.0 - xp.abs(offset))
    if method in ("bicubic", "bilinear_antialias"):
        # Half-pixel centres: new sample i at old coordinate (i + 0.5) * old / new - 0.5.
        support = xp.maximum(old / new, one)
        offset = ((2.0 * src_index + 1.0) * new - (2.0 * dst + 1.0) * old) / (2.0 * new * support)
        weights = _keys_cubic(offset, -0.5, xp) if method == "bicubic" else xp.relu(1.0 - xp.abs(offset))
        return weights / xp.sum(weights, axis=-1, keepdims=True)
    numerator = (2.0 * dst + 1.0) * old - new  # 2 * new * (old coordinate)
    base = xp.floor(numerator / (2.0 * new))
    frac = (numerator - 2.0 * new * base) / (2.0 * new)
    matrix = 0.0
    for tap in (-1, 0, 1, 2):
        taps = xp.cast(xp.clip(base + tap, 0.0, old - 1.0), "int32")[..., 0]
        matrix = matrix + xp.one_hot(taps, old_size, dtype=dtype) * _keys_cubic(frac - tap, -0.75, xp)
    return matrix


def resample_grid(grid, new_rows, new_cols, method="bicubic"):
    """Resamples a grid (rows, cols, D) to (new_rows, new_cols, D).

    Args:
        grid: tensor or array (rows, cols, D) with static rows and cols.
        new_rows: int or scalar tensor. Rows of the result.
        new_cols: int or scalar tensor. Columns of the result.
        method: str. One of `INTERPOLATIONS`. Defaults to "bicubic".

    Example:

    >>> import numpy as np
    >>> tuple(resample_grid(np.zeros((2, 3, 4), "float32"), 4, 5).shape)
    (4, 5, 4)
    """
    grid = ops.convert_to_tensor(grid)
    rows, cols = grid.shape[0], grid.shape[1]
    row_matrix = interpolation_matrix(rows, new_rows, method, dtype=grid.dtype)
    col_matrix = interpolation_matrix(cols, new_cols, method, dtype=grid.dtype)
    grid = ops.einsum("ai,ijd->ajd", row_matrix, grid)
    return ops.einsum("bj,ajd->abd", col_matrix, grid)
