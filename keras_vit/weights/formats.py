"""The three checkpoint layouts keras_vit reads: Google `.npz`, Hugging Face and timm.

Each layout is a set of layer mappings (see `keras_vit.weights.mapping`) from the model's named
layers to checkpoint keys, plus a reader that brings the file's keys to the layout's canonical
naming and infers the architecture.

Google `.npz` (vit_jax, AugReg, big_vision). Canonical keys are the pre-Linen names without
prefix: `embedding/kernel`, `cls`, `Transformer/posembed_input/pos_embedding`,
`Transformer/encoderblock_{i}/{LayerNorm_0, MultiHeadDotProductAttention_1/{query,key,value,out},
LayerNorm_2, MlpBlock_3/Dense_{0,1}}/...`, `Transformer/encoder_norm/...`, `pre_logits/...`,
`head/...`. On reading, the `opt/target/` and `params/` prefixes are dropped, Linen names
(`MultiHeadDotProductAttention_0`, `LayerNorm_1`, `MlpBlock_0`) are renamed, blocks stacked along
a leading depth axis under `Transformer/encoderblock/` are split, and big_vision's top-level
`pos_embedding` (no class-token row) moves to the canonical place. Messages name the file's keys.

Extension point for extra stem layers (e.g. a hybrid ResNet root before `embedding`): register
a function for the stem layer's class or name,
`register_layer_mapping("npz", "MyStem", fn)` with `fn(layer, context) -> [Entry(npz_key,
layer_variable, to_model, from_model), ...]`, keys as written in the file without prefix
(`conv_root/kernel`, `block1/unit1/gn1/scale`, ...); the walker calls it because the stem is
one of the model's named layers, and `save_npz` writes the same keys back.
"""

from __future__ import annotations

import json
import math
import os
import re

import numpy as np

from keras_vit.weights.files import CheckpointError, read_npz, read_safetensors
from keras_vit.weights.hybrid import npz_stem_architecture
from keras_vit.weights.mapping import Entry, register_layer_mapping
from keras_vit.weights.resample import resample_position_embedding

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


# --------------------------------------------------------------------------------------------
# Google .npz


@register_layer_mapping("npz", "PatchEncoder")
def _npz_embedding(layer, context):
    entries = [Entry("embedding/kernel", layer.kernel), Entry("embedding/bias", layer.bias)]
    if layer.class_token:
        entries.append(Entry("cls", layer.cls))
    if layer.position_embedding == "learned":
        entries.append(_position_entry("Transformer/posembed_input/pos_embedding", layer, context))
    return entries


@register_layer_mapping("npz", "TransformerBlock")
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


@register_layer_mapping("npz", "encoder_norm")
def _npz_encoder_norm(layer, context):
    return [Entry("Transformer/encoder_norm/scale", layer.gamma), Entry("Transformer/encoder_norm/bias", layer.beta)]


def _npz_dense(name):
    def fn(layer, context):
        return [Entry(f"{name}/kernel", layer.kernel), Entry(f"{name}/bias", layer.bias)]

    return fn


register_layer_mapping("npz", "pre_logits", _npz_dense("pre_logits"))
register_layer_mapping("npz", "head", _npz_dense("head"))

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


def npz_architecture(tensors, source_prefix):
    """Builder arguments implied by a canonical `.npz` checkpoint."""
    kernel = _require(tensors, "embedding/kernel")
    depth = _count_blocks(tensors, r"Transformer/encoderblock_(\d+)/")
    block = "Transformer/encoderblock_0/"
    arch = {
        "patch_size": int(kernel.shape[0]),
        "hidden_size": int(kernel.shape[-1]),
        "num_layers": depth,
        "num_heads": int(_require(tensors, block + "MultiHeadDotProductAttention_1/query/kernel").shape[1]),
        "mlp_dim": int(_require(tensors, block + "MlpBlock_3/Dense_0/kernel").shape[1]),
        "channels": int(kernel.shape[2]),
        "class_token": "cls" in tensors,
        "approximate_gelu": True,
        "layer_norm_epsilon": 1e-6,
    }
    arch.update(npz_stem_architecture(tensors))
    return _with_top(arch, tensors, "head/bias", "pre_logits/bias", "Transformer/posembed_input/pos_embedding", source_prefix)


# --------------------------------------------------------------------------------------------
# Hugging Face transformers (ViTModel / ViTForImageClassification)


@register_layer_mapping("hf", "PatchEncoder")
def _hf_embedding(layer, context):
    entries = [
        Entry("embeddings.patch_embeddings.projection.weight", layer.kernel,
              lambda a, s: a.transpose(2, 3, 1, 0), lambda a: a.transpose(3, 2, 0, 1)),
        Entry("embeddings.patch_embeddings.projection.bias", layer.bias),
    ]
    if layer.class_token:
        entries.append(Entry("embeddings.cls_token", layer.cls))
    if layer.position_embedding == "learned":
        entries.append(_position_entry("embeddings.position_embeddings", layer, context))
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


def _torch_dense(name, weight="weight", bias="bias"):
    def fn(layer, context):
        return [Entry(f"{name}.{weight}", layer.kernel, _torch_linear), Entry(f"{name}.{bias}", layer.bias)]

    return fn


register_layer_mapping("hf", "encoder_norm", lambda layer, context: [
    Entry("layernorm.weight", layer.gamma), Entry("layernorm.bias", layer.beta)])
# HF keeps the ImageNet-21k pre-logits Dense + tanh as ViTModel's pooler.
register_layer_mapping("hf", "pre_logits", _torch_dense("pooler.dense"))
register_layer_mapping("hf", "head", _torch_dense("classifier"))


def normalize_hf(raw):
    tensors, names = {}, {}
    for original, array in raw.items():
        key = original[len("vit."):] if original.startswith("vit.") else original
        tensors[key], names[key] = array, original
    return tensors, names


def hf_architecture(tensors, config):
    """Builder arguments from a Hugging Face ViT config.json (and the tensors for the head)."""
    patch = config.get("patch_size", 16)
    image = config.get("image_size", 224)
    patch = patch[0] if isinstance(patch, (list, tuple)) else patch
    image = tuple(image) if isinstance(image, (list, tuple)) else (image, image)
    act = config.get("hidden_act", "gelu")
    if act not in ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        raise CheckpointError(f"Unsupported hidden_act={act!r} in the Hugging Face config.")
    arch = {
        "patch_size": int(patch),
        "hidden_size": int(config["hidden_size"]),
        "num_layers": int(config["num_hidden_layers"]),
        "num_heads": int(config["num_attention_heads"]),
        "mlp_dim": int(config["intermediate_size"]),
        "channels": int(config.get("num_channels", 3)),
        "class_token": True,
        "approximate_gelu": act != "gelu",
        "layer_norm_epsilon": float(config.get("layer_norm_eps", 1e-12)),
    }
    grid = (image[0] // arch["patch_size"], image[1] // arch["patch_size"])
    return _with_top(arch, tensors, "classifier.bias", "pooler.dense.bias", "embeddings.position_embeddings", 1, grid)


# --------------------------------------------------------------------------------------------
# timm (VisionTransformer state dict saved as safetensors)


@register_layer_mapping("timm", "PatchEncoder")
def _timm_embedding(layer, context):
    entries = [
        Entry("patch_embed.proj.weight", layer.kernel,
              lambda a, s: a.transpose(2, 3, 1, 0), lambda a: a.transpose(3, 2, 0, 1)),
        Entry("patch_embed.proj.bias", layer.bias),
    ]
    if layer.class_token:
        entries.append(Entry("cls_token", layer.cls))
    if layer.position_embedding == "learned":
        entries.append(_position_entry("pos_embed", layer, context))
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
register_layer_mapping("timm", "pre_logits", _torch_dense("pre_logits.fc"))
register_layer_mapping("timm", "head", _torch_dense("head"))


def timm_architecture(tensors):
    """Builder arguments implied by a timm state dict; the head count is not stored in it."""
    weight = _require(tensors, "patch_embed.proj.weight")
    hidden = int(weight.shape[0])
    arch = {
        "patch_size": int(weight.shape[-1]),
        "hidden_size": hidden,
        "num_layers": _count_blocks(tensors, r"blocks\.(\d+)\."),
        # timm's ViTs use heads of width 64 except H/14 (16 heads of 80).
        "num_heads": 16 if hidden == 1280 else max(hidden // 64, 1),
        "mlp_dim": int(_require(tensors, "blocks.0.mlp.fc1.weight").shape[0]),
        "channels": int(weight.shape[1]),
        "class_token": "cls_token" in tensors,
        "approximate_gelu": False,
        "layer_norm_epsilon": 1e-6,
    }
    return _with_top(arch, tensors, "head.bias", "pre_logits.fc.bias", "pos_embed", int("cls_token" in tensors))


# --------------------------------------------------------------------------------------------


def _require(tensors, key):
    if key not in tensors:
        raise CheckpointError(f"The checkpoint has no {key!r}: it does not look like a ViT checkpoint.")
    return tensors[key]


def _count_blocks(tensors, pattern):
    indices = {int(m.group(1)) for m in (re.match(pattern, key) for key in tensors) if m}
    if indices != set(range(len(indices))):
        raise CheckpointError(f"Block indices {sorted(indices)} are not 0..{len(indices) - 1}.")
    return len(indices)


def _with_top(arch, tensors, head_bias, pre_logits_bias, posemb_key, source_prefix, grid=None):
    arch["num_classes"] = int(tensors[head_bias].shape[0]) if head_bias in tensors else None
    arch["representation_size"] = int(tensors[pre_logits_bias].shape[0]) if pre_logits_bias in tensors else None
    if posemb_key in tensors:
        patches = tensors[posemb_key].shape[-2] - source_prefix
        if grid is None or grid[0] * grid[1] != patches:
            side = math.isqrt(patches)
            grid = (side, side)
        arch["position_embedding"] = "learned"
    else:
        arch["position_embedding"] = "none"
    arch["grid_size"] = grid
    if grid is not None:
        pixels = arch["patch_size"] * arch.get("stem_stride", 1)  # a hybrid's stem shrinks the image first
        arch["image_size"] = (grid[0] * pixels, grid[1] * pixels)
    return arch


def read_checkpoint_tensors(path, fmt):
    """Reads a file of format `fmt` ("npz", "safetensors", "hf_directory").

    Returns (layout, tensors, names, source_prefix_tokens, architecture).
    """
    if fmt == "npz":
        tensors, names, source_prefix = normalize_npz(read_npz(path))
        return "npz", tensors, names, source_prefix, npz_architecture(tensors, source_prefix)
    if fmt == "hf_directory":
        config_path = os.path.join(path, "config.json")
        path = os.path.join(path, "model.safetensors")
    else:
        config_path = os.path.join(os.path.dirname(os.path.abspath(path)), "config.json")
    raw = read_safetensors(path)
    if any("patch_embeddings.projection" in key for key in raw):
        tensors, names = normalize_hf(raw)
        config = {}
        if os.path.isfile(config_path):
            with open(config_path) as f:
                config = json.load(f)
        if not config:
            raise CheckpointError(
                f"Hugging Face checkpoint {path!r} needs its config.json next to it (for LayerNorm "
                "epsilon, heads and activation)."
            )
        return "hf", tensors, names, 1, hf_architecture(tensors, config)
    if "patch_embed.proj.weight" in raw:
        names = {key: key for key in raw}
        return "timm", raw, names, int("cls_token" in raw), timm_architecture(raw)
    raise CheckpointError(
        f"Safetensors file {path!r} holds neither Hugging Face ViT keys (embeddings.patch_embeddings...) "
        "nor timm ViT keys (patch_embed.proj.weight)."
    )
