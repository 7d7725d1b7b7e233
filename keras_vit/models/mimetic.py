"""Mimetic initialization: self-attention that starts out as pretrained ViTs' attention looks.

Trockman & Kolter 2023 ("Mimetic initialization of self-attention layers") observed that in
pretrained ViTs the product of each head's query and key kernels is close to a positive
multiple of the identity and the product of value and output kernels close to a negative one.
Setting those products at initialization (each head's `Wq Wk^T` close to `a Z + b I`, the
heads' `Wv Wo` summing to `a' Z' - b' I`, `Z` Gaussian with variance 1/D, each factored by
SVD into the kernels' shapes) lets a ViT
trained from scratch on small data learn faster: each token first attends to the tokens (and
positions) that resemble it. Only the kernels change; biases and the weight schema stay.

Example:

>>> import keras_vit
>>> model = keras_vit.ViT(patch_size=7, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
...                       image_size=28, num_classes=10)
>>> mimetic_initialization(model, seed=0)
1
"""

from __future__ import annotations

import numpy as np

from keras_vit import _validation
from keras_vit.layers.self_attention import MultiHeadSelfAttention

# (a, b) of the query-key and value-output products: the paper's settings for ViTs.
QUERY_KEY = (0.7, 0.7)
VALUE_OUTPUT = (0.4, 0.4)


def mimetic_initialization(model, query_key=QUERY_KEY, value_output=VALUE_OUTPUT, seed: int = 0) -> int:
    """Sets the attention kernels of every `MultiHeadSelfAttention` in `model`; returns how many.

    Args:
        model: keras.Model or keras.layers.Layer. Built; its layers (nested models included) and
            their encoder blocks' `attention` are searched.
        query_key: tuple of 2 floats. (a, b): each head's `Wq Wk^T` is the best rank-(D / heads)
            approximation of `a Z + b I`. Defaults to (0.7, 0.7).
        value_output: tuple of 2 floats. (a, b): the heads' `Wv Wo` sum to `a Z - b I`.
            Defaults to (0.4, 0.4).
        seed: int. Seed of the Gaussian matrices. Defaults to 0.

    Returns:
        int. The attention layers set (0 for a model without any).

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT(patch_size=16, hidden_size=32, num_layers=3, num_heads=2, mlp_dim=64,
    ...                       image_size=32, num_classes=2)
    >>> mimetic_initialization(model)
    3
    """
    _validation.check_seed("seed", seed)
    for name, pair in (("query_key", query_key), ("value_output", value_output)):
        if len(tuple(pair)) != 2:
            raise ValueError(f"Invalid {name}={pair!r}. Expected a pair (a, b) of numbers.")
        for value in pair:
            _validation.check_number_in(name, value, 0.0, float("inf"), include_high=False)
    rng = np.random.default_rng(seed)
    layers = [layer for layer in _sublayers(model) if isinstance(layer, MultiHeadSelfAttention)]
    for layer in layers:
        if not layer.built:
            raise ValueError(f"Invalid model: its attention layer {layer.name!r} is not built; build the model first.")
        dim, heads = layer.hidden_size, layer.num_heads
        width = dim // heads
        query, key, value, output = (np.zeros(v.shape, "float32") for v in (
            layer.query.kernel, layer.key.kernel, layer.value.kernel, layer.attention_output.kernel))
        # Each head's attention logits are its own: one product per head, of rank D / heads.
        for head in range(heads):
            query[:, head, :], key[:, head, :] = _factor(rng, dim, width, *query_key)
        # The residual adds the heads' outputs together: one full-rank product, its factors
        # split across the heads, so that their sum is the product asked for.
        left, right = _factor(rng, dim, dim, value_output[0], -value_output[1])
        value[...] = left.reshape(dim, heads, width)
        output[...] = right.T.reshape(heads, width, dim)
        for variable, array in ((layer.query.kernel, query), (layer.key.kernel, key), (layer.value.kernel, value),
                                (layer.attention_output.kernel, output)):
            variable.assign(array)
    return len(layers)


def _factor(rng, dim, width, a, b):
    """(dim, width) L and R with L R^T the best rank-`width` approximation of a Z + b I."""
    target = a * rng.normal(0.0, 1.0 / np.sqrt(dim), (dim, dim)) + b * np.eye(dim)
    u, s, vt = np.linalg.svd(target)
    root = np.sqrt(s[:width])
    return u[:, :width] * root, vt[:width].T * root


def _sublayers(layer):
    """`layer`, the layers of a model at any depth, and each encoder block's attention."""
    yield layer
    if isinstance(getattr(layer, "attention", None), MultiHeadSelfAttention):
        yield layer.attention
    for sub in getattr(layer, "layers", None) or ():
        yield from _sublayers(sub)
