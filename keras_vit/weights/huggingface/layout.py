"""The Hugging Face layout: its record, the layer mappings of its canonical names, and the family-aware reader.

Every family's keys (`keras_vit.weights.huggingface.families`) are renamed to the canonical
Hugging Face ViT names, so one set of layer mappings reads them all and `save_hf` writes them
back through the same tables (`rename_hf_key`, `hf_file_rank`).

Example:

>>> from keras_vit.weights.huggingface.families import HF_FAMILIES
>>> rename_hf_key("post_layernorm.weight", HF_FAMILIES["siglip"], to_canonical=True)
'layernorm.weight'
>>> LAYOUT.head_keys, LAYOUT.interpolation
(('classifier.weight', 'classifier.bias'), 'bicubic_hf')
"""

from __future__ import annotations

import dataclasses
import re

from keras_vit.weights.config_json import config_value
from keras_vit.weights.files import CheckpointError
from keras_vit.weights.huggingface.families import HF_FAMILIES, hf_family
from keras_vit.weights.huggingface.family import HF_ACTIVATIONS
from keras_vit.weights.layout import (
    Layout, attention_parts, block_index, embedding_entries, patch_kernel_entry, qkv_bias_of, register_top, with_top,
)
from keras_vit.weights.mapping import Entry, register_layer_mapping
from keras_vit.weights.torch_entries import (
    dense_entries, flat, from_torch_patch_kernel, fused_attention_entries, layer_scale_entries, linear_entry,
    norm_entries, reshape_to, to_torch_conv,
)


@register_layer_mapping("hf", "PatchEncoder")
def _hf_embedding(layer, context):
    kernel = patch_kernel_entry("embeddings.patch_embeddings.projection.weight", layer, context,
                                from_torch_patch_kernel, to_torch_conv)
    return embedding_entries(
        layer, context, kernel, LAYOUT.position_key, bias="embeddings.patch_embeddings.projection.bias",
        cls=("embeddings.cls_token", reshape_to),  # CLIP stores it as (D,)
        dist="embeddings.distillation_token", registers="embeddings.register_tokens")


@register_layer_mapping("hf", "AttentionPooling")
def _hf_attention_pooling(layer, context):
    parts = attention_parts(layer)
    return (
        [Entry("head.probe", layer.probe)]
        + fused_attention_entries(parts, "head.attention.in_proj_weight", "head.attention.in_proj_bias",
                                   "head.attention.out_proj")
        + norm_entries(layer.norm, "head.layernorm")
        + dense_entries(layer.mlp_dense_0, "head.mlp.fc1") + dense_entries(layer.mlp_dense_1, "head.mlp.fc2")
    )


# A NaFlex model's encoder holds PatchEncoder's variables under the same names.
register_layer_mapping("hf", "NaFlexPatchEncoder", _hf_embedding)
register_layer_mapping("hf", "pre_norm", lambda layer, context: norm_entries(layer, "pre_layernorm"))
register_layer_mapping("hf", "projection", lambda layer, context: dense_entries(layer, "visual_projection"))


@register_layer_mapping("hf", "TransformerBlock")
def _hf_block(layer, context):
    return hf_block_entries(layer, f"encoder.layer.{block_index(layer)}.")


def hf_block_entries(layer, prefix):
    """The entries of a `TransformerBlock` under Hugging Face ViT's names, each key starting with `prefix`."""
    parts = attention_parts(layer)
    keys = {
        "query": "attention.attention.query", "key": "attention.attention.key",
        "value": "attention.attention.value", "out": "attention.output.dense",
    }
    entries = []
    for norm, name in ((layer.norm1, "layernorm_before"), (layer.norm2, "layernorm_after")):
        entries += [Entry(prefix + name + ".weight", norm.gamma), Entry(prefix + name + ".bias", norm.beta)]
    for part, (kernel, bias) in parts.items():
        entries.append(linear_entry(prefix + keys[part] + ".weight", kernel, in_axes=2 if part == "out" else 1))
        if bias is not None:
            entries.append(Entry(prefix + keys[part] + ".bias", bias, reshape_to, flat))
    # DINOv2's SwiGLU MLP (gate and value packed in one Linear, gate first) has names of its own.
    mlp = ("mlp.weights_in", "mlp.weights_out") if layer.mlp_activation == "swiglu" else ("intermediate.dense", "output.dense")
    for dense, name in zip((layer.mlp_dense_0, layer.mlp_dense_1), mlp):
        entries += dense_entries(dense, prefix + name)
    return entries + layer_scale_entries(layer, (prefix + "layer_scale1.lambda1", prefix + "layer_scale2.lambda1"))


register_layer_mapping("hf", "encoder_norm", lambda layer, context: [
    Entry("layernorm.weight", layer.gamma), Entry("layernorm.bias", layer.beta)])


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


def hf_architecture(tensors, source_prefix, config, path):
    """Every architecture field from a Hugging Face ViT config.json (the head from the tensors)."""
    family = hf_family(config, path)
    config = family.vision_config(config, path)
    activations = family.activations or HF_ACTIVATIONS
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
    arch.setdefault("qkv_bias", qkv_bias_of(tensors, *(block + part + ".bias" for part in ("query", "key", "value"))))
    if "mlp_dim" not in arch:
        arch["mlp_dim"] = config_value(config, "intermediate_size", path, "size")
    grid = arch.pop("grid_size", None) or (image[0] // patch, image[1] // patch)
    return with_top(arch, tensors, LAYOUT, source_prefix, grid, path)


def read_hf_family(raw, config, config_path, path):
    """Reads the tensors `raw` of the Hugging Face family `config` (a config.json's dict) names; as `keras_vit.weights.formats.read_checkpoint`.

    Args:
        raw: dict. The tensors as in the file (a wrapping model's prefix, e.g. a depth model's
            "backbone.", already dropped).
        config: dict. The family's config (a config.json, or a wrapper's nested backbone_config).
        config_path: str. Where `config` comes from, for messages.
        path: str. The weights file or folder, for messages.
    """
    family = hf_family(config, config_path)
    tensors, names, source_prefix = normalize_hf(raw, family)
    for key, why in family.refused:
        if key in raw or any(original.endswith("." + key) for original in raw):
            raise CheckpointError(f"Checkpoint {path!r} has {key!r}: {why}.")
    record = LAYOUT
    if family.interpolation is not None:
        record = dataclasses.replace(record, interpolation=family.interpolation)
    return record.read(tensors, names, source_prefix, config, config_path)


LAYOUT = Layout(
    "hf", "safetensors", "embeddings.patch_embeddings.projection.weight",
    # HF keeps the ImageNet-21k pre-logits Dense + tanh as ViTModel's pooler.
    ("classifier.weight", "classifier.bias"), ("pooler.dense.weight", "pooler.dense.bias"),
    "embeddings.position_embeddings", "bicubic_hf", normalize_hf, hf_architecture,
    ("classifier_dist.weight", "classifier_dist.bias"),
)
register_top(LAYOUT, torch_linear=True)
