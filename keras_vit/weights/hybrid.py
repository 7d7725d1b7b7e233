"""Key mapping of the ResNet stem of the original hybrid ViT `.npz` checkpoints.

The hybrid checkpoints (R50+ViT-B/16, R26+ViT-S/32, R+ViT-Ti/16, ...) hold, besides the
plain ViT keys, the stem of `keras_vit.models.resnet.BiTResNet`:

- `conv_root/kernel` (7, 7, C, width), `gn_root/{scale,bias}`;
- `block{s}/unit{u}/{conv1,conv2,conv3}/kernel`, `.../{gn1,gn2,gn3}/{scale,bias}`;
- in unit 1 of each stage also `conv_proj/kernel` and `gn_proj/{scale,bias}`.

Kernels are HWIO and raw (standardised at run time, as in the model). GroupNorm parameters are
stored as (C,) in some files and (1, 1, 1, C) in others; both load. The stem is the nested model
named "resnet" of a hybrid (its layers conv_root, gn_root, block{s}_unit{u}).

Example:

>>> import keras_vit
>>> model = keras_vit.ViT("R_tiny", num_classes=2)
>>> sorted(stem_variables(model))[:3]
['block1/unit1/conv1/kernel', 'block1/unit1/conv2/kernel', 'block1/unit1/conv3/kernel']
"""

from __future__ import annotations

import re

import numpy as np

from keras_vit.weights.mapping import Entry, MappingContext, apply_entries, build_entries, register_layer_mapping

STEM_LAYER = "resnet"
_NORM_PARAMS = (("scale", "gamma"), ("bias", "beta"))


def find_stem(model):
    """Returns the BiT ResNet stem (the nested model "resnet") of a hybrid, or None."""
    names = [layer.name for layer in model.layers]
    return model.get_layer(STEM_LAYER) if STEM_LAYER in names else None


def stem_variables(model):
    """Maps each stem key of the checkpoints (no prefix) to the model variable it fills.

    Read from the same layer mappings the loader uses.

    Args:
        model: keras.Model. A hybrid keras_vit model, or the stem model itself.

    Returns:
        dict key -> keras.Variable; GroupNorm variables are (C,), kernels HWIO.
    """
    return {entry.key: entry.variable for entry in _stem_entries(model)}


def _stem_entries(model):
    stem = find_stem(model) or model
    names = [layer.name for layer in stem.layers]
    if "conv_root" not in names:
        raise ValueError(
            f"Model {model.name!r} has no BiT ResNet stem (a nested model named {STEM_LAYER!r} with "
            "layers conv_root, gn_root, block{s}_unit{u}); only the hybrid variants have one."
        )
    return build_entries(stem, MappingContext("vit_jax", {}, "bilinear"))


def npz_stem_architecture(tensors):
    """Stem arguments implied by canonical `.npz` tensors: {} for a plain ViT.

    Returns stem (units per stage), stem_width and channels when the file has `conv_root/kernel`.
    """
    if "conv_root/kernel" not in tensors:
        return {}
    kernel = np.shape(tensors["conv_root/kernel"])
    units = {}
    for key in tensors:
        match = re.match(r"block(\d+)/unit(\d+)/conv1/kernel$", key)
        if match:
            stage, unit = int(match.group(1)), int(match.group(2))
            units[stage] = max(units.get(stage, 0), unit)
    depths = tuple(units[s] for s in range(1, len(units) + 1) if s in units)
    return {
        "stem": depths,
        "stem_width": int(kernel[-1]),
        "channels": int(kernel[2]),
    }


def _norm_to_model(array, shape):
    """GroupNorm parameters stored as (1, 1, 1, C) become the model's (C,)."""
    array = np.asarray(array)
    if len(shape) == 1 and array.ndim == 4 and array.shape[:3] == (1, 1, 1):
        array = array.reshape(array.shape[-1])
    return array


def _kernel_entry(key, layer):
    return Entry(f"{key}/kernel", layer.kernel)


def _norm_entries(key, layer):
    return [Entry(f"{key}/{name}", getattr(layer, attr), _norm_to_model) for name, attr in _NORM_PARAMS]


# The generic loader and save_npz walk the nested "resnet" model and ask these for its layers.
@register_layer_mapping("vit_jax", "conv_root")
def _npz_conv_root(layer, context):
    return [_kernel_entry("conv_root", layer)]


@register_layer_mapping("vit_jax", "gn_root")
def _npz_gn_root(layer, context):
    return _norm_entries("gn_root", layer)


@register_layer_mapping("vit_jax", "BottleneckUnit")
def _npz_unit(layer, context):
    prefix = layer.name.replace("_unit", "/unit")
    entries = []
    for i in (1, 2, 3):
        entries.append(_kernel_entry(f"{prefix}/conv{i}", getattr(layer, f"conv{i}")))
        entries.extend(_norm_entries(f"{prefix}/gn{i}", getattr(layer, f"gn{i}")))
    if layer.conv_proj is not None:
        entries.append(_kernel_entry(f"{prefix}/conv_proj", layer.conv_proj))
        entries.extend(_norm_entries(f"{prefix}/gn_proj", layer.gn_proj))
    return entries


def load_hybrid_stem(model, arrays):
    """Assigns the stem weights of a hybrid checkpoint alone, through the loader's own mapping.

    Every key, shape, dtype and value is checked before anything is assigned (see
    `keras_vit.weights.mapping.apply_entries`), so a checkpoint that does not fit leaves the
    model untouched.

    Args:
        model: keras.Model. A hybrid keras_vit model (or its stem model).
        arrays: dict str -> array. The checkpoint's tensors, prefixes such as `opt/target/`
            already stripped; keys that are not stem keys are ignored.

    Returns:
        set of str: the stem keys that were loaded.

    Raises:
        CheckpointError: naming every missing key and every shape mismatch.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT("R_tiny", num_classes=2)
    >>> arrays = {key: v.numpy() for key, v in stem_variables(model).items()}
    >>> len(load_hybrid_stem(model, arrays))
    15
    """
    entries = _stem_entries(model)
    keys = {entry.key for entry in entries}
    stem_arrays = {key: value for key, value in arrays.items() if key in keys}
    return set(apply_entries(entries, stem_arrays))
