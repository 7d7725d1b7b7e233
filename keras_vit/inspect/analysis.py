"""What a ViT learned, as NumPy arrays: attention rollout, attention distance, position and patch embeddings.

The figures of the ViT paper (Dosovitskiy et al. 2020): Fig. 6 (attention rollout) and the
three panels of Fig. 7 (embedding filters, position-embedding similarity, mean attention
distance). The array functions work on hand-made tensors too; the model functions read a
keras_vit model.
"""

from __future__ import annotations

import keras
import numpy as np

from keras_vit._validation import check_choice, check_positive_int
from keras_vit.inspect.attention import attention_maps, has_probe, patch_encoder, probe_attention, token_layout
from keras_vit.layers.patch_encoder import sincos2d_embedding

HEAD_FUSIONS = ("mean", "max", "min")


def _as_layers(attentions):
    """Returns attentions as (L, B, heads, T, T) float64 and checks their shape."""
    array = np.asarray(attentions, dtype="float64")
    if array.ndim == 4:
        array = array[None]
    if array.ndim != 5 or array.shape[-1] != array.shape[-2]:
        raise ValueError(
            f"Invalid attentions of shape {array.shape}: expected (layers, batch, heads, T, T) or "
            "(batch, heads, T, T) attention weights."
        )
    return array


def attention_rollout(attentions, head_fusion="mean"):
    """Attention rollout (Abnar & Zuidema 2020): how much each input token flows into each output.

    Per layer the heads are fused, the identity is added for the residual path, rows are
    renormalised to sum to 1, and the layers are multiplied, input side first:
    R = A_L ... A_2 A_1.

    Args:
        attentions: array (L, B, heads, T, T) or (B, heads, T, T). Attention weights, layers
            input side first, e.g. from `attention_maps`.
        head_fusion: str. How heads combine: "mean", "max" or "min". Defaults to "mean".

    Returns:
        A float32 array (B, T, T) whose rows sum to 1: row i is the share of each input token
        in output token i.

    Example:

    >>> import numpy as np
    >>> eye = np.broadcast_to(np.eye(3), (2, 1, 4, 3, 3))
    >>> np.allclose(attention_rollout(eye), np.eye(3))
    True
    """
    check_choice("head_fusion", head_fusion, HEAD_FUSIONS)
    layers = _as_layers(attentions)
    fused = getattr(np, head_fusion)(layers, axis=2)
    tokens = fused.shape[-1]
    rollout = np.broadcast_to(np.eye(tokens), fused.shape[1:]).copy()
    for attention in fused:
        attention = attention + np.eye(tokens)
        attention = attention / attention.sum(axis=-1, keepdims=True)
        rollout = attention @ rollout
    return rollout.astype("float32")


def rollout_to_grid(rollout, grid_size, num_prefix_tokens=1, readout=None):
    """Maps a rollout (B, T, T) onto the patch grid as (B, rows, cols).

    The map is the rollout read as the pooled output reads the final tokens: with `readout`
    (a MAP model's probe attention) its rows weighted so; else with a class token its row
    (what the classifier reads); without one the mean over every token's row (what global
    average pooling reads). Prefix-token columns are dropped and each map is rescaled so its
    maximum is 1.

    Args:
        rollout: array (B, T, T). From `attention_rollout`.
        grid_size: (int, int). Rows and columns of the patch grid.
        num_prefix_tokens: int. Tokens before the patches (1 for a class token, else 0).
            Defaults to 1.
        readout: array (B, T) or None. Weights of the final tokens in the pooled output, e.g.
            `probe_readout`. Defaults to None.

    Returns:
        A float32 array (B, rows, cols) in [0, 1].

    Example:

    >>> import numpy as np
    >>> rollout_to_grid(np.full((1, 5, 5), 0.2), (2, 2)).shape
    (1, 2, 2)
    """
    rollout = np.asarray(rollout, dtype="float64")
    if rollout.ndim != 3 or rollout.shape[-1] != rollout.shape[-2]:
        raise ValueError(f"Invalid rollout of shape {rollout.shape}: expected (batch, T, T).")
    if readout is not None:
        weights = np.einsum("bt,bts->bs", np.asarray(readout, dtype="float64"), rollout)
    elif num_prefix_tokens:
        weights = rollout[:, 0]
    else:
        weights = rollout.mean(axis=1)
    return readout_to_grid(weights, grid_size, num_prefix_tokens)


def readout_to_grid(weights, grid_size, num_prefix_tokens=0):
    """Weights over the tokens (B, T) as maps over the patch grid (B, rows, cols), maximum 1.

    T must be rows * cols patches plus `num_prefix_tokens`, else ValueError.

    Args:
        weights: array (B, T). E.g. `probe_readout`, or a row of a rollout.
        grid_size: (int, int). Rows and columns of the patch grid.
        num_prefix_tokens: int. Leading tokens that are no patches (dropped). Defaults to 0.

    Example:

    >>> readout_to_grid(np.array([[0.5, 0.1, 0.2, 0.1, 0.1]]), (2, 2), num_prefix_tokens=1)[0, 0]
    array([0.5, 1. ], dtype=float32)
    """
    weights = np.asarray(weights, dtype="float64")
    rows, cols = grid_size
    if weights.ndim != 2 or weights.shape[-1] != rows * cols + num_prefix_tokens:
        raise ValueError(
            f"Invalid weights of shape {weights.shape}: expected (batch, T) with "
            f"T = {rows}*{cols} patches + {num_prefix_tokens} prefix tokens."
        )
    weights = weights[:, num_prefix_tokens:]
    weights = weights / np.maximum(weights.max(axis=-1, keepdims=True), 1e-12)
    return weights.reshape(-1, rows, cols).astype("float32")


def probe_readout(model, images, head_fusion="mean"):
    """How a MAP-pooled model's probe reads the final tokens, heads fused: (B, T); None without a probe.

    Args:
        model: keras.Model. A keras_vit model.
        images: array (B, H, W, C). Inputs as the model expects them.
        head_fusion: str. "mean", "max" or "min". Defaults to "mean".

    Example:

    >>> import keras_vit
    >>> probe_readout(keras_vit.ViT("tiny_siglip", include_top=False), np.zeros((1, 16, 16, 3))).shape
    (1, 16)
    >>> probe_readout(keras_vit.ViT("tiny", num_classes=3), np.zeros((1, 32, 32, 3))) is None
    True
    """
    return _fused_probe(model, images, head_fusion) if has_probe(model) else None


def _fused_probe(model, images, head_fusion):
    check_choice("head_fusion", head_fusion, HEAD_FUSIONS)
    return getattr(np, head_fusion)(probe_attention(model, images), axis=1)  # raises without a probe


def probe_maps(model, images, head_fusion="mean", upsample=True):
    """The attention of a MAP-pooled model's probe over the patches, ready to overlay.

    Arguments and result as `rollout_maps`, for a keras_vit model built with pooling="map"
    (SigLIP); ValueError for another.

    Example:

    >>> import keras_vit
    >>> probe_maps(keras_vit.ViT("tiny_siglip", include_top=False), np.zeros((2, 16, 16, 3)), upsample=False).shape
    (2, 4, 4)
    """
    images = np.asarray(images)
    readout = _fused_probe(model, images, head_fusion)
    prefix, grid, _ = token_layout(model, readout.shape[-1], images.shape[1:3])
    maps = readout_to_grid(readout, grid, prefix)
    return upsample_maps(maps, images.shape[1:3]) if upsample else maps


def upsample_maps(maps, size):
    """Resizes maps (B, rows, cols) to (B, height, width) bilinearly, to overlay on the images.

    Example:

    >>> import numpy as np
    >>> upsample_maps(np.ones((1, 2, 2)), (8, 8)).shape
    (1, 8, 8)
    """
    maps = np.asarray(maps, dtype="float32")
    resized = keras.ops.image.resize(maps[..., None], tuple(size), interpolation="bilinear")
    return np.clip(keras.ops.convert_to_numpy(resized)[..., 0], 0.0, 1.0)


def rollout_maps(model, images, head_fusion="mean", upsample=True):
    """Attention-rollout maps of `images` through `model`, ready to overlay (paper Fig. 6).

    Args:
        model: keras.Model. A keras_vit model, plain or hybrid.
        images: array (B, H, W, C). Inputs as the model expects them.
        head_fusion: str. "mean", "max" or "min". Defaults to "mean".
        upsample: bool. Resize the maps to the image size; False keeps the patch grid.
            Defaults to True.

    Returns:
        A float32 array (B, H, W) (or (B, rows, cols)) in [0, 1].

    Example:

    >>> import numpy as np, keras_vit
    >>> rollout_maps(keras_vit.ViT("tiny", num_classes=3), np.zeros((2, 32, 32, 3))).shape
    (2, 32, 32)
    """
    images = np.asarray(images)
    attentions = attention_maps(model, images)
    prefix, grid, _ = token_layout(model, attentions.shape[-1], images.shape[1:3])
    readout = probe_readout(model, images, head_fusion)  # a MAP model's pooled output reads through its probe
    maps = rollout_to_grid(attention_rollout(attentions, head_fusion), grid, prefix, readout)
    return upsample_maps(maps, images.shape[1:3]) if upsample else maps


def mean_attention_distance(attentions, grid_size, patch_size=1.0, num_prefix_tokens=0):
    """Attention-weighted distance in pixels between query and key patches (paper Fig. 7 right).

    Prefix tokens (the class token) are left out as queries and keys; each query's weights over
    the patch keys are renormalised to sum to 1, so the result is a true weighted mean. The
    distance is averaged over queries and images.

    Args:
        attentions: array (L, B, heads, T, T) or (B, heads, T, T). Attention weights.
        grid_size: (int, int). Rows and columns of the patch grid.
        patch_size: float or (float, float). Pixels per patch (height, width). Defaults to 1,
            which gives distances in patches.
        num_prefix_tokens: int. Tokens before the patches. Defaults to 0.

    Returns:
        A float32 array (L, heads) (or (heads,) for 4-D input) of distances in pixels.

    Example:

    >>> import numpy as np
    >>> uniform = np.full((1, 1, 4, 4), 0.25)
    >>> float(mean_attention_distance(uniform, (1, 4))[0])
    1.25
    """
    single = np.ndim(attentions) == 4
    layers = _as_layers(attentions)
    rows, cols = grid_size
    prefix = num_prefix_tokens
    if layers.shape[-1] != rows * cols + prefix:
        raise ValueError(
            f"Invalid attentions of shape {layers.shape}: T={layers.shape[-1]} does not match "
            f"grid_size={tuple(grid_size)} plus num_prefix_tokens={prefix}."
        )
    pixel_h, pixel_w = (patch_size, patch_size) if np.isscalar(patch_size) else patch_size
    y, x = np.divmod(np.arange(rows * cols), cols)
    distance = np.hypot((y[:, None] - y[None]) * pixel_h, (x[:, None] - x[None]) * pixel_w)
    weights = layers[..., prefix:, prefix:]
    weights = weights / np.maximum(weights.sum(axis=-1, keepdims=True), 1e-12)
    per_query = (weights * distance).sum(axis=-1)
    result = per_query.mean(axis=(1, 3)).astype("float32")
    return result[0] if single else result


def attention_distances(model, images, batch_size=32):
    """Mean attention distance in input pixels of every head and block of `model` on `images`.

    Args:
        model: keras.Model. A keras_vit model, plain or hybrid.
        images: array (B, H, W, C). Inputs as the model expects them.
        batch_size: int. Images per forward pass. Defaults to 32.

    Returns:
        A float32 array (layers, heads).

    Example:

    >>> import numpy as np, keras_vit
    >>> attention_distances(keras_vit.ViT("tiny", num_classes=3), np.zeros((1, 32, 32, 3))).shape
    (2, 2)
    """
    images = np.asarray(images)
    total = 0.0
    # In chunks: the attention of a large model is big (ViT-B/16: about 22 MB per image).
    for start in range(0, len(images), batch_size):
        chunk = images[start : start + batch_size]
        attentions = attention_maps(model, chunk, batch_size=batch_size)
        prefix, grid, pixels = token_layout(model, attentions.shape[-1], images.shape[1:3])
        total = total + mean_attention_distance(attentions, grid, pixels, prefix) * len(chunk)
    return (total / len(images)).astype("float32")


def position_embeddings(model):
    """Returns the position embedding of each patch, (rows, cols, D), of a keras_vit model.

    Learned embeddings are read from the PatchEncoder (class-token row dropped); sincos2d ones
    are computed for its grid.

    Args:
        model: keras.Model. A keras_vit model with a "learned" or "sincos2d" position embedding.

    Returns:
        A float32 array (rows, cols, D).

    Raises:
        ValueError: the model has no position embedding, or no known grid.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT("tiny", num_classes=3)
    >>> table = position_embeddings(model)
    >>> stored = keras.ops.convert_to_numpy(model.get_layer("embedding").pos_embedding)
    >>> table.shape, stored.shape  # the stored table starts with the class token's row
    ((8, 8, 32), (1, 65, 32))
    >>> bool(np.array_equal(table[0, 1], stored[0, 2]))
    True
    >>> position_embeddings(keras_vit.ViT("tiny", num_classes=3, position_embedding="sincos2d")).shape
    (8, 8, 32)
    """
    encoder = patch_encoder(model)
    grid = getattr(encoder, "grid_size", None)
    if grid is None:  # sincos2d encoders keep no grid: read it off the input they were built for
        try:
            height, width = encoder.input.shape[1:3]
        except (AttributeError, ValueError):
            height = width = None
        if height is not None and width is not None:
            grid = (height // encoder.patch_size, width // encoder.patch_size)
    if encoder.position_embedding == "learned":
        table = keras.ops.convert_to_numpy(encoder.pos_embedding)[0, encoder.num_position_prefix_tokens:]
    elif encoder.position_embedding == "sincos2d" and grid is not None:
        table = keras.ops.convert_to_numpy(sincos2d_embedding(grid[0], grid[1], encoder.hidden_size))
    else:
        raise ValueError(
            f"Invalid model={model.name!r}: its position_embedding={encoder.position_embedding!r} "
            "has no per-patch table to compare; expected 'learned' or 'sincos2d' with a known grid."
        )
    return table.astype("float32").reshape(grid[0], grid[1], -1)


def position_embedding_similarity(embeddings):
    """Cosine similarity of each patch's position embedding with every other (paper Fig. 7 centre).

    Args:
        embeddings: array (rows, cols, D), or a keras_vit model (its `position_embeddings`).

    Returns:
        A float32 array (rows, cols, rows, cols): [i, j] is the similarity map of patch (i, j).

    Example:

    >>> import numpy as np
    >>> similarity = position_embedding_similarity(np.random.rand(2, 3, 8))
    >>> similarity.shape, bool(np.allclose(similarity[1, 2, 1, 2], 1.0))
    ((2, 3, 2, 3), True)
    """
    if isinstance(embeddings, keras.Model):
        embeddings = position_embeddings(embeddings)
    table = np.asarray(embeddings, dtype="float64")
    if table.ndim != 3:
        raise ValueError(f"Invalid embeddings of shape {table.shape}: expected (rows, cols, D).")
    rows, cols, _ = table.shape
    flat = table.reshape(rows * cols, -1)
    flat = flat / np.maximum(np.linalg.norm(flat, axis=-1, keepdims=True), 1e-12)
    return (flat @ flat.T).reshape(rows, cols, rows, cols).astype("float32")


def neighbour_contrast(similarity, far=None):
    """How much more similar position embeddings are to their neighbours than to distant patches.

    Args:
        similarity: array (rows, cols, rows, cols). From `position_embedding_similarity`.
        far: float or None. Patches at least this many cells apart (Chebyshev) count as
            distant. Defaults to half the longer grid side.

    Returns:
        (mean similarity to the 4-neighbours, mean similarity to distant patches).

    Example:

    >>> import numpy as np
    >>> near, far = neighbour_contrast(position_embedding_similarity(np.random.rand(4, 4, 8)))
    >>> 0 <= near <= 1 and 0 <= far <= 1
    True
    """
    similarity = np.asarray(similarity, dtype="float64")
    rows, cols = similarity.shape[:2]
    far = max(rows, cols) / 2 if far is None else far
    y, x = np.divmod(np.arange(rows * cols), cols)
    dy, dx = np.abs(y[:, None] - y[None]), np.abs(x[:, None] - x[None])
    flat = similarity.reshape(rows * cols, rows * cols)
    near_mask = dy + dx == 1
    far_mask = np.maximum(dy, dx) >= far
    if not near_mask.any() or not far_mask.any():
        raise ValueError(f"Invalid grid {rows}x{cols}: too small to compare near and far patches.")
    return float(flat[near_mask].mean()), float(flat[far_mask].mean())


def patch_embedding_filters(model, num_components=28):
    """Top principal components of the patch-embedding filters as image tiles (paper Fig. 7 left).

    Each of the D filters of the (P, P, C, D) kernel is a point in P*P*C space; the components
    are the directions of largest variance among them, largest first.

    Args:
        model: keras.Model. A keras_vit model whose patches are image pixels (not a hybrid's
            1x1 patches on a CNN feature map).
        num_components: int. Components to return (at most min(D, P*P*C)). Defaults to 28.

    Returns:
        A float32 array (k, P, P, C), each component of unit norm.

    Example:

    >>> import keras_vit
    >>> patch_embedding_filters(keras_vit.ViT("tiny", num_classes=3), 4).shape
    (4, 4, 4, 3)
    """
    check_positive_int("num_components", num_components)
    encoder = patch_encoder(model)
    kernel = keras.ops.convert_to_numpy(encoder.kernel).astype("float64")
    p_h, p_w, channels, width = kernel.shape
    if p_h * p_w == 1:
        raise ValueError(
            f"Invalid model={model.name!r}: its embedding has 1x1 patches (a hybrid's CNN feature "
            "map), so its filters are not image tiles."
        )
    filters = kernel.reshape(-1, width).T
    filters = filters - filters.mean(axis=0, keepdims=True)
    _, _, components = np.linalg.svd(filters, full_matrices=False)
    count = min(num_components, components.shape[0])
    return components[:count].reshape(count, p_h, p_w, channels).astype("float32")
