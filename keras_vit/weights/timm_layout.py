"""The timm layout (a `VisionTransformer` or `Eva` state dict saved as safetensors): its record, layer mappings and reader.

Keys are timm's own (`patch_embed.proj.weight`, `blocks.{i}.attn.qkv.weight`, ...). A state dict
hides the head count (query, key and value fused) and any rotary position (computed, not
stored): a timm Hub folder's config.json states them (`keras_vit.weights.timm_names`), and a
contradiction between the two is refused.

Example:

>>> import numpy as np
>>> timm_position_prefix({"cls_token": np.zeros((1, 1, 8)), "pos_embed": np.zeros((1, 1 + 14 * 14, 8))})
1
>>> LAYOUT.head_keys, LAYOUT.interpolation
(('head.weight', 'head.bias'), 'bicubic')
"""

from __future__ import annotations

import re

import numpy as np

from keras_vit.configs import fold_pooling_fields
from keras_vit.weights.files import CheckpointError
from keras_vit.weights.layout import (
    Layout, attention_parts, block_index, count_blocks, embedding_entries, patch_kernel_entry, qkv_bias_of,
    register_top, require, with_top,
)
from keras_vit.weights.mapping import Entry, register_layer_mapping
from keras_vit.weights.resample import square_grid
from keras_vit.weights.timm_names import config_architecture
from keras_vit.weights.torch_entries import (
    dense_entries, flat, from_torch_conv, fused_attention_entries, fused_part, layer_scale_entries, norm_entries,
    reshape_to, to_torch_conv, to_torch_linear,
)


@register_layer_mapping("timm", "PatchEncoder")
def _timm_embedding(layer, context):
    kernel = patch_kernel_entry("patch_embed.proj.weight", layer, context, from_torch_conv, to_torch_conv)
    return embedding_entries(layer, context, kernel, LAYOUT.position_key, bias="patch_embed.proj.bias",
                             cls="cls_token", dist="dist_token", registers="reg_token")


@register_layer_mapping("timm", "TransformerBlock")
def _timm_block(layer, context):
    prefix = f"blocks.{block_index(layer)}."
    parts = attention_parts(layer)
    entries = []
    for norm, name in ((layer.norm1, "norm1"), (layer.norm2, "norm2")):
        entries += [Entry(prefix + name + ".weight", norm.gamma), Entry(prefix + name + ".bias", norm.beta)]
    if layer.qkv_bias == "qv":
        # timm's Eva (DINOv3 ...): a bias of their own for the query and the value, none for the key.
        entries += [Entry(prefix + f"attn.{part[0]}_bias", parts[part][1], reshape_to, flat)
                    for part in ("query", "value")]
        parts = {name: (kernel, None if name != "out" else bias) for name, (kernel, bias) in parts.items()}
    entries += fused_attention_entries(parts, prefix + "attn.qkv.weight", prefix + "attn.qkv.bias", prefix + "attn.proj")
    for dense, name in ((layer.mlp_dense_0, "mlp.fc1"), (layer.mlp_dense_1, "mlp.fc2")):
        entries += dense_entries(dense, prefix + name)
    if layer.mlp_hidden_norm is not None:
        entries += norm_entries(layer.mlp_hidden_norm, prefix + "mlp.norm")
    return entries + layer_scale_entries(layer, (prefix + "ls1.gamma", prefix + "ls2.gamma"))


@register_layer_mapping("timm", "AttentionPooling")
def _timm_attention_pooling(layer, context):
    parts = attention_parts(layer)
    query_weight, query_bias = fused_part(0, 1)
    return (
        [Entry("attn_pool.latent", layer.probe),
         Entry("attn_pool.q.weight", parts["query"][0], query_weight, to_torch_linear),
         Entry("attn_pool.q.bias", parts["query"][1], query_bias, flat)]
        + fused_attention_entries(parts, "attn_pool.kv.weight", "attn_pool.kv.bias", "attn_pool.proj", split_kv=True)
        + norm_entries(layer.norm, "attn_pool.norm")
        + dense_entries(layer.mlp_dense_0, "attn_pool.mlp.fc1") + dense_entries(layer.mlp_dense_1, "attn_pool.mlp.fc2")
    )


# timm has no NaFlex model: NaFlexPatchEncoder has no timm mapping.
register_layer_mapping("timm", "pre_norm", lambda layer, context: norm_entries(layer, "norm_pre"))


register_layer_mapping("timm", "encoder_norm", lambda layer, context: [
    Entry("norm.weight", layer.gamma), Entry("norm.bias", layer.beta)])
register_layer_mapping("timm", "fc_norm", lambda layer, context: norm_entries(layer, "fc_norm"))


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
    return tensors, names, timm_position_prefix(tensors)


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


def timm_position_prefix(tensors, grid=None):
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
    weight = require(tensors, "patch_embed.proj.weight", path)
    class_token = "cls_token" in tensors
    registers = int(tensors["reg_token"].shape[-2]) if "reg_token" in tensors else 0
    if registers and source_prefix > class_token + ("dist_token" in tensors):
        raise CheckpointError(
            f"Checkpoint {path!r} has position-embedding rows for its register tokens; keras_vit adds none to registers."
        )
    fc1 = require(tensors, "blocks.0.mlp.fc1.weight", path)
    fc2 = require(tensors, "blocks.0.mlp.fc2.weight", path)
    swiglu = int(fc1.shape[0]) == 2 * int(fc2.shape[1])
    pre_norm = "norm_pre.weight" in tensors
    arch = {
        "patch_size": int(weight.shape[-1]),
        "hidden_size": int(weight.shape[0]),
        "num_layers": count_blocks(tensors, r"blocks\.(\d+)\.", path),
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
        "qkv_bias": qkv_bias_of(tensors, "blocks.0.attn.q_bias", "blocks.0.attn.qkv.bias", "blocks.0.attn.v_bias"),
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
    arch = with_top(arch, tensors, LAYOUT, source_prefix, stated.pop("grid_size", None), path)
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


def read_arrays(raw, config, config_path, path):
    """Reads a timm state dict `raw`: what `keras_vit.weights.formats.read_checkpoint` returns.

    Args:
        raw: dict. The tensors as in the file.
        config: dict or None. The config.json of a timm Hub folder (one naming an `architecture`).
        config_path: str. Where `config` comes from, for messages.
        path: str. The weights file, for messages.
    """
    tensors, names, source_prefix = normalize_timm(raw)
    if config is None:
        return LAYOUT.read(tensors, names, source_prefix, None, path)
    source_prefix = timm_position_prefix(tensors, config_architecture(config, config_path).get("grid_size"))
    return LAYOUT.read(tensors, names, source_prefix, config, config_path)


LAYOUT = Layout(
    "timm", "safetensors", "patch_embed.proj.weight", ("head.weight", "head.bias"),
    ("pre_logits.fc.weight", "pre_logits.fc.bias"), "pos_embed", "bicubic", normalize_timm, timm_architecture,
    ("head_dist.weight", "head_dist.bias"),
)
register_top(LAYOUT, torch_linear=True)
