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

from keras_vit.weights.mapping import Entry, register_layer_mapping

STEM_LAYER = "resnet"
_NORM_PARAMS = (("scale", "gamma"), ("bias", "beta"))


def find_stem(model):
    """Returns the BiT ResNet stem (the nested model "resnet") of a hybrid, or None."""
    names = [layer.name for layer in model.layers]
    return model.get_layer(STEM_LAYER) if STEM_LAYER in names else None


def stem_variables(model):
    """Maps each stem key of the checkpoints (no prefix) to the model variable it fills.

    Args:
        model: keras.Model. A hybrid keras_vit model, or the stem model itself.

    Returns:
        dict key -> keras.Variable; GroupNorm variables are (C,), kernels HWIO.
    """
    stem = find_stem(model) or model
    mapping = {}

    def norm(prefix, layer):
        for key, attr in _NORM_PARAMS:
            mapping[f"{prefix}/{key}"] = getattr(layer, attr)

    for layer in stem.layers:
        if layer.name == "conv_root":
            mapping["conv_root/kernel"] = layer.kernel
        elif layer.name == "gn_root":
            norm("gn_root", layer)
        elif layer.name.startswith("block") and "_unit" in layer.name:
            prefix = layer.name.replace("_unit", "/unit")
            for i in (1, 2, 3):
                mapping[f"{prefix}/conv{i}/kernel"] = getattr(layer, f"conv{i}").kernel
                norm(f"{prefix}/gn{i}", getattr(layer, f"gn{i}"))
            if layer.conv_proj is not None:
                mapping[f"{prefix}/conv_proj/kernel"] = layer.conv_proj.kernel
                norm(f"{prefix}/gn_proj", layer.gn_proj)
    if "conv_root/kernel" not in mapping:
        raise ValueError(
            f"Model {model.name!r} has no BiT ResNet stem (a nested model named {STEM_LAYER!r} with "
            "layers conv_root, gn_root, block{s}_unit{u}); only the hybrid variants have one."
        )
    return mapping


def to_model_layout(key, array, shape):
    """Brings one checkpoint array to the model's layout: GroupNorm (1, 1, 1, C) becomes (C,)."""
    array = np.asarray(array)
    if len(shape) == 1 and array.ndim == 4 and array.shape[:3] == (1, 1, 1):
        array = array.reshape(array.shape[-1])
    return array


def npz_stem_architecture(tensors):
    """Stem arguments implied by canonical `.npz` tensors: {} for a plain ViT.

    Returns stem (units per stage), stem_width, channels and stem_stride (pixels per feature-map
    cell) when the file has `conv_root/kernel`.
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
        "stem_stride": 4 * 2 ** max(len(depths) - 1, 0),
    }


def _norm_to_model(array, shape):
    return to_model_layout("", array, shape)


def _kernel_entry(key, layer):
    return Entry(f"{key}/kernel", layer.kernel)


def _norm_entries(key, layer):
    return [Entry(f"{key}/{name}", getattr(layer, attr), _norm_to_model) for name, attr in _NORM_PARAMS]


# The generic loader and save_npz walk the nested "resnet" model and ask these for its layers.
@register_layer_mapping("npz", "conv_root")
def _npz_conv_root(layer, context):
    return [_kernel_entry("conv_root", layer)]


@register_layer_mapping("npz", "gn_root")
def _npz_gn_root(layer, context):
    return _norm_entries("gn_root", layer)


@register_layer_mapping("npz", "BottleneckUnit")
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
    """Assigns the stem weights of a hybrid `.npz` checkpoint; returns the set of keys it consumed.

    Every key and shape is checked before anything is assigned, so a checkpoint that does not
    fit leaves the model untouched.

    Args:
        model: keras.Model. A hybrid keras_vit model (or its stem model).
        arrays: dict str -> array. The checkpoint's tensors, prefixes such as `opt/target/`
            already stripped; keys that are not stem keys are ignored.

    Returns:
        set of str: the stem keys that were loaded.

    Raises:
        ValueError: naming every missing key and every shape mismatch.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT("R_tiny", num_classes=2)
    >>> arrays = {key: v.numpy() for key, v in stem_variables(model).items()}
    >>> len(load_hybrid_stem(model, arrays))
    15
    """
    variables = stem_variables(model)
    missing = sorted(key for key in variables if key not in arrays)
    ready, mismatched = [], []
    for key, variable in variables.items():
        if key not in arrays:
            continue
        shape = tuple(variable.shape)
        value = to_model_layout(key, arrays[key], shape)
        if tuple(value.shape) != shape:
            mismatched.append(f"{key}: expected {shape}, found {tuple(np.shape(arrays[key]))}")
            continue
        ready.append((variable, value))
    if missing or mismatched:
        problems = []
        if missing:
            problems.append(f"{len(missing)} missing stem keys: {', '.join(missing[:10])}" + (" ..." if len(missing) > 10 else ""))
        if mismatched:
            problems.append(f"{len(mismatched)} stem shape mismatches: {'; '.join(mismatched[:10])}")
        raise ValueError("The checkpoint's ResNet stem does not fit the model: " + ". ".join(problems) + ".")
    for variable, value in ready:
        variable.assign(value.astype(variable.dtype, copy=False))
    return set(variables)
