"""PyTorch tensors as Keras variables and back: the conversions and `Entry` builders the Hugging Face and timm layouts share.

A PyTorch Linear stores its weight (out, in), a Keras Dense its kernel (in, out); a Conv2d OIHW,
a Keras Conv2D HWIO. Each builder returns `keras_vit.weights.mapping.Entry` objects whose
`to_model` converts a file's array to the variable and `from_model` converts it back, so the
readers and the writers (`save_hf`, `save_timm`) share one list.

Example:

>>> import numpy as np
>>> weight = np.arange(6.0).reshape(3, 2)  # a Linear from 2 inputs to 3 outputs
>>> kernel = from_torch_linear(weight, (2, 3))
>>> kernel.shape, bool((to_torch_linear(kernel) == weight).all())
((2, 3), True)
"""

from __future__ import annotations

import math

from keras_vit.weights.mapping import Entry


def reshape_to(array, shape):
    return array.reshape(shape)


def flat(array):
    return array.reshape(-1)


def from_torch_linear(array, shape):
    """PyTorch Linear weight (out, in) -> Keras kernel (in, out) reshaped to the variable."""
    return array.T.reshape(shape)


def to_torch_linear(array, in_axes=1):
    """Keras kernel (inputs..., outputs...) -> PyTorch Linear weight (out, in)."""
    return array.reshape(math.prod(array.shape[:in_axes]), -1).T


def linear_entry(key, kernel, in_axes=1):
    """A PyTorch Linear weight feeding a kernel whose first `in_axes` axes are its inputs."""
    return Entry(key, kernel, from_torch_linear, lambda array: to_torch_linear(array, in_axes))


def from_torch_conv(array, shape):
    """PyTorch Conv2d weight OIHW -> Keras kernel HWIO."""
    return array.transpose(2, 3, 1, 0)


def to_torch_conv(array):
    return array.transpose(3, 2, 0, 1)


def from_torch_patch_kernel(array, shape):
    """A PyTorch patch projection -> Keras kernel HWIO: a Conv2d weight OIHW, or SigLIP 2's Linear weight
    (out, P*P*C) on patches flattened in (row, column, channel) order."""
    if array.ndim != 2:
        return from_torch_conv(array, shape)
    channels = shape[2]
    side = math.isqrt(array.shape[1] // channels)
    if side * side * channels != array.shape[1]:
        return array  # no square patch of the model's channels: apply_entries reports the shapes
    return array.T.reshape(side, side, channels, array.shape[0])


def fused_part(index, parts=3):
    """Slice `index` of `parts` equal slices of a fused PyTorch Linear's weight and bias."""
    def weight(array, shape):
        width = array.shape[0] // parts
        return array[index * width:(index + 1) * width].T.reshape(shape)

    def bias(array, shape):
        width = array.shape[0] // parts
        return array[index * width:(index + 1) * width].reshape(shape)

    return weight, bias


def fused_attention_entries(parts, qkv_weight, qkv_bias, out_prefix, split_kv=False):
    """Query, key and value fused in one PyTorch Linear (or query apart and key-value fused)."""
    entries = []
    names = ("key", "value") if split_kv else ("query", "key", "value")
    for index, part in enumerate(names):
        weight, bias = fused_part(index, len(names))
        # Writers concatenate the entries of one key along axis 0, in this order.
        entries.append(Entry(qkv_weight, parts[part][0], weight, to_torch_linear))
        if parts[part][1] is not None:
            entries.append(Entry(qkv_bias, parts[part][1], bias, flat))
    return entries + [
        linear_entry(out_prefix + ".weight", parts["out"][0], in_axes=2),
        Entry(out_prefix + ".bias", parts["out"][1]),
    ]


def norm_entries(norm, key, scale="weight", bias="bias"):
    return [Entry(f"{key}.{scale}", norm.gamma), Entry(f"{key}.{bias}", norm.beta)]


def dense_entries(dense, key):
    entries = [linear_entry(key + ".weight", dense.kernel)]
    if dense.use_bias:
        entries.append(Entry(key + ".bias", dense.bias))
    return entries


def layer_scale_entries(layer, keys):
    if layer.layer_scale_1 is None:
        return []
    return [Entry(keys[0], layer.layer_scale_1.gamma), Entry(keys[1], layer.layer_scale_2.gamma)]
