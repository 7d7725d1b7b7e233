"""Position-embedding resampling to another patch grid, the class-token rows kept apart."""

from __future__ import annotations

import math

import keras
import numpy as np

from keras_vit import backends
from keras_vit._validation import check_choice
from keras_vit.layers.grid_resampling import INTERPOLATIONS, resample_grid


def resample_position_embedding(
    pos_embedding, new_grid, old_grid=None, num_prefix_tokens=1, interpolation="bilinear"
):
    """Resamples a learned position embedding (1, prefix + rows*cols, D) to another grid.

    The first `num_prefix_tokens` rows (the class token's) are kept as they are; the patch rows
    are reshaped to the (rows, cols) grid, resampled to `new_grid` and flattened row by row.
    Computed in float64 where the Keras backend has it (JAX only with jax_enable_x64; float32
    otherwise, within 1e-6 of float64 on unit-scale values), returned in the input's dtype.

    Args:
        pos_embedding: array (1, T, D) or (T, D).
        new_grid: int or (int, int). Target grid (rows, cols).
        old_grid: int, (int, int) or None. Grid of `pos_embedding`; None assumes a square one.
            Defaults to None.
        num_prefix_tokens: int. Leading rows that belong to no patch (1 for a class token).
            Defaults to 1.
        interpolation: str. "bilinear" (vit_jax: scipy.ndimage.zoom order 1, corners aligned),
            "bicubic" (timm: antialiased bicubic, half-pixel centres) or "bicubic_hf" (Hugging
            Face interpolate_pos_encoding: torch bicubic, align_corners=False). Defaults to
            "bilinear".

    Returns:
        NumPy array (1, num_prefix_tokens + new_rows * new_cols, D).

    Example:

    >>> pos = np.zeros((1, 1 + 14 * 14, 8), "float32")
    >>> resample_position_embedding(pos, (24, 24)).shape
    (1, 577, 8)
    """
    check_choice("interpolation", interpolation, INTERPOLATIONS)
    pos = np.asarray(pos_embedding)
    if pos.ndim == 2:
        pos = pos[None]
    if pos.ndim != 3 or pos.shape[0] != 1:
        raise ValueError(f"Invalid pos_embedding of shape {pos.shape}. Expected (1, tokens, width).")
    new_grid = _pair("new_grid", new_grid)
    patches = pos.shape[1] - num_prefix_tokens
    if old_grid is None:
        old_grid = square_grid(
            patches, f"pos_embedding (after {num_prefix_tokens} prefix rows)", hint="pass old_grid=(rows, cols)")
    old_grid = _pair("old_grid", old_grid)
    if old_grid[0] * old_grid[1] != patches:
        raise ValueError(
            f"old_grid={old_grid} has {old_grid[0] * old_grid[1]} cells but pos_embedding has {patches} "
            f"patch rows (after {num_prefix_tokens} prefix rows)."
        )
    if old_grid == new_grid:
        return pos
    dtype = "float64" if backends.current().has_float64() else "float32"
    grid = pos[0, num_prefix_tokens:].reshape(old_grid + (pos.shape[-1],)).astype(dtype)
    grid = keras.ops.convert_to_numpy(resample_grid(grid, new_grid[0], new_grid[1], interpolation))
    grid = grid.reshape(1, new_grid[0] * new_grid[1], pos.shape[-1]).astype(pos.dtype)
    return np.concatenate([pos[:, :num_prefix_tokens], grid], axis=1)


def square_grid(patches, what=None, hint=None):
    """The (side, side) grid of `patches` cells: the grid of a position embedding that states none.

    Args:
        patches: int. Patch rows (the prefix tokens' rows left out).
        what: str or None. What holds the rows, named in the error. None returns None instead of
            raising when `patches` is not a positive perfect square. Defaults to None.
        hint: str or None. What to do instead, appended to the error. Defaults to None.

    Returns:
        (side, side), or None (with `what=None`) when `patches` is no positive perfect square.

    Raises:
        ValueError: with `what`, when `patches` is no positive perfect square.

    Example:

    >>> square_grid(196), square_grid(50)
    ((14, 14), None)
    >>> square_grid(50, "pos_embed")
    Traceback (most recent call last):
    ...
    ValueError: pos_embed has 50 patch rows, which make no square grid (side x side).
    """
    side = math.isqrt(max(patches, 0))
    if patches > 0 and side * side == patches:
        return (side, side)
    if what is None:
        return None
    raise ValueError(f"{what} has {patches} patch rows, which make no square grid (side x side)"
                     + (f": {hint}." if hint else "."))


def _pair(name, value):
    if isinstance(value, (int, np.integer)):
        value = (int(value), int(value))
    value = tuple(int(v) for v in value)
    if len(value) != 2 or min(value) < 1:
        raise ValueError(f"Invalid {name}={value!r}. Expected a positive int or (rows, cols).")
    return value


def _bilinear_resize_matrix(old, new):
    """(new, old) matrix of a half-pixel-centred bilinear resize without antialiasing (tf.image.resize)."""
    matrix = np.zeros((new, old))
    for i in range(new):
        source = min(max((i + 0.5) * old / new - 0.5, 0.0), old - 1.0)
        low = int(np.floor(source))
        high = min(low + 1, old - 1)
        matrix[i, low] += 1.0 - (source - low)
        matrix[i, high] += source - low
    return matrix


def resize_patch_kernel(kernel, new_patch_size):
    """Resizes a patch-embedding kernel (P, P, C, D) to (P', P', C, D) with FlexiViT's pseudo-inverse resize.

    With B the bilinear resize of a P x P patch to P' x P' (half-pixel centres, no antialias,
    as `tf.image.resize`), the new kernel is pinv(B^T) w for each input-output channel pair:
    the least-squares solution of <x, w> = <B x, w'> (Beyer et al. 2023, FlexiViT, eq. 5), so
    a resized image gives the same tokens as the original image with the original kernel when
    upsampling, and the closest tokens when downsampling. Computed in float64.

    Args:
        kernel: array (P, P, C, D), the HWIO kernel of `PatchEncoder`.
        new_patch_size: int or (int, int). New patch side P'.

    Returns:
        NumPy array (P', P', C, D) of the kernel's dtype.

    Example:

    >>> resize_patch_kernel(np.ones((16, 16, 3, 8), "float32"), 8).shape
    (8, 8, 3, 8)
    """
    kernel = np.asarray(kernel)
    if kernel.ndim != 4 or kernel.shape[0] != kernel.shape[1]:
        raise ValueError(f"Invalid kernel of shape {kernel.shape}. Expected a square patch kernel (P, P, C, D).")
    new = _pair("new_patch_size", new_patch_size)
    old = kernel.shape[:2]
    if tuple(old) == new:
        return kernel
    resize = np.kron(_bilinear_resize_matrix(old[0], new[0]), _bilinear_resize_matrix(old[1], new[1]))
    pinv = np.linalg.pinv(resize.T)  # (P'^2, P^2)
    flat = kernel.reshape(old[0] * old[1], -1).astype("float64")
    return (pinv @ flat).reshape(new + kernel.shape[2:]).astype(kernel.dtype)
