"""The three checkpoint layouts keras_vit reads: vit_jax (Google `.npz`), Hugging Face and timm.

A *format* is the kind of file (`.npz`, safetensors, a Hugging Face folder: see
`keras_vit.weights.files.detect_format`); a *layout* is the key naming inside it. Each layout is
ONE record of `LAYOUTS` (key names of the head, pre-logits and position embedding, its default
interpolation, the reader that brings its keys to canonical names, and the function that reads
the architecture) plus the layer mappings registered under its name (see
`keras_vit.weights.mapping`).

vit_jax `.npz` (vit_jax, AugReg, big_vision). Canonical keys are the pre-Linen names without
prefix: `embedding/kernel`, `cls`, `Transformer/posembed_input/pos_embedding`,
`Transformer/encoderblock_{i}/{LayerNorm_0, MultiHeadDotProductAttention_1/{query,key,value,out},
LayerNorm_2, MlpBlock_3/Dense_{0,1}}/...`, `Transformer/encoder_norm/...`, `pre_logits/...`,
`head/...`. On reading, the `opt/target/` and `params/` prefixes are dropped, Linen names
(`MultiHeadDotProductAttention_0`, `LayerNorm_1`, `MlpBlock_0`) are renamed, blocks stacked along
a leading depth axis under `Transformer/encoderblock/` are split, and big_vision's top-level
`pos_embedding` (no class-token row) moves to the canonical place. Messages name the file's keys.

Extension point for extra stem layers (e.g. a hybrid ResNet root before `embedding`): register
a function for the stem layer's class or name,
`register_layer_mapping("vit_jax", "MyStem", fn)` with `fn(layer, context) -> [Entry(key,
layer_variable, to_model, from_model), ...]`, keys as written in the file without prefix
(`conv_root/kernel`, `block1/unit1/gn1/scale`, ...); the walker calls it because the stem is
one of the model's named layers, and `save_npz` writes the same keys back.

Example:

>>> LAYOUTS["timm"].head_keys, LAYOUTS["vit_jax"].interpolation
(('head.weight', 'head.bias'), 'bilinear')
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from typing import Callable

import numpy as np

from keras_vit.configs import ARCHITECTURE_FIELDS, FAMILY_DEFAULTS, fold_pooling_fields
from keras_vit.layers.naflex_patch_encoder import NAFLEX_INTERPOLATION
from keras_vit.layers.rotary_embedding import rope_settings
from keras_vit.weights.files import (
    WEIGHTS_FILE, CheckpointError, read_json_object, read_npz, read_safetensors, read_weights_folder,
)
from keras_vit.weights.hybrid import npz_stem_architecture
from keras_vit.weights.mapping import Entry, register_layer_mapping
from keras_vit.weights.resample import resample_position_embedding, resize_patch_kernel, square_grid
from keras_vit.weights.timm_names import config_architecture


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


# --------------------------------------------------------------------------------------------
# Shared pieces


def _position_entry(key, encoder, context):
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


def _patch_kernel_entry(key, encoder, context, to_hwio=None, from_hwio=None):
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


def _reshape_to(array, shape):
    return array.reshape(shape)


def _torch_linear(array, shape):
    """PyTorch Linear weight (out, in) -> Keras kernel (in, out) reshaped to the variable."""
    return array.T.reshape(shape)


def _linear_entry(key, kernel, in_axes=1):
    """A PyTorch Linear weight feeding a kernel whose first `in_axes` axes are its inputs."""
    return Entry(key, kernel, _torch_linear, lambda array: _to_torch_linear(array, in_axes))


def _to_torch_linear(array, in_axes=1):
    """Keras kernel (inputs..., outputs...) -> PyTorch Linear weight (out, in)."""
    return array.reshape(math.prod(array.shape[:in_axes]), -1).T


def _flat(array):
    return array.reshape(-1)


def _torch_conv(array, shape):
    """PyTorch Conv2d weight OIHW -> Keras kernel HWIO."""
    return array.transpose(2, 3, 1, 0)


def _torch_patch_kernel(array, shape):
    """A PyTorch patch projection -> Keras kernel HWIO: a Conv2d weight OIHW, or SigLIP 2's Linear weight
    (out, P*P*C) on patches flattened in (row, column, channel) order."""
    if array.ndim != 2:
        return _torch_conv(array, shape)
    channels = shape[2]
    side = math.isqrt(array.shape[1] // channels)
    if side * side * channels != array.shape[1]:
        return array  # no square patch of the model's channels: apply_entries reports the shapes
    return array.T.reshape(side, side, channels, array.shape[0])


def _keras_conv_to_torch(array):
    return array.transpose(3, 2, 0, 1)


def _attention(layer):
    """{"query"|"key"|"value"|"out": (kernel, bias)} of a TransformerBlock's attention."""
    # A TransformerBlock keeps them in its attention layer; AttentionPooling holds them itself.
    parts = (layer.attention if hasattr(layer, "attention") else layer).projections()
    parts["out"] = parts.pop("output")
    return parts


def _block_index(layer):
    match = re.fullmatch(r"encoderblock_(\d+)", layer.name)
    if not match:
        raise CheckpointError(f"TransformerBlock {layer.name!r} is not named encoderblock_<i>.")
    return int(match.group(1))


def _register_top(layout, torch_linear):
    """The head and pre-logits Dense layers of `layout`, keys from its record."""
    for layer_name, keys in (("head", layout.head_keys), ("pre_logits", layout.pre_logits_keys),
                             ("head_dist", layout.head_dist_keys)):
        if not keys:
            continue
        kernel_key, bias_key = keys

        def fn(layer, context, kernel_key=kernel_key, bias_key=bias_key):
            to_model = _torch_linear if torch_linear else _reshape_to
            return [Entry(kernel_key, layer.kernel, to_model, (lambda a: a.T) if torch_linear else (lambda a: a)),
                    Entry(bias_key, layer.bias)]

        register_layer_mapping(layout.name, layer_name, fn)


def _qkv_bias(tensors, query_bias, key_bias, value_bias):
    """Which attention projections the tensors give a bias ("qkv", "qv", "none"), read at block 0."""
    if key_bias in tensors:
        return "qkv"
    return "qv" if query_bias in tensors and value_bias in tensors else "none"


def _require(tensors, key, path):
    if key not in tensors:
        raise CheckpointError(f"Checkpoint {path!r} has no {key!r}: it does not look like a ViT checkpoint.")
    return tensors[key]


def _count_blocks(tensors, pattern, path):
    indices = {int(m.group(1)) for m in (re.match(pattern, key) for key in tensors) if m}
    if indices != set(range(len(indices))):
        raise CheckpointError(f"Checkpoint {path!r}: block indices {sorted(indices)} are not 0..{len(indices) - 1}.")
    return len(indices)


def _with_top(arch, tensors, layout, source_prefix, grid=None, path=""):
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


# --------------------------------------------------------------------------------------------
# vit_jax (Google .npz)


@register_layer_mapping("vit_jax", "PatchEncoder")
def _npz_embedding(layer, context):
    entries = [_patch_kernel_entry("embedding/kernel", layer, context), Entry("embedding/bias", layer.bias)]
    if layer.class_token:
        entries.append(Entry("cls", layer.cls))
    if layer.position_embedding == "learned":
        entries.append(_position_entry(LAYOUTS["vit_jax"].position_key, layer, context))
    return entries


@register_layer_mapping("vit_jax", "TransformerBlock")
def _npz_block(layer, context):
    prefix = f"Transformer/encoderblock_{_block_index(layer)}/"
    entries = []
    for norm, name in ((layer.norm1, "LayerNorm_0"), (layer.norm2, "LayerNorm_2")):
        entries += [Entry(prefix + name + "/scale", norm.gamma), Entry(prefix + name + "/bias", norm.beta)]
    for part, (kernel, bias) in _attention(layer).items():
        key = prefix + "MultiHeadDotProductAttention_1/" + part
        entries += [Entry(key + "/kernel", kernel)] + ([Entry(key + "/bias", bias)] if bias is not None else [])
    for i, dense in enumerate((layer.mlp_dense_0, layer.mlp_dense_1)):
        key = prefix + f"MlpBlock_3/Dense_{i}"
        entries += [Entry(key + "/kernel", dense.kernel), Entry(key + "/bias", dense.bias)]
    return entries


@register_layer_mapping("vit_jax", "AttentionPooling")
def _npz_attention_pooling(layer, context):
    """big_vision's MAPHead (SigLIP): probe, attention, LayerNorm, MLP."""
    entries = [Entry("MAPHead_0/probe", layer.probe)]
    for part, (kernel, bias) in _attention(layer).items():
        key = "MAPHead_0/MultiHeadDotProductAttention_0/" + part
        entries += [Entry(key + "/kernel", kernel), Entry(key + "/bias", bias)]
    entries += [Entry("MAPHead_0/LayerNorm_0/scale", layer.norm.gamma), Entry("MAPHead_0/LayerNorm_0/bias", layer.norm.beta)]
    for i, dense in enumerate((layer.mlp_dense_0, layer.mlp_dense_1)):
        entries += [Entry(f"MAPHead_0/MlpBlock_0/Dense_{i}/kernel", dense.kernel),
                    Entry(f"MAPHead_0/MlpBlock_0/Dense_{i}/bias", dense.bias)]
    return entries


@register_layer_mapping("vit_jax", "encoder_norm")
def _npz_encoder_norm(layer, context):
    return [Entry("Transformer/encoder_norm/scale", layer.gamma), Entry("Transformer/encoder_norm/bias", layer.beta)]


_LINEN_RENAMES = {
    "MultiHeadDotProductAttention_0": "MultiHeadDotProductAttention_1",
    "LayerNorm_1": "LayerNorm_2",
    "MlpBlock_0": "MlpBlock_3",
}


def normalize_npz(raw):
    """Brings the keys of any known `.npz` layout to the canonical pre-Linen names.

    Returns (tensors, names, source_prefix_tokens): canonical key -> array, canonical key ->
    name in the file, and how many leading rows of the position embedding are not patches.
    """
    tensors, names = {}, {}
    top_level_posemb = False
    # big_vision's two-tower checkpoints (SigLIP, LiT) keep the image tower under img/.
    two_towers = any(key.split("/")[:2] in (["params", "img"], ["img"]) for key in raw)
    for original, array in raw.items():
        key = original
        for prefix in ("opt/target/", "params/"):
            if key.startswith(prefix):
                key = key[len(prefix):]
                break
        if two_towers:
            if not key.startswith("img/"):
                continue  # the text tower and the temperature/bias scalars
            key = key[len("img/"):]
        if key == "pos_embedding":
            key, top_level_posemb = "Transformer/posembed_input/pos_embedding", True
        parts = key.split("/")
        if len(parts) > 2 and parts[0] == "Transformer" and parts[1].startswith("encoderblock"):
            parts[2] = _LINEN_RENAMES.get(parts[2], parts[2])
        if len(parts) > 2 and parts[:2] == ["Transformer", "encoderblock"]:
            # Blocks stacked along a leading depth axis (big_vision scan): one key per block.
            for i in range(array.shape[0]):
                split = "/".join(["Transformer", f"encoderblock_{i}"] + parts[2:])
                tensors[split], names[split] = array[i], f"{original}[{i}]"
            continue
        key = "/".join(parts)
        if key in tensors:
            raise CheckpointError(f"Keys {names[key]!r} and {original!r} both map to {key!r}.")
        tensors[key], names[key] = array, original
    source_prefix = 0 if top_level_posemb or "cls" not in tensors else 1
    return tensors, names, source_prefix


# Keys of what save_npz records beside the weights that the vit_jax layout does not say: the GELU form
# and the LayerNorm epsilon of the model it wrote (without them a round trip changed the model).
NPZ_NOTES = "keras_vit/"


def npz_architecture(tensors, source_prefix, config, path):
    """Every architecture field of a canonical vit_jax checkpoint, read from its keys and shapes.

    `config`: the `NPZ_NOTES` arrays of the file (save_npz's), or None.
    """
    kernel = _require(tensors, "embedding/kernel", path)
    block = "Transformer/encoderblock_0/"
    class_token = "cls" in tensors
    arch = {
        "patch_size": int(kernel.shape[0]),
        "hidden_size": int(kernel.shape[-1]),
        "num_layers": _count_blocks(tensors, r"Transformer/encoderblock_(\d+)/", path),
        "num_heads": int(_require(tensors, block + "MultiHeadDotProductAttention_1/query/kernel", path).shape[1]),
        "mlp_dim": int(_require(tensors, block + "MlpBlock_3/Dense_0/kernel", path).shape[1]),
        "channels": int(kernel.shape[2]),
        "class_token": class_token,
        # vit_jax: classifier="token" reads the class token; "gap" (no `cls` param) the mean.
        "pooling": "map" if "MAPHead_0/probe" in tensors else "token" if class_token else "gap",
        # The original checkpoints' (vit_jax, big_vision); a file save_npz wrote says its own.
        "approximate_gelu": True,
        "layer_norm_epsilon": 1e-6,
    }
    for field, kind in (("approximate_gelu", "flag"), ("layer_norm_epsilon", "positive"), ("naflex", "flag")):
        if NPZ_NOTES + field in (config or {}):
            value = config[NPZ_NOTES + field]
            value = value.item() if isinstance(value, np.ndarray) and value.shape == () else value
            arch[field] = config_value({field: value}, field, path, kind)
    attention = block + "MultiHeadDotProductAttention_1/"
    arch["qkv_bias"] = _qkv_bias(tensors, *(attention + part + "/bias" for part in ("query", "key", "value")))
    arch.update(npz_stem_architecture(tensors))
    return _with_top(arch, tensors, LAYOUTS["vit_jax"], source_prefix, path=path)


# --------------------------------------------------------------------------------------------
# Hugging Face transformers (ViTModel / ViTForImageClassification)


@register_layer_mapping("hf", "PatchEncoder")
def _hf_embedding(layer, context):
    entries = [_patch_kernel_entry("embeddings.patch_embeddings.projection.weight", layer, context,
                                   _torch_patch_kernel, _keras_conv_to_torch)]
    if layer.use_bias:
        entries.append(Entry("embeddings.patch_embeddings.projection.bias", layer.bias))
    if layer.class_token:
        entries.append(Entry("embeddings.cls_token", layer.cls, _reshape_to))  # CLIP stores it as (D,)
    if layer.distillation_token:
        entries.append(Entry("embeddings.distillation_token", layer.dist))
    if layer.num_register_tokens:
        entries.append(Entry("embeddings.register_tokens", layer.registers))
    if layer.position_embedding == "learned":
        entries.append(_position_entry(LAYOUTS["hf"].position_key, layer, context))
    return entries


def _layer_scale_entries(layer, keys):
    if layer.layer_scale_1 is None:
        return []
    return [Entry(keys[0], layer.layer_scale_1.gamma), Entry(keys[1], layer.layer_scale_2.gamma)]


def _fused_attention_entries(parts, qkv_weight, qkv_bias, out_prefix, split_kv=False):
    """Query, key and value fused in one PyTorch Linear (or query apart and key-value fused)."""
    entries = []
    names = ("key", "value") if split_kv else ("query", "key", "value")
    for index, part in enumerate(names):
        weight, bias = _fused_part(index, len(names))
        # Writers concatenate the entries of one key along axis 0, in this order.
        entries.append(Entry(qkv_weight, parts[part][0], weight, _to_torch_linear))
        if parts[part][1] is not None:
            entries.append(Entry(qkv_bias, parts[part][1], bias, _flat))
    return entries + [
        _linear_entry(out_prefix + ".weight", parts["out"][0], in_axes=2),
        Entry(out_prefix + ".bias", parts["out"][1]),
    ]


def _norm_entries(norm, key, scale="weight", bias="bias"):
    return [Entry(f"{key}.{scale}", norm.gamma), Entry(f"{key}.{bias}", norm.beta)]


def _dense_entries(dense, key):
    entries = [_linear_entry(key + ".weight", dense.kernel)]
    if dense.use_bias:
        entries.append(Entry(key + ".bias", dense.bias))
    return entries


@register_layer_mapping("hf", "AttentionPooling")
def _hf_attention_pooling(layer, context):
    parts = _attention(layer)
    return (
        [Entry("head.probe", layer.probe)]
        + _fused_attention_entries(parts, "head.attention.in_proj_weight", "head.attention.in_proj_bias",
                                   "head.attention.out_proj")
        + _norm_entries(layer.norm, "head.layernorm")
        + _dense_entries(layer.mlp_dense_0, "head.mlp.fc1") + _dense_entries(layer.mlp_dense_1, "head.mlp.fc2")
    )


# A NaFlex model's encoder holds PatchEncoder's variables under the same names (the timm layout
# has no NaFlex model: its key names are not mapped).
register_layer_mapping("vit_jax", "NaFlexPatchEncoder", _npz_embedding)
register_layer_mapping("hf", "NaFlexPatchEncoder", _hf_embedding)
register_layer_mapping("hf", "pre_norm", lambda layer, context: _norm_entries(layer, "pre_layernorm"))
register_layer_mapping("hf", "projection", lambda layer, context: _dense_entries(layer, "visual_projection"))


@register_layer_mapping("hf", "TransformerBlock")
def _hf_block(layer, context):
    prefix = f"encoder.layer.{_block_index(layer)}."
    parts = _attention(layer)
    keys = {
        "query": "attention.attention.query", "key": "attention.attention.key",
        "value": "attention.attention.value", "out": "attention.output.dense",
    }
    entries = []
    for norm, name in ((layer.norm1, "layernorm_before"), (layer.norm2, "layernorm_after")):
        entries += [Entry(prefix + name + ".weight", norm.gamma), Entry(prefix + name + ".bias", norm.beta)]
    for part, (kernel, bias) in parts.items():
        entries.append(_linear_entry(prefix + keys[part] + ".weight", kernel, in_axes=2 if part == "out" else 1))
        if bias is not None:
            entries.append(Entry(prefix + keys[part] + ".bias", bias, _reshape_to, _flat))
    # DINOv2's SwiGLU MLP (gate and value packed in one Linear, gate first) has names of its own.
    mlp = ("mlp.weights_in", "mlp.weights_out") if layer.mlp_activation == "swiglu" else ("intermediate.dense", "output.dense")
    for dense, name in zip((layer.mlp_dense_0, layer.mlp_dense_1), mlp):
        entries += _dense_entries(dense, prefix + name)
    return entries + _layer_scale_entries(layer, (prefix + "layer_scale1.lambda1", prefix + "layer_scale2.lambda1"))


register_layer_mapping("hf", "encoder_norm", lambda layer, context: [
    Entry("layernorm.weight", layer.gamma), Entry("layernorm.bias", layer.beta)])


@dataclasses.dataclass(frozen=True)
class HFFamily:
    """How one Hugging Face `model_type` names a ViT's tensors and states its architecture.

    Every family's keys are renamed to the canonical Hugging Face ViT names (plus the names of
    the parts ViT lacks: `embeddings.distillation_token`, `embeddings.register_tokens`,
    `encoder.layer.{i}.layer_scale{1,2}.lambda1`, `encoder.layer.{i}.mlp.weights_{in,out}`
    (SwiGLU), `pre_layernorm`, `head.*` (attention pooling), `visual_projection`,
    `classifier_dist`), so one set of layer mappings reads them all, and `save_hf` writes them
    back through the same table.

    Args:
        prefixes: tuple of str. Leading parts dropped from every key (e.g. "vision_model."); a
            writer puts the first back on the backbone's keys.
        renames: tuple of (file name, canonical name) or (file name, canonical name, file
            rank). Two-way: "{i}" stands for a block index, a name ending in "." for every key
            it starts, else one key; the rank, when given, is the number of axes the family
            stores the tensor with (CLIP's class embedding (D,), not (1, 1, D)).
        ignored: tuple of regex. Keys of other towers or of training only (CLIP's text
            model, DINOv2's mask token) that are not read.
        source_prefix: int. Position-embedding rows before the patch rows.
        defaults: dict. The family config class's defaults for keys a config.json may omit.
        architecture: callable (tensors, config, path) -> dict of the fields it states.
        refused: tuple of (key, why). Tensors of a head keras_vit does not build.
        vision_key: str or None. Where a two-tower config nests the vision config.
        interpolation: str or None. How its own code resamples the position embedding, when
            not as Hugging Face's ViT ("bicubic_hf"). Defaults to None.
        nested: bool. The vision model always sits under `prefixes[0]` (CLIP's and SigLIP's
            `vision_model.`), not only below a task head. Defaults to False.
        regroup: callable (tensors, names) -> None or None. Reader only: joins, in place, the
            canonical tensors the family keeps apart (DINOv3's gated MLP: gate and up
            projections into one packed SwiGLU kernel). Defaults to None.
        activations: dict or None. The config's hidden_act values the family takes ->
            (mlp_activation, approximate_gelu); None takes those of Hugging Face's ViT
            (`_HF_ACTIVATIONS`). Defaults to None.
        ungroup: callable (tensors) -> None or None. Writer only: `regroup` undone, and the
            family's own file layouts restored, in place on the canonical tensors (DINOv3's
            gate and up projections apart, SigLIP 2's patch embedding as a Linear). Defaults
            to None.
    """

    prefixes: tuple
    renames: tuple
    ignored: tuple
    source_prefix: int
    defaults: dict
    architecture: Callable
    refused: tuple = ()
    vision_key: str | None = None
    interpolation: str | None = None
    nested: bool = False
    regroup: Callable | None = None
    activations: dict | None = None
    ungroup: Callable | None = None

    def vision_config(self, config, path):
        """The config a two-tower file's vision tower reads: its `vision_key` object over the top level."""
        nested = config_value(config, self.vision_key, path, "object", None) if self.vision_key else None
        return {**config, **nested} if nested is not None else config


def _vit_family(tensors, config, path):
    return {}


def _deit_family(tensors, config, path):
    return {"distillation_token": True}


def _dinov2_family(tensors, config, path):
    swiglu = config_value(config, "use_swiglu_ffn", path, "flag", False)
    fc1 = _require(tensors, f"encoder.layer.0.{'mlp.weights_in' if swiglu else 'intermediate.dense'}.weight", path)
    scale = config_value(config, "layerscale_value", path, "positive", 1.0)
    fields = {
        # Dinov2ForImageClassification's head reads the class token and the mean patch token.
        "pooling": "token_and_mean" if "classifier.weight" in tensors else "token",
        "mlp_dim": int(fc1.shape[0]) // (2 if swiglu else 1),
        "layer_scale_init": float(scale) if "encoder.layer.0.layer_scale1.lambda1" in tensors else None,
        "num_register_tokens": config_value(config, "num_register_tokens", path, "count", 0),
    }
    if swiglu:
        fields["mlp_activation"] = "swiglu"
    return fields


# DINOv3's query_bias, key_bias, value_bias (config.json) -> keras_vit's qkv_bias.
DINOV3_QKV_BIASES = {(True, True, True): "qkv", (True, False, True): "qv", (False, False, False): "none"}


def _dinov3_family(tensors, config, path):
    gated = config_value(config, "use_gated_mlp", path, "flag", False)
    if gated != (config_value(config, "hidden_act", path, "name", "gelu") == "silu"):
        raise CheckpointError(
            f"Hugging Face config {path!r}: use_gated_mlp={gated} with hidden_act="
            f"{config.get('hidden_act', 'gelu')!r}; keras_vit builds DINOv3's gated MLP with SiLU (SwiGLU) and its "
            "plain MLP with GELU."
        )
    keys = (("query_bias", True), ("key_bias", False), ("value_bias", True))
    biases = tuple(config_value(config, key, path, "flag", default) for key, default in keys)
    if biases not in DINOV3_QKV_BIASES:
        stated = ", ".join(f"{key}={value}" for (key, _), value in zip(keys, biases))
        raise CheckpointError(
            f"Hugging Face config {path!r}: {stated}; keras_vit builds biases on all three, on query and value, or "
            "on none."
        )
    for key in ("proj_bias", "mlp_bias"):
        config_value(config, key, path, (True,), True)
    theta = config_value(config, "rope_theta", path, "positive", 100.0)
    fields = {
        "pooling": "token",  # DINOv3ViTModel's pooler_output: the class token after the final norm
        "position_embedding": "none",
        "prefix_position_embedding": False,
        "rope": rope_settings({"variant": "dinov3", "theta": theta}),
        "qkv_bias": DINOV3_QKV_BIASES[biases],
        "num_register_tokens": config_value(config, "num_register_tokens", path, "count", 0),
        "layer_scale_init": float(config_value(config, "layerscale_value", path, "positive", 1.0)),
    }
    if gated:
        fields["mlp_activation"] = "swiglu"
    return fields


def _dinov3_gated_mlp(tensors, names):
    """A gated MLP's gate and up projections packed as DINOv2's SwiGLU (gate first), its down projection renamed."""
    for key in [key for key in tensors if re.fullmatch(r"encoder\.layer\.\d+\.mlp\.gate\.(weight|bias)", key)]:
        block, kind = key.rsplit(".mlp.gate.", 1)
        up, down = f"{block}.intermediate.dense.{kind}", f"{block}.output.dense.{kind}"
        if up not in tensors:
            raise CheckpointError(f"Checkpoint has {names[key]!r} but no up projection beside it ({up!r}).")
        packed = f"{block}.mlp.weights_in.{kind}"
        tensors[packed] = np.concatenate([np.asarray(tensors.pop(key)), np.asarray(tensors.pop(up))], axis=0)
        names[packed] = f"{names.pop(key)} + {names.pop(up)}"
        if down in tensors:
            tensors[f"{block}.mlp.weights_out.{kind}"] = tensors.pop(down)
            names[f"{block}.mlp.weights_out.{kind}"] = names.pop(down)


def _dinov3_split_mlp(tensors):
    """`_dinov3_gated_mlp` undone: a packed SwiGLU's first half the gate, its second the up projection."""
    for key in [key for key in tensors if re.fullmatch(r"encoder\.layer\.\d+\.mlp\.weights_(in|out)\.(weight|bias)", key)]:
        block, rest = key.split(".mlp.weights_", 1)
        part, kind = rest.split(".")
        array = tensors.pop(key)
        if part == "out":
            tensors[f"{block}.output.dense.{kind}"] = array
        else:
            gate, up = np.split(np.asarray(array), 2, axis=0)
            tensors[f"{block}.mlp.gate.{kind}"], tensors[f"{block}.intermediate.dense.{kind}"] = gate, up


def _siglip2_linear_patches(tensors):
    """The patch kernel as SigLIP 2 stores it: a Linear (out, P*P*C) on patches in (row, column, channel) order."""
    key = "embeddings.patch_embeddings.projection.weight"
    kernel = np.asarray(tensors[key])  # a Conv2d weight (out, C, P, P)
    tensors[key] = kernel.transpose(0, 2, 3, 1).reshape(kernel.shape[0], -1)


def _siglip_family(tensors, config, path):
    return {"class_token": False, "pooling": "map" if "head.probe" in tensors else None}


def _siglip2_family(tensors, config, path):
    """SigLIP 2 NaFlex: SigLIP's tower on patch sequences, its position grid stated as num_patches (side x side)."""
    patches = config_value(config, "num_patches", path, "size", 256)
    grid = square_grid(patches)
    if grid is None:
        raise CheckpointError(f"Hugging Face config {path!r}: num_patches is {patches!r}; expected a square number "
                              "(the position grid is side x side).")
    return {**_siglip_family(tensors, config, path), "naflex": True, "grid_size": grid}


def _clip_family(tensors, config, path):
    projection = tensors.get("visual_projection.weight")
    return {
        "pre_norm": True, "patch_bias": False,
        "projection_size": int(projection.shape[0]) if projection is not None else None,
    }


_CLIP_LIKE_RENAMES = (
    ("embeddings.patch_embedding.", "embeddings.patch_embeddings.projection."),
    ("embeddings.position_embedding.weight", "embeddings.position_embeddings", 2),
    ("embeddings.class_embedding", "embeddings.cls_token", 1),
    ("pre_layrnorm.", "pre_layernorm."),
    ("encoder.layers.{i}.layer_norm1.", "encoder.layer.{i}.layernorm_before."),
    ("encoder.layers.{i}.layer_norm2.", "encoder.layer.{i}.layernorm_after."),
    ("encoder.layers.{i}.self_attn.q_proj.", "encoder.layer.{i}.attention.attention.query."),
    ("encoder.layers.{i}.self_attn.k_proj.", "encoder.layer.{i}.attention.attention.key."),
    ("encoder.layers.{i}.self_attn.v_proj.", "encoder.layer.{i}.attention.attention.value."),
    ("encoder.layers.{i}.self_attn.out_proj.", "encoder.layer.{i}.attention.output.dense."),
    ("encoder.layers.{i}.mlp.fc1.", "encoder.layer.{i}.intermediate.dense."),
    ("encoder.layers.{i}.mlp.fc2.", "encoder.layer.{i}.output.dense."),
    ("post_layernorm.", "layernorm."),
)
_DINOV2_RENAMES = (
    ("encoder.layer.{i}.norm1.", "encoder.layer.{i}.layernorm_before."),
    ("encoder.layer.{i}.norm2.", "encoder.layer.{i}.layernorm_after."),
    ("encoder.layer.{i}.mlp.fc1.", "encoder.layer.{i}.intermediate.dense."),
    ("encoder.layer.{i}.mlp.fc2.", "encoder.layer.{i}.output.dense."),
)
_DINOV3_RENAMES = (
    ("embeddings.patch_embeddings.", "embeddings.patch_embeddings.projection."),
    ("layer.{i}.norm1.", "encoder.layer.{i}.layernorm_before."),
    ("layer.{i}.norm2.", "encoder.layer.{i}.layernorm_after."),
    ("layer.{i}.attention.q_proj.", "encoder.layer.{i}.attention.attention.query."),
    ("layer.{i}.attention.k_proj.", "encoder.layer.{i}.attention.attention.key."),
    ("layer.{i}.attention.v_proj.", "encoder.layer.{i}.attention.attention.value."),
    ("layer.{i}.attention.o_proj.", "encoder.layer.{i}.attention.output.dense."),
    ("layer.{i}.layer_scale1.", "encoder.layer.{i}.layer_scale1."),
    ("layer.{i}.layer_scale2.", "encoder.layer.{i}.layer_scale2."),
    ("layer.{i}.mlp.up_proj.", "encoder.layer.{i}.intermediate.dense."),
    ("layer.{i}.mlp.down_proj.", "encoder.layer.{i}.output.dense."),
    ("layer.{i}.mlp.gate_proj.", "encoder.layer.{i}.mlp.gate."),
    ("norm.", "layernorm."),
)
_TEXT_TOWER = (r"^text_model\.", r"^text_projection\.", r"^logit_scale$", r"^logit_bias$", r"position_ids$")
_DINOV2 = HFFamily(
    ("dinov2.",), _DINOV2_RENAMES, (r"^embeddings\.mask_token$",), 1,
    {"hidden_act": "gelu", "layer_norm_eps": 1e-6, "image_size": 224, "patch_size": 14}, _dinov2_family,
)
_SIGLIP = HFFamily(
    ("vision_model.",), _CLIP_LIKE_RENAMES, _TEXT_TOWER, 0,
    {"hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6, "image_size": 224, "patch_size": 16},
    _siglip_family, vision_key="vision_config", nested=True,
)
_CLIP = HFFamily(
    ("vision_model.",), _CLIP_LIKE_RENAMES, _TEXT_TOWER, 1,
    {"hidden_act": "quick_gelu", "layer_norm_eps": 1e-5, "image_size": 224, "patch_size": 32},
    _clip_family, vision_key="vision_config", nested=True,
)
_SIGLIP2 = dataclasses.replace(
    _SIGLIP, defaults={"hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6, "patch_size": 16},
    architecture=_siglip2_family, interpolation=NAFLEX_INTERPOLATION, ungroup=_siglip2_linear_patches,
    refused=(("classifier.weight", "a Siglip2ForImageClassification head (a Linear on the mean of the real patch "
              "tokens, beside an attention-pooling head it leaves unused), which keras_vit does not read. Supported "
              "Hugging Face SigLIP 2 classes: Siglip2VisionModel, Siglip2Model (its image tower)"),),
)
# model_type (config.json) -> family. SigLIP 2's fixed-resolution checkpoints are model_type
# "siglip"; model_type "siglip2" is the NaFlex variant (a Linear patch embedding, any aspect).
HF_FAMILIES = {
    "vit": HFFamily(("vit.",), (), (), 1, {}, _vit_family),
    "deit": HFFamily(
        ("deit.",), (("cls_classifier.", "classifier."), ("distillation_classifier.", "classifier_dist.")),
        (), 2, {}, _deit_family,
        refused=(("classifier.weight", "a DeiTForImageClassification head (one head on the class token of a "
                  "distilled model), which keras_vit does not build: a distilled DeiT has its two heads averaged. "
                  "Supported Hugging Face DeiT classes: DeiTModel, DeiTForImageClassificationWithTeacher"),),
    ),
    "dinov2": _DINOV2,
    # Its interpolate_pos_encoding antialiases (torch bicubic, antialias=True): timm's resampling.
    "dinov2_with_registers": dataclasses.replace(_DINOV2, prefixes=("dinov2_with_registers.",), interpolation="bicubic"),
    # DINOv3ViTModel (and its Backbone): blocks under "model." in memory, saved as "layer.{i}" by transformers 5.
    "dinov3_vit": HFFamily(
        ("model.",), _DINOV3_RENAMES, (r"^embeddings\.mask_token$",), 0,
        {"hidden_act": "gelu", "layer_norm_eps": 1e-5, "image_size": 224, "patch_size": 16}, _dinov3_family,
        regroup=_dinov3_gated_mlp, activations={"gelu": ("gelu", False), "silu": ("swiglu", False)},
        ungroup=_dinov3_split_mlp,
    ),
    "siglip": _SIGLIP,
    "siglip_vision_model": _SIGLIP,
    "siglip2": _SIGLIP2,
    "siglip2_vision_model": _SIGLIP2,
    "clip": _CLIP,
    "clip_vision_model": _CLIP,
}


def hf_family(config, path):
    """The `HFFamily` of a config.json, refused naming its model_type when there is none."""
    model_type = config_value(config, "model_type", path, "name", "vit")
    if model_type not in HF_FAMILIES:
        raise CheckpointError(
            f"Hugging Face config {path!r}: model_type={model_type!r} is not a family keras_vit builds; "
            f"supported model_type values: {sorted(HF_FAMILIES)}."
        )
    return HF_FAMILIES[model_type]


def normalize_hf(raw, family=None):
    """Renames a Hugging Face family's keys to the canonical names (see `HFFamily`)."""
    family = family or HF_FAMILIES["vit"]
    tensors, names = {}, {}
    for original, array in raw.items():
        key = original
        for prefix in family.prefixes:
            if key.startswith(prefix):
                key = key[len(prefix):]
                break
        if any(re.search(pattern, key) for pattern in family.ignored):
            continue
        key = rename_hf_key(key, family, to_canonical=True)
        if key in tensors:
            raise CheckpointError(f"Keys {names[key]!r} and {original!r} both map to {key!r}.")
        tensors[key], names[key] = array, original
    if family.regroup is not None:
        family.regroup(tensors, names)
    return tensors, names, family.source_prefix


def rename_hf_key(key, family, to_canonical):
    """A family's file key to its canonical name (`to_canonical`), or back; the first row that matches renames.

    Example:

    >>> rename_hf_key("encoder.layers.3.self_attn.q_proj.bias", HF_FAMILIES["clip"], to_canonical=True)
    'encoder.layer.3.attention.attention.query.bias'
    >>> rename_hf_key("encoder.layer.3.attention.attention.query.bias", HF_FAMILIES["clip"], to_canonical=False)
    'encoder.layers.3.self_attn.q_proj.bias'
    """
    source, target = (0, 1) if to_canonical else (1, 0)
    for row in family.renames:
        match = _template_pattern(row[source]).match(key)
        if match:
            index = match.groupdict().get("i")
            return (row[target].replace("{i}", index) if index is not None else row[target]) + key[match.end():]
    return key


def hf_file_rank(key, family):
    """The number of axes the family stores canonical `key` with, or None when as the canonical layout."""
    for row in family.renames:
        if len(row) > 2 and _template_pattern(row[1]).match(key):
            return row[2]
    return None


def _template_pattern(template):
    pattern = "^" + re.escape(template).replace(re.escape("{i}"), r"(?P<i>\d+)")
    return re.compile(pattern if template.endswith(".") else pattern + "$")


# Hugging Face hidden_act -> (mlp_activation, approximate_gelu).
_HF_ACTIVATIONS = {
    "gelu": ("gelu", False), "gelu_new": ("gelu", True), "gelu_pytorch_tanh": ("gelu", True),
    "gelu_fast": ("gelu", True), "quick_gelu": ("quick_gelu", False),
}


_REQUIRED = object()


def _is_integer(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# A config.json value's kinds: (test, what is expected).
CONFIG_KINDS = {
    "size": (lambda v: _is_integer(v) and v >= 1, "an integer >= 1"),
    "count": (lambda v: _is_integer(v) and v >= 0, "an integer >= 0"),
    "positive": (lambda v: _is_number(v) and v > 0, "a number > 0"),
    "flag": (lambda v: isinstance(v, bool), "true or false"),
    "name": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "object": (lambda v: isinstance(v, dict), "a JSON object"),
    # Hugging Face allows [n, n] for a square patch, and [height, width] for an image.
    "square": (lambda v: CONFIG_KINDS["size"][0](v), "an integer >= 1 (or [n, n])"),
    "sides": (lambda v: all(CONFIG_KINDS["size"][0](side) for side in v), "an integer >= 1 or [height, width]"),
}


def config_value(config, key, path, kind, default=_REQUIRED):
    """One value of a checkpoint's config.json, checked: CheckpointError naming the file, the key and what was expected.

    Args:
        config: dict. The parsed config.json.
        key: str. The key to read.
        path: str. The config.json file, for the message.
        kind: str or tuple. A key of `CONFIG_KINDS` ("sides" reads as a (height, width) tuple,
            "square" [n, n] as n), or a tuple of the accepted values.
        default: the value when the key is absent (None: returned as it is). Defaults to none:
            the key must be there.

    Example:

    >>> config_value({"patch_size": [14, 14]}, "patch_size", "config.json", "square")
    14
    >>> config_value({"layerscale_value": "x"}, "layerscale_value", "dinov2/config.json", "positive", 1.0)
    Traceback (most recent call last):
    ...
    keras_vit.weights.files.CheckpointError: Hugging Face config 'dinov2/config.json': layerscale_value is 'x'; expected a number > 0.
    """
    test, expected = (lambda v: v in kind, f"one of {list(kind)}") if isinstance(kind, tuple) else CONFIG_KINDS[kind]
    if key not in config:
        if default is _REQUIRED:
            raise CheckpointError(f"Hugging Face config {path!r}: {key} is missing; expected {expected}.")
        if default is None:
            return None
        value = default
    else:
        value = config[key]
    read = value
    if kind == "square" and isinstance(value, (list, tuple)) and len(value) == 2 and value[0] == value[1]:
        read = value[0]
    elif kind == "sides":
        read = tuple(value) if isinstance(value, (list, tuple)) and len(value) == 2 else (value, value)
    if not test(read):
        raise CheckpointError(f"Hugging Face config {path!r}: {key} is {value!r}; expected {expected}.")
    return read


def hf_architecture(tensors, source_prefix, config, path):
    """Every architecture field from a Hugging Face ViT config.json (the head from the tensors)."""
    family = hf_family(config, path)
    config = family.vision_config(config, path)
    activations = family.activations or _HF_ACTIVATIONS
    act = config_value(config, "hidden_act", path, tuple(sorted(activations)),
                       family.defaults.get("hidden_act", "gelu"))
    epsilon = config_value(config, "layer_norm_eps", path, "positive", family.defaults.get("layer_norm_eps", 1e-12))
    # HF ViTConfig's own defaults where a key is absent: what transformers itself would build.
    patch = config_value(config, "patch_size", path, "square", family.defaults.get("patch_size", 16))
    image = config_value(config, "image_size", path, "sides", family.defaults.get("image_size", 224))
    arch = {
        "patch_size": patch,
        "hidden_size": config_value(config, "hidden_size", path, "size"),
        "num_layers": config_value(config, "num_hidden_layers", path, "size"),
        "num_heads": config_value(config, "num_attention_heads", path, "size"),
        "channels": config_value(config, "num_channels", path, "size", 3),
        "class_token": True,
        "pooling": "token",
        "mlp_activation": activations[act][0],
        "approximate_gelu": activations[act][1],
        "layer_norm_epsilon": float(epsilon),
    }
    arch.update(family.architecture(tensors, config, path))
    block = "encoder.layer.0.attention.attention."
    arch.setdefault("qkv_bias", _qkv_bias(tensors, *(block + part + ".bias" for part in ("query", "key", "value"))))
    if "mlp_dim" not in arch:
        arch["mlp_dim"] = config_value(config, "intermediate_size", path, "size")
    grid = arch.pop("grid_size", None) or (image[0] // patch, image[1] // patch)
    return _with_top(arch, tensors, LAYOUTS["hf"], source_prefix, grid, path)


# --------------------------------------------------------------------------------------------
# timm (VisionTransformer state dict saved as safetensors)


@register_layer_mapping("timm", "PatchEncoder")
def _timm_embedding(layer, context):
    entries = [_patch_kernel_entry("patch_embed.proj.weight", layer, context, _torch_conv, _keras_conv_to_torch)]
    if layer.use_bias:
        entries.append(Entry("patch_embed.proj.bias", layer.bias))
    if layer.class_token:
        entries.append(Entry("cls_token", layer.cls))
    if layer.distillation_token:
        entries.append(Entry("dist_token", layer.dist))
    if layer.num_register_tokens:
        entries.append(Entry("reg_token", layer.registers))
    if layer.position_embedding == "learned":
        entries.append(_position_entry(LAYOUTS["timm"].position_key, layer, context))
    return entries


def _fused_part(index, parts=3):
    """Slice `index` of `parts` equal slices of a fused PyTorch Linear's weight and bias."""
    def weight(array, shape):
        width = array.shape[0] // parts
        return array[index * width:(index + 1) * width].T.reshape(shape)

    def bias(array, shape):
        width = array.shape[0] // parts
        return array[index * width:(index + 1) * width].reshape(shape)

    return weight, bias


@register_layer_mapping("timm", "TransformerBlock")
def _timm_block(layer, context):
    prefix = f"blocks.{_block_index(layer)}."
    parts = _attention(layer)
    entries = []
    for norm, name in ((layer.norm1, "norm1"), (layer.norm2, "norm2")):
        entries += [Entry(prefix + name + ".weight", norm.gamma), Entry(prefix + name + ".bias", norm.beta)]
    if layer.qkv_bias == "qv":
        # timm's Eva (DINOv3 ...): a bias of their own for the query and the value, none for the key.
        entries += [Entry(prefix + f"attn.{part[0]}_bias", parts[part][1], _reshape_to, _flat)
                    for part in ("query", "value")]
        parts = {name: (kernel, None if name != "out" else bias) for name, (kernel, bias) in parts.items()}
    entries += _fused_attention_entries(parts, prefix + "attn.qkv.weight", prefix + "attn.qkv.bias", prefix + "attn.proj")
    for dense, name in ((layer.mlp_dense_0, "mlp.fc1"), (layer.mlp_dense_1, "mlp.fc2")):
        entries += _dense_entries(dense, prefix + name)
    if layer.mlp_hidden_norm is not None:
        entries += _norm_entries(layer.mlp_hidden_norm, prefix + "mlp.norm")
    return entries + _layer_scale_entries(layer, (prefix + "ls1.gamma", prefix + "ls2.gamma"))


@register_layer_mapping("timm", "AttentionPooling")
def _timm_attention_pooling(layer, context):
    parts = _attention(layer)
    query_weight, query_bias = _fused_part(0, 1)
    return (
        [Entry("attn_pool.latent", layer.probe),
         Entry("attn_pool.q.weight", parts["query"][0], query_weight, _to_torch_linear),
         Entry("attn_pool.q.bias", parts["query"][1], query_bias, _flat)]
        + _fused_attention_entries(parts, "attn_pool.kv.weight", "attn_pool.kv.bias", "attn_pool.proj", split_kv=True)
        + _norm_entries(layer.norm, "attn_pool.norm")
        + _dense_entries(layer.mlp_dense_0, "attn_pool.mlp.fc1") + _dense_entries(layer.mlp_dense_1, "attn_pool.mlp.fc2")
    )


register_layer_mapping("timm", "pre_norm", lambda layer, context: _norm_entries(layer, "norm_pre"))


register_layer_mapping("timm", "encoder_norm", lambda layer, context: [
    Entry("norm.weight", layer.gamma), Entry("norm.bias", layer.beta)])
register_layer_mapping("timm", "fc_norm", lambda layer, context: _norm_entries(layer, "fc_norm"))


def normalize_timm(raw):
    """timm keys as they are, SwiGLU's unpacked fc1_g / fc1_x packed into fc1 (gate first), Eva's LayerScale
    (gamma_1, gamma_2) named as VisionTransformer's (ls1.gamma, ls2.gamma), and Eva's separate query, key and
    value (EVA-02 B and L: attn.q_proj, k_proj, v_proj) as its fused ones (attn.qkv.weight, q_bias, v_bias)."""
    tensors, names = {}, {}
    raw = _fuse_separate_qkv(raw, names)
    for key, array in raw.items():
        if key.startswith("rope.") and key != "rope.freqs":
            continue  # a rotary table an older timm saved: computed from the grid, as timm's own filter says
        eva_scale = re.fullmatch(r"(blocks\.\d+\.)gamma_([12])", key)
        if eva_scale is not None:
            canonical = f"{eva_scale.group(1)}ls{eva_scale.group(2)}.gamma"
            tensors[canonical], names[canonical] = array, key
            continue
        match = re.fullmatch(r"(blocks\.\d+\.mlp\.)fc1_([gx])\.(weight|bias)", key)
        if match is None:
            tensors[key] = array
            names.setdefault(key, key)
            continue
        packed = f"{match.group(1)}fc1.{match.group(3)}"
        gate = raw.get(f"{match.group(1)}fc1_g.{match.group(3)}")
        value = raw.get(f"{match.group(1)}fc1_x.{match.group(3)}")
        if gate is not None and value is not None:
            tensors[packed] = np.concatenate([np.asarray(gate), np.asarray(value)], axis=0)
            names[packed] = f"{match.group(1)}fc1_g/fc1_x.{match.group(3)}"
        else:
            tensors[key], names[key] = array, key
    return tensors, names, _timm_position_prefix(tensors)


def _fuse_separate_qkv(raw, names):
    """Eva's q_proj / k_proj / v_proj weights of a block concatenated into its qkv.weight, the query and value
    biases renamed q_bias and v_bias; `names` gets the keys as written. Blocks without all three keep theirs."""
    raw = dict(raw)
    for key in [key for key in raw if re.fullmatch(r"blocks\.\d+\.attn\.q_proj\.weight", key)]:
        prefix = key[:-len("q_proj.weight")]
        parts = [f"{prefix}{part}_proj.weight" for part in "qkv"]
        if not all(part in raw for part in parts):
            continue
        raw[prefix + "qkv.weight"] = np.concatenate([np.asarray(raw.pop(part)) for part in parts], axis=0)
        names[prefix + "qkv.weight"] = f"{prefix}q_proj/k_proj/v_proj.weight"
        for part in "qv":
            if f"{prefix}{part}_proj.bias" in raw:
                raw[f"{prefix}{part}_bias"] = raw.pop(f"{prefix}{part}_proj.bias")
                names[f"{prefix}{part}_bias"] = f"{prefix}{part}_proj.bias"
    return raw


def _timm_position_prefix(tensors, grid=None):
    """Rows of pos_embed before the patch rows: the prefix tokens', or none (timm's no_embed_class).

    Without the grid (a timm config's img_size) the patch rows are taken to be a square.
    """
    pos = tensors.get("pos_embed")
    if pos is None:
        return 0
    rows = int(pos.shape[-2])
    prefix = sum(int(key in tensors) for key in ("cls_token", "dist_token"))
    if "reg_token" in tensors:
        prefix += int(tensors["reg_token"].shape[-2])
    if grid is not None and rows - grid[0] * grid[1] in (0, prefix):
        return rows - grid[0] * grid[1]
    if prefix and square_grid(rows - prefix):
        return prefix
    return 0 if square_grid(rows) else prefix


def timm_architecture(tensors, source_prefix, config, path):
    """Every architecture field of a timm state dict, with what its timm config.json (if any) states.

    Without a config, num_heads is None (the fused qkv hides it) and a CLIP tower's MLP
    activation too; a timm Hub folder's config.json (`config`, read from `path`) names the
    architecture and its model_args, which state them (`keras_vit.weights.timm_names`).
    """
    if config is None and "norm_pre.weight" in tensors and "attn_pool.latent" in tensors:
        raise CheckpointError(
            f"Checkpoint {path!r} has timm's norm_pre and attn_pool, as timm's PE-Core (vit_pe_core_*), whose rotary "
            "position and attention-pool heads a state dict does not store: load its timm Hub folder, or put that "
            "folder's config.json (naming the architecture) beside the file."
        )
    weight = _require(tensors, "patch_embed.proj.weight", path)
    class_token = "cls_token" in tensors
    registers = int(tensors["reg_token"].shape[-2]) if "reg_token" in tensors else 0
    if registers and source_prefix > class_token + ("dist_token" in tensors):
        raise CheckpointError(
            f"Checkpoint {path!r} has position-embedding rows for its register tokens; keras_vit adds none to registers."
        )
    fc1 = _require(tensors, "blocks.0.mlp.fc1.weight", path)
    fc2 = _require(tensors, "blocks.0.mlp.fc2.weight", path)
    swiglu = int(fc1.shape[0]) == 2 * int(fc2.shape[1])
    pre_norm = "norm_pre.weight" in tensors
    arch = {
        "patch_size": int(weight.shape[-1]),
        "hidden_size": int(weight.shape[0]),
        "num_layers": _count_blocks(tensors, r"blocks\.(\d+)\.", path),
        "num_heads": None,
        "mlp_dim": int(fc2.shape[1]),
        "channels": int(weight.shape[1]),
        "class_token": class_token,
        "pooling": "map" if "attn_pool.latent" in tensors else "token" if class_token else "gap",
        "approximate_gelu": False,
        "layer_norm_epsilon": 1e-5 if pre_norm else 1e-6,  # timm's CLIP towers use 1e-5
        "distillation_token": "dist_token" in tensors,
        "num_register_tokens": registers,
        "prefix_position_embedding": source_prefix > 0 or not class_token,
        "layer_scale_init": 1e-5 if "blocks.0.ls1.gamma" in tensors else None,
        # timm's CLIP towers (norm_pre) come with QuickGELU (OpenAI) or GELU (LAION, DFN); the
        # file does not say which, so the caller must (`_fill_defaults` refuses to guess).
        "mlp_activation": "swiglu" if swiglu else None if pre_norm else "gelu",
        "pre_norm": pre_norm,
        "patch_bias": "patch_embed.proj.bias" in tensors,
        "projection_size": None,
        "qkv_bias": _qkv_bias(tensors, "blocks.0.attn.q_bias", "blocks.0.attn.qkv.bias", "blocks.0.attn.v_bias"),
        # Rotary position is computed, not stored: only a timm config.json's architecture states it.
        "rope": None,
        # The attention pool's MLP width as stored; its heads only a config.json states (fused key and value).
        "pooling_mlp_dim": int(tensors["attn_pool.mlp.fc1.weight"].shape[0]) if "attn_pool.mlp.fc1.weight" in tensors
        else None,
        "mlp_norm": "blocks.0.mlp.norm.weight" in tensors,
        # timm's fc_norm: the final LayerNorm after pooling, its norm then none (EVA-02, timm's avg-pooled ViTs).
        "fc_norm": "fc_norm.weight" in tensors,
    }
    stated = config_architecture(config, path) if config is not None else {}
    arch = _with_top(arch, tensors, LAYOUTS["timm"], source_prefix, stated.pop("grid_size", None), path)
    return fold_pooling_fields(_with_stated(arch, stated, path))


# Fields a timm state dict shows only by a default (the head count not at all): its config.json's word wins.
_TIMM_UNSTATED = ("num_heads", "approximate_gelu", "layer_norm_epsilon", "layer_scale_init")
# Fields the tensors show exactly, where a config's follows timm's defaults (fc_norm comes with global_pool='avg'
# unless the name or model_args say otherwise): the tensors' word wins.
_TIMM_SHOWN = ("mlp_norm", "fc_norm")


def _with_stated(arch, stated, path):
    """`arch` (from the tensors) completed by a timm config's `stated` fields; a contradiction is refused."""
    conflicts = []
    prefix_tokens = arch["class_token"] or arch["distillation_token"]
    for field, value in stated.items():
        found = arch[field]
        if (field in ("mlp_dim", "pooling_mlp_dim") and value is None) or field in _TIMM_SHOWN:
            continue  # the config leaves the width to the tensors, or they show the field
        if field == "layer_scale_init" and (found is None) != (value is None):
            conflicts.append(f"layer_scale_init={value!r} (the weights {'have no' if found is None else 'have'} "
                             "LayerScale gammas)")
        elif (field in _TIMM_UNSTATED or found is None
              or (field == "mlp_activation" and "swiglu" not in (found, value))
              or (field == "pooling" and "map" not in (found, value))  # the tensors show only an attention pool
              or (field == "prefix_position_embedding" and not prefix_tokens)):
            arch[field] = value
        elif value != found:
            conflicts.append(f"{field}={value!r} (the weights have {found!r})")
    if conflicts:
        raise CheckpointError(f"timm config {path!r} contradicts the weights beside it: " + "; ".join(conflicts) + ".")
    return arch


# --------------------------------------------------------------------------------------------
# The records: one per ecosystem.

LAYOUTS = {
    "vit_jax": Layout(
        "vit_jax", "npz", "embedding/kernel", ("head/kernel", "head/bias"), ("pre_logits/kernel", "pre_logits/bias"),
        "Transformer/posembed_input/pos_embedding", "bilinear", normalize_npz, npz_architecture,
    ),
    "hf": Layout(
        "hf", "safetensors", "embeddings.patch_embeddings.projection.weight",
        # HF keeps the ImageNet-21k pre-logits Dense + tanh as ViTModel's pooler.
        ("classifier.weight", "classifier.bias"), ("pooler.dense.weight", "pooler.dense.bias"),
        "embeddings.position_embeddings", "bicubic_hf", normalize_hf, hf_architecture,
        ("classifier_dist.weight", "classifier_dist.bias"),
    ),
    "timm": Layout(
        "timm", "safetensors", "patch_embed.proj.weight", ("head.weight", "head.bias"),
        ("pre_logits.fc.weight", "pre_logits.fc.bias"), "pos_embed", "bicubic", normalize_timm, timm_architecture,
        ("head_dist.weight", "head_dist.bias"),
    ),
}
_register_top(LAYOUTS["vit_jax"], torch_linear=False)
_register_top(LAYOUTS["hf"], torch_linear=True)
_register_top(LAYOUTS["timm"], torch_linear=True)


def read_checkpoint(path, fmt):
    """Reads a file of format `fmt` ("npz", "safetensors", "hf_directory").

    A safetensors file whose config.json (beside it, or in the folder) names a `model_type` is
    read as that Hugging Face family (`HF_FAMILIES`; another model_type is refused, naming it);
    else as timm when it has timm's keys (with the config.json of a timm Hub folder, one that
    names an `architecture`, when there is one), else as a Hugging Face ViT.

    Returns (layout, tensors, names, source_prefix_tokens, architecture), `layout` a `Layout`.
    """
    if fmt == "npz":
        layout = LAYOUTS["vit_jax"]
        tensors, names, source_prefix = layout.normalize(read_npz(path))
        notes = {key: tensors.pop(key) for key in list(tensors) if key.startswith(NPZ_NOTES)}
        for key in notes:
            del names[key]
        return _read_as(layout, tensors, names, source_prefix, notes, path)
    if fmt == "hf_directory":
        config_path = os.path.join(path, "config.json")
        raw = read_weights_folder(path)
        if os.path.isfile(os.path.join(path, WEIGHTS_FILE)):
            path = os.path.join(path, WEIGHTS_FILE)
    else:
        config_path = os.path.join(os.path.dirname(os.path.abspath(path)), "config.json")
        raw = read_safetensors(path)
    config = read_hf_config(config_path, path) if os.path.isfile(config_path) else None
    if config is not None and "model_type" in config:
        family = hf_family(config, config_path)
        tensors, names, source_prefix = normalize_hf(raw, family)
        for key, why in family.refused:
            if key in raw or any(original.endswith("." + key) for original in raw):
                raise CheckpointError(f"Checkpoint {path!r} has {key!r}: {why}.")
        record = LAYOUTS["hf"]
        if family.interpolation is not None:
            record = dataclasses.replace(record, interpolation=family.interpolation)
        return _read_as(record, tensors, names, source_prefix, config, config_path)
    timm = LAYOUTS["timm"]
    if timm.marker in raw:
        tensors, names, source_prefix = timm.normalize(raw)
        if config is not None and "architecture" in config:  # a timm Hub folder's config.json
            source_prefix = _timm_position_prefix(tensors, config_architecture(config, config_path).get("grid_size"))
            return _read_as(timm, tensors, names, source_prefix, config, config_path)
        return _read_as(timm, tensors, names, source_prefix, None, path)
    tensors, names, source_prefix = normalize_hf(raw)
    if LAYOUTS["hf"].marker in tensors:
        config = read_hf_config(config_path, path)
        return _read_as(LAYOUTS["hf"], tensors, names, source_prefix, config, config_path)
    sample = ", ".join(sorted(raw)[:3])
    raise CheckpointError(
        f"Safetensors file {path!r} holds neither Hugging Face ViT keys (embeddings.patch_embeddings...) "
        f"nor timm ViT keys (patch_embed.proj.weight), and no config.json with a model_type is beside it "
        f"(its first keys: {sample}). Supported: timm ViT state dicts and Hugging Face model_type "
        f"{sorted(HF_FAMILIES)}."
    )


def _read_as(layout, tensors, names, source_prefix, config, path):
    arch = layout.architecture(tensors, source_prefix, config, path)
    return layout, tensors, names, source_prefix, {field: arch[field] for field in ARCHITECTURE_FIELDS}


def read_hf_config(config_path, weights_path):
    """The config.json of a Hugging Face or timm checkpoint as a dict; CheckpointError naming the file otherwise."""
    if not os.path.isfile(config_path):
        raise CheckpointError(
            f"Hugging Face checkpoint {weights_path!r} needs its config.json next to it (for LayerNorm "
            f"epsilon, heads and activation); {config_path!r} does not exist."
        )
    return read_json_object(config_path, "Config")
