"""A checkpoint layout's record (`Layout`), and the pieces every layout's mappings and architecture reader share.

A *format* is the kind of file (`.npz`, safetensors, a Hugging Face folder: see
`keras_vit.weights.files.detect_format`); a *layout* is the key naming inside it. Each layout is
one `Layout` record, kept by the module of its ecosystem (`keras_vit.weights.vit_jax_layout`,
`keras_vit.weights.huggingface`, `keras_vit.weights.timm_layout`), plus the layer mappings that
module registers under its name (see `keras_vit.weights.mapping`); `keras_vit.weights.formats`
picks the one that reads a file.

Example:

>>> count_blocks({"blocks.0.x": 0, "blocks.1.x": 0}, r"blocks\.(\d+)\.", "model.safetensors")
2
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable

import numpy as np

from keras_vit.configs import ARCHITECTURE_FIELDS, FAMILY_DEFAULTS
from keras_vit.weights.files import CheckpointError
from keras_vit.weights.mapping import Entry, register_layer_mapping
from keras_vit.weights.resample import resample_position_embedding, resize_patch_kernel, square_grid
from keras_vit.weights.torch_entries import from_torch_linear, reshape_to


@dataclasses.dataclass(frozen=True)
class Layout:
    """One checkpoint ecosystem: its key names and how to read its files.

    Args:
        name: str. "vit_jax", "hf" or "timm"; the layer mappings are registered under it.
        file_format: str. The file kind it comes in: "npz" or "safetensors".
        marker: str. A canonical key every checkpoint of the layout has.
        head_keys: (str, str). Kernel and bias of the classification head.
        pre_logits_keys: (str, str). Kernel and bias of the pre-logits Dense + tanh.
        position_key: str. The learned position embedding.
        interpolation: str. How its own code resamples the position embedding.
        normalize: callable raw tensors -> (tensors, names, source_prefix_tokens).
        architecture: callable (tensors, source_prefix_tokens, config, path) -> dict with every
            field of `keras_vit.configs.ARCHITECTURE_FIELDS`.
        head_dist_keys: (str, str). Kernel and bias of DeiT's distillation head.
    """

    name: str
    file_format: str
    marker: str
    head_keys: tuple
    pre_logits_keys: tuple
    position_key: str
    interpolation: str
    normalize: Callable
    architecture: Callable
    head_dist_keys: tuple = ()

    def read(self, tensors, names, source_prefix, config, path):
        """What a reader returns for canonical `tensors`: (layout, tensors, names, source_prefix_tokens, architecture).

        Args:
            tensors: dict. Canonical key -> array (`normalize`'s).
            names: dict. Canonical key -> the key as in the file.
            source_prefix: int. Position-embedding rows before the patch rows.
            config: dict or None. What the architecture reader takes beside the tensors (a
                config.json, the `.npz` notes).
            path: str. The file it comes from, for messages.
        """
        arch = self.architecture(tensors, source_prefix, config, path)
        return self, tensors, names, source_prefix, {field: arch[field] for field in ARCHITECTURE_FIELDS}


def position_entry(key, encoder, context):
    """The learned position embedding: class-token rows kept apart, the grid resampled."""

    def to_model(array, shape):
        array = array.reshape((1,) + array.shape[-2:])
        source_prefix = context.source_prefix_tokens
        model_prefix = encoder.num_position_prefix_tokens
        if source_prefix > model_prefix:
            raise CheckpointError("the checkpoint has a class-token row but the model has no class token")
        patches = array.shape[1] - source_prefix
        old_grid = context.source_grid
        if old_grid is None or old_grid[0] * old_grid[1] != patches:
            old_grid = square_grid(patches, f"the position embedding (after {source_prefix} prefix rows)")
        new_grid = tuple(encoder.grid_size)
        if old_grid != new_grid:
            context.log(
                f"Resampling the position embedding from a {old_grid[0]}x{old_grid[1]} to a "
                f"{new_grid[0]}x{new_grid[1]} grid ({context.interpolation})."
            )
            array = resample_position_embedding(array, new_grid, old_grid, source_prefix, context.interpolation)
        if model_prefix > source_prefix:
            # big_vision adds no position to the class token: a zero row is the same model.
            array = np.concatenate([np.zeros((1, model_prefix - source_prefix, array.shape[-1]), array.dtype), array], 1)
        return array

    def from_model(array):
        # The layout stores `source_prefix_tokens` rows before the patch rows; a model that adds
        # no position to its prefix tokens writes zero rows there (the same model).
        missing = context.source_prefix_tokens - encoder.num_position_prefix_tokens
        if missing < 0:
            raise CheckpointError(
                f"the model has position rows for {encoder.num_position_prefix_tokens} prefix tokens; the "
                f"{context.layout} layout stores {context.source_prefix_tokens}"
            )
        return np.concatenate([np.zeros((1, missing, array.shape[-1]), array.dtype), array], 1) if missing else array

    return Entry(key, encoder.pos_embedding, to_model, from_model)


# What says that a patch encoder has each of its optional variables (`embedding_entries`' keys).
_EMBEDDING_FLAGS = {"bias": "use_bias", "cls": "class_token", "dist": "distillation_token", "registers": "num_register_tokens"}


def embedding_entries(layer, context, kernel, position_key, **keys):
    """A patch encoder's entries: the patch kernel's (`kernel`), its other variables by a layout's keys, its positions.

    Args:
        layer: `keras_vit.layers.PatchEncoder` or `NaFlexPatchEncoder`.
        context: `keras_vit.weights.mapping.MappingContext`.
        kernel: `Entry`. The patch kernel's (`patch_kernel_entry`).
        position_key: str. The learned position embedding's key (`Layout.position_key`).
        **keys: the layout's key of each of "bias", "cls", "dist", "registers" that it stores,
            a str or (str, to_model); the layer's variable is mapped where the layer has it.
    """
    entries = [kernel]
    for name, key in keys.items():
        if getattr(layer, _EMBEDDING_FLAGS[name]):
            key, *to_model = key if isinstance(key, tuple) else (key,)
            entries.append(Entry(key, getattr(layer, name), *to_model))
    if layer.position_embedding == "learned":
        entries.append(position_entry(position_key, layer, context))
    return entries


def patch_kernel_entry(key, encoder, context, to_hwio=None, from_hwio=None):
    """The patch-embedding kernel, resized with FlexiViT's pseudo-inverse when the patch sizes differ."""

    def to_model(array, shape):
        array = to_hwio(array, shape) if to_hwio is not None else array
        if array.ndim == 4 and array.shape[0] == array.shape[1] and array.shape[2:] == tuple(shape[2:]) \
                and array.shape[0] != shape[0]:
            context.log(f"Resizing the {array.shape[0]}x{array.shape[0]} patch kernel to {shape[0]}x{shape[1]} "
                        "(FlexiViT pseudo-inverse resize).")
            array = resize_patch_kernel(array, shape[0])
        return array

    return Entry(key, encoder.kernel, to_model, from_hwio or (lambda array: array))


def attention_parts(layer):
    """{"query"|"key"|"value"|"out": (kernel, bias)} of a TransformerBlock's attention."""
    # A TransformerBlock keeps them in its attention layer; AttentionPooling holds them itself.
    parts = (layer.attention if hasattr(layer, "attention") else layer).projections()
    parts["out"] = parts.pop("output")
    return parts


def block_index(layer):
    match = re.fullmatch(r"encoderblock_(\d+)", layer.name)
    if not match:
        raise CheckpointError(f"TransformerBlock {layer.name!r} is not named encoderblock_<i>.")
    return int(match.group(1))


def register_top(layout, torch_linear):
    """The head and pre-logits Dense layers of `layout`, keys from its record."""
    for layer_name, keys in (("head", layout.head_keys), ("pre_logits", layout.pre_logits_keys),
                             ("head_dist", layout.head_dist_keys)):
        if not keys:
            continue
        kernel_key, bias_key = keys

        def fn(layer, context, kernel_key=kernel_key, bias_key=bias_key):
            to_model = from_torch_linear if torch_linear else reshape_to
            return [Entry(kernel_key, layer.kernel, to_model, (lambda a: a.T) if torch_linear else (lambda a: a)),
                    Entry(bias_key, layer.bias)]

        register_layer_mapping(layout.name, layer_name, fn)


def qkv_bias_of(tensors, query_bias, key_bias, value_bias):
    """Which attention projections the tensors give a bias ("qkv", "qv", "none"), read at block 0."""
    if key_bias in tensors:
        return "qkv"
    return "qv" if query_bias in tensors and value_bias in tensors else "none"


def require(tensors, key, path):
    if key not in tensors:
        raise CheckpointError(f"Checkpoint {path!r} has no {key!r}: it does not look like a ViT checkpoint.")
    return tensors[key]


def count_blocks(tensors, pattern, path):
    indices = {int(m.group(1)) for m in (re.match(pattern, key) for key in tensors) if m}
    if indices != set(range(len(indices))):
        raise CheckpointError(f"Checkpoint {path!r}: block indices {sorted(indices)} are not 0..{len(indices) - 1}.")
    return len(indices)


def with_top(arch, tensors, layout, source_prefix, grid=None, path=""):
    """Adds num_classes, representation_size, position_embedding and grid_size from the tensors."""
    arch["num_classes"] = int(tensors[layout.head_keys[1]].shape[0]) if layout.head_keys[1] in tensors else None
    pre_logits = layout.pre_logits_keys[1]
    arch["representation_size"] = int(tensors[pre_logits].shape[0]) if pre_logits in tensors else None
    if layout.position_key in tensors:
        patches = int(tensors[layout.position_key].shape[-2]) - source_prefix
        if grid is not None and grid[0] * grid[1] != patches:
            raise CheckpointError(
                f"Checkpoint {path!r}: {layout.position_key!r} has {patches} patch rows but the config's "
                f"image and patch sizes make a {grid[0]}x{grid[1]} grid."
            )
        arch["grid_size"] = grid or square_grid(patches)
        arch["position_embedding"] = "learned"
    else:
        # No stored embedding: "none" and "sincos2d" (fixed, computed) look the same in a file,
        # unless the family says which (DINOv3: none, its position is rotary).
        arch["grid_size"] = grid
        arch.setdefault("position_embedding", None)
    arch.setdefault("stem", None)
    arch.setdefault("stem_width", None)
    for field, value in FAMILY_DEFAULTS.items():  # what the layout's tensors did not say otherwise
        arch.setdefault(field, value)
    return arch
