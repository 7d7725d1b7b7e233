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
import json
import math
import os
import re
from typing import Callable

import numpy as np

from keras_vit.configs import ARCHITECTURE_FIELDS
from keras_vit.weights.files import CheckpointError, read_npz, read_safetensors
from keras_vit.weights.hybrid import npz_stem_architecture
from keras_vit.weights.mapping import Entry, register_layer_mapping
from keras_vit.weights.resample import resample_position_embedding


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


# --------------------------------------------------------------------------------------------
# Shared pieces


def _position_entry(key, encoder, context):
    """The learned position embedding: class-token rows kept apart, the grid resampled."""

    def to_model(array, shape):
        array = array.reshape((1,) + array.shape[-2:])
        source_prefix = context.source_prefix_tokens
        model_prefix = encoder.num_prefix_tokens
        if source_prefix > model_prefix:
            raise CheckpointError("the checkpoint has a class-token row but the model has no class token")
        patches = array.shape[1] - source_prefix
        old_grid = context.source_grid
        if old_grid is None or old_grid[0] * old_grid[1] != patches:
            side = math.isqrt(patches)
            if side * side != patches:
                raise CheckpointError(f"{patches} patch rows do not make a square grid")
            old_grid = (side, side)
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

    return Entry(key, encoder.pos_embedding, to_model)


def _reshape_to(array, shape):
    return array.reshape(shape)


def _torch_linear(array, shape):
    """PyTorch Linear weight (out, in) -> Keras kernel (in, out) reshaped to the variable."""
    return array.T.reshape(shape)


def _torch_conv(array, shape):
    """PyTorch Conv2d weight OIHW -> Keras kernel HWIO."""
    return array.transpose(2, 3, 1, 0)


def _keras_conv_to_torch(array):
    return array.transpose(3, 2, 0, 1)


def _attention(layer):
    """{"query"|"key"|"value"|"out": (kernel, bias)} of a TransformerBlock's attention."""
    parts = layer.attention.projections()
    parts["out"] = parts.pop("output")
    return parts


def _block_index(layer):
    match = re.fullmatch(r"encoderblock_(\d+)", layer.name)
    if not match:
        raise CheckpointError(f"TransformerBlock {layer.name!r} is not named encoderblock_<i>.")
    return int(match.group(1))


def _register_top(layout, torch_linear):
    """The head and pre-logits Dense layers of `layout`, keys from its record."""
    for layer_name, keys in (("head", layout.head_keys), ("pre_logits", layout.pre_logits_keys)):
        kernel_key, bias_key = keys

        def fn(layer, context, kernel_key=kernel_key, bias_key=bias_key):
            to_model = _torch_linear if torch_linear else _reshape_to
            return [Entry(kernel_key, layer.kernel, to_model, (lambda a: a.T) if torch_linear else (lambda a: a)),
                    Entry(bias_key, layer.bias)]

        register_layer_mapping(layout.name, layer_name, fn)


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
        side = math.isqrt(max(patches, 0))
        arch["grid_size"] = grid or ((side, side) if side * side == patches else None)
        arch["position_embedding"] = "learned"
    else:
        # No stored embedding: "none" and "sincos2d" (fixed, computed) look the same in a file.
        arch["grid_size"] = grid
        arch["position_embedding"] = None
    arch.setdefault("stem", None)
    arch.setdefault("stem_width", None)
    for field, value in PAPER_VIT_FIELDS.items():
        arch.setdefault(field, value)
    return arch


# The family fields as the paper's ViT has them: what a layout states unless its tensors say otherwise.
PAPER_VIT_FIELDS = {
    "distillation_token": False, "num_register_tokens": 0, "prefix_position_embedding": True,
    "layer_scale_init": None, "mlp_activation": "gelu", "pre_norm": False, "patch_bias": True,
    "projection_size": None,
}


# --------------------------------------------------------------------------------------------
# vit_jax (Google .npz)


@register_layer_mapping("vit_jax", "PatchEncoder")
def _npz_embedding(layer, context):
    entries = [Entry("embedding/kernel", layer.kernel), Entry("embedding/bias", layer.bias)]
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
        entries += [Entry(key + "/kernel", kernel), Entry(key + "/bias", bias)]
    for i, dense in enumerate((layer.mlp_dense_0, layer.mlp_dense_1)):
        key = prefix + f"MlpBlock_3/Dense_{i}"
        entries += [Entry(key + "/kernel", dense.kernel), Entry(key + "/bias", dense.bias)]
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
    for original, array in raw.items():
        key = original
        for prefix in ("opt/target/", "params/"):
            if key.startswith(prefix):
                key = key[len(prefix):]
                break
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


def npz_architecture(tensors, source_prefix, config, path):
    """Every architecture field of a canonical vit_jax checkpoint, read from its keys and shapes."""
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
        "pooling": "token" if class_token else "gap",
        "approximate_gelu": True,
        "layer_norm_epsilon": 1e-6,
    }
    arch.update(npz_stem_architecture(tensors))
    return _with_top(arch, tensors, LAYOUTS["vit_jax"], source_prefix, path=path)


# --------------------------------------------------------------------------------------------
# Hugging Face transformers (ViTModel / ViTForImageClassification)


@register_layer_mapping("hf", "PatchEncoder")
def _hf_embedding(layer, context):
    entries = [
        Entry("embeddings.patch_embeddings.projection.weight", layer.kernel, _torch_conv, _keras_conv_to_torch),
        Entry("embeddings.patch_embeddings.projection.bias", layer.bias),
    ]
    if layer.class_token:
        entries.append(Entry("embeddings.cls_token", layer.cls))
    if layer.position_embedding == "learned":
        entries.append(_position_entry(LAYOUTS["hf"].position_key, layer, context))
    return entries


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
        entries += [
            Entry(prefix + keys[part] + ".weight", kernel, _torch_linear),
            Entry(prefix + keys[part] + ".bias", bias, _reshape_to),
        ]
    for dense, name in ((layer.mlp_dense_0, "intermediate.dense"), (layer.mlp_dense_1, "output.dense")):
        entries += [Entry(prefix + name + ".weight", dense.kernel, _torch_linear), Entry(prefix + name + ".bias", dense.bias)]
    return entries


register_layer_mapping("hf", "encoder_norm", lambda layer, context: [
    Entry("layernorm.weight", layer.gamma), Entry("layernorm.bias", layer.beta)])


def normalize_hf(raw):
    tensors, names = {}, {}
    for original, array in raw.items():
        key = original[len("vit."):] if original.startswith("vit.") else original
        tensors[key], names[key] = array, original
    return tensors, names, 1


_HF_GELUS = {"gelu": False, "gelu_new": True, "gelu_pytorch_tanh": True, "gelu_fast": True}


def _config_int(config, key, path, default=None):
    value = config.get(key, default)
    if isinstance(value, (list, tuple)) and len(value) == 2 and value[0] == value[1]:
        value = value[0]  # HF allows (size, size) for square images and patches
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        what = "missing" if key not in config and default is None else f"{value!r}"
        raise CheckpointError(f"Hugging Face config {path!r}: {key} is {what}; expected an integer >= 1.")
    return value


def hf_architecture(tensors, source_prefix, config, path):
    """Every architecture field from a Hugging Face ViT config.json (the head from the tensors)."""
    act = config.get("hidden_act", "gelu")
    if act not in _HF_GELUS:
        raise CheckpointError(
            f"Hugging Face config {path!r}: unsupported hidden_act={act!r}; expected one of {sorted(_HF_GELUS)}."
        )
    epsilon = config.get("layer_norm_eps", 1e-12)
    if not isinstance(epsilon, (int, float)) or isinstance(epsilon, bool) or not epsilon > 0:
        raise CheckpointError(f"Hugging Face config {path!r}: layer_norm_eps is {epsilon!r}; expected a number > 0.")
    # HF ViTConfig's own defaults where a key is absent: what transformers itself would build.
    patch = _config_int(config, "patch_size", path, 16)
    image = config.get("image_size", 224)
    image = tuple(image) if isinstance(image, (list, tuple)) else (image, image)
    for side in image:
        if not isinstance(side, int) or isinstance(side, bool) or side < 1:
            raise CheckpointError(f"Hugging Face config {path!r}: image_size is {config.get('image_size')!r}; "
                                  "expected an integer >= 1 or (height, width).")
    arch = {
        "patch_size": patch,
        "hidden_size": _config_int(config, "hidden_size", path),
        "num_layers": _config_int(config, "num_hidden_layers", path),
        "num_heads": _config_int(config, "num_attention_heads", path),
        "mlp_dim": _config_int(config, "intermediate_size", path),
        "channels": _config_int(config, "num_channels", path, 3),
        "class_token": True,
        "pooling": "token",
        "approximate_gelu": _HF_GELUS[act],
        "layer_norm_epsilon": float(epsilon),
    }
    grid = (image[0] // patch, image[1] // patch)
    return _with_top(arch, tensors, LAYOUTS["hf"], source_prefix, grid, path)


# --------------------------------------------------------------------------------------------
# timm (VisionTransformer state dict saved as safetensors)


@register_layer_mapping("timm", "PatchEncoder")
def _timm_embedding(layer, context):
    entries = [
        Entry("patch_embed.proj.weight", layer.kernel, _torch_conv, _keras_conv_to_torch),
        Entry("patch_embed.proj.bias", layer.bias),
    ]
    if layer.class_token:
        entries.append(Entry("cls_token", layer.cls))
    if layer.position_embedding == "learned":
        entries.append(_position_entry(LAYOUTS["timm"].position_key, layer, context))
    return entries


def _qkv_part(index):
    def weight(array, shape):
        width = array.shape[0] // 3
        return array[index * width:(index + 1) * width].T.reshape(shape)

    def bias(array, shape):
        width = array.shape[0] // 3
        return array[index * width:(index + 1) * width].reshape(shape)

    return weight, bias


@register_layer_mapping("timm", "TransformerBlock")
def _timm_block(layer, context):
    prefix = f"blocks.{_block_index(layer)}."
    parts = _attention(layer)
    entries = []
    for norm, name in ((layer.norm1, "norm1"), (layer.norm2, "norm2")):
        entries += [Entry(prefix + name + ".weight", norm.gamma), Entry(prefix + name + ".bias", norm.beta)]
    for index, part in enumerate(("query", "key", "value")):
        weight, bias = _qkv_part(index)
        entries += [
            Entry(prefix + "attn.qkv.weight", parts[part][0], weight),
            Entry(prefix + "attn.qkv.bias", parts[part][1], bias),
        ]
    entries += [
        Entry(prefix + "attn.proj.weight", parts["out"][0], _torch_linear),
        Entry(prefix + "attn.proj.bias", parts["out"][1]),
    ]
    for dense, name in ((layer.mlp_dense_0, "mlp.fc1"), (layer.mlp_dense_1, "mlp.fc2")):
        entries += [Entry(prefix + name + ".weight", dense.kernel, _torch_linear), Entry(prefix + name + ".bias", dense.bias)]
    return entries


register_layer_mapping("timm", "encoder_norm", lambda layer, context: [
    Entry("norm.weight", layer.gamma), Entry("norm.bias", layer.beta)])


def normalize_timm(raw):
    return dict(raw), {key: key for key in raw}, int("cls_token" in raw)


def timm_architecture(tensors, source_prefix, config, path):
    """Every architecture field of a timm state dict; num_heads is None (the fused qkv hides it)."""
    if "fc_norm.weight" in tensors:
        raise CheckpointError(
            f"Checkpoint {path!r} has timm's fc_norm (a LayerNorm after pooling), which keras_vit's "
            "ViT does not build: its encoder norm comes before pooling."
        )
    weight = _require(tensors, "patch_embed.proj.weight", path)
    class_token = "cls_token" in tensors
    arch = {
        "patch_size": int(weight.shape[-1]),
        "hidden_size": int(weight.shape[0]),
        "num_layers": _count_blocks(tensors, r"blocks\.(\d+)\.", path),
        "num_heads": None,
        "mlp_dim": int(_require(tensors, "blocks.0.mlp.fc1.weight", path).shape[0]),
        "channels": int(weight.shape[1]),
        "class_token": class_token,
        "pooling": "token" if class_token else "gap",
        "approximate_gelu": False,
        "layer_norm_epsilon": 1e-6,
    }
    return _with_top(arch, tensors, LAYOUTS["timm"], source_prefix, path=path)


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
    ),
    "timm": Layout(
        "timm", "safetensors", "patch_embed.proj.weight", ("head.weight", "head.bias"),
        ("pre_logits.fc.weight", "pre_logits.fc.bias"), "pos_embed", "bicubic", normalize_timm, timm_architecture,
    ),
}
_register_top(LAYOUTS["vit_jax"], torch_linear=False)
_register_top(LAYOUTS["hf"], torch_linear=True)
_register_top(LAYOUTS["timm"], torch_linear=True)


def read_checkpoint(path, fmt):
    """Reads a file of format `fmt` ("npz", "safetensors", "hf_directory").

    Returns (layout, tensors, names, source_prefix_tokens, architecture), `layout` a `Layout`.
    """
    config, config_path = None, None
    if fmt == "npz":
        raw = read_npz(path)
        candidates = [LAYOUTS["vit_jax"]]
    else:
        if fmt == "hf_directory":
            config_path = os.path.join(path, "config.json")
            path = os.path.join(path, "model.safetensors")
        else:
            config_path = os.path.join(os.path.dirname(os.path.abspath(path)), "config.json")
        raw = read_safetensors(path)
        candidates = [LAYOUTS["hf"], LAYOUTS["timm"]]
    for layout in candidates:
        tensors, names, source_prefix = layout.normalize(raw)
        if layout.marker not in tensors and len(candidates) > 1:
            continue
        if layout.name == "hf":
            config = read_hf_config(config_path, path)
            path = config_path  # its errors name the config, where the architecture is written
        arch = layout.architecture(tensors, source_prefix, config, path)
        return layout, tensors, names, source_prefix, {field: arch[field] for field in ARCHITECTURE_FIELDS}
    raise CheckpointError(
        f"Safetensors file {path!r} holds neither Hugging Face ViT keys (embeddings.patch_embeddings...) "
        "nor timm ViT keys (patch_embed.proj.weight)."
    )


def read_hf_config(config_path, weights_path):
    """The config.json of a Hugging Face checkpoint as a dict; CheckpointError naming the file otherwise."""
    if not os.path.isfile(config_path):
        raise CheckpointError(
            f"Hugging Face checkpoint {weights_path!r} needs its config.json next to it (for LayerNorm "
            f"epsilon, heads and activation); {config_path!r} does not exist."
        )
    try:
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
    except (ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"Hugging Face config {config_path!r} is not valid JSON: {error}") from error
    if not isinstance(config, dict) or not config:
        raise CheckpointError(
            f"Hugging Face config {config_path!r} holds {type(config).__name__} {str(config)[:40]!r}; expected a "
            "JSON object with hidden_size, num_hidden_layers, num_attention_heads, intermediate_size."
        )
    return config
