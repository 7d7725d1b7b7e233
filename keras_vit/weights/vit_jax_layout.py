"""The vit_jax layout (Google `.npz`: vit_jax, AugReg, big_vision): its record, layer mappings and reader.

Canonical keys are the pre-Linen names without prefix: `embedding/kernel`, `cls`,
`Transformer/posembed_input/pos_embedding`, `Transformer/encoderblock_{i}/{LayerNorm_0,
MultiHeadDotProductAttention_1/{query,key,value,out}, LayerNorm_2, MlpBlock_3/Dense_{0,1}}/...`,
`Transformer/encoder_norm/...`, `pre_logits/...`, `head/...`. On reading, the `opt/target/` and
`params/` prefixes are dropped, Linen names (`MultiHeadDotProductAttention_0`, `LayerNorm_1`,
`MlpBlock_0`) are renamed, blocks stacked along a leading depth axis under
`Transformer/encoderblock/` are split, and big_vision's top-level `pos_embedding` (no class-token
row) moves to the canonical place. Messages name the file's keys.

Extension point for extra stem layers (e.g. a hybrid ResNet root before `embedding`): register
a function for the stem layer's class or name,
`register_layer_mapping("vit_jax", "MyStem", fn)` with `fn(layer, context) -> [Entry(key,
layer_variable, to_model, from_model), ...]`, keys as written in the file without prefix
(`conv_root/kernel`, `block1/unit1/gn1/scale`, ...); the walker calls it because the stem is
one of the model's named layers, and `save_npz` writes the same keys back.

Example:

>>> tensors, names, prefix = normalize_npz({"params/embedding/kernel": 0, "params/cls": 0})
>>> sorted(tensors), names["cls"], prefix, LAYOUT.interpolation
(['cls', 'embedding/kernel'], 'params/cls', 1, 'bilinear')
"""

from __future__ import annotations

import numpy as np

from keras_vit.weights.config_json import config_value
from keras_vit.weights.files import CheckpointError
from keras_vit.weights.hybrid import npz_stem_architecture
from keras_vit.weights.layout import (
    Layout, attention_parts, block_index, count_blocks, embedding_entries, patch_kernel_entry, qkv_bias_of,
    register_top, require, with_top,
)
from keras_vit.weights.mapping import Entry, register_layer_mapping


@register_layer_mapping("vit_jax", "PatchEncoder")
def _npz_embedding(layer, context):
    kernel = patch_kernel_entry("embedding/kernel", layer, context)
    return embedding_entries(layer, context, kernel, LAYOUT.position_key, bias="embedding/bias", cls="cls")


@register_layer_mapping("vit_jax", "TransformerBlock")
def _npz_block(layer, context):
    prefix = f"Transformer/encoderblock_{block_index(layer)}/"
    entries = []
    for norm, name in ((layer.norm1, "LayerNorm_0"), (layer.norm2, "LayerNorm_2")):
        entries += [Entry(prefix + name + "/scale", norm.gamma), Entry(prefix + name + "/bias", norm.beta)]
    for part, (kernel, bias) in attention_parts(layer).items():
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
    for part, (kernel, bias) in attention_parts(layer).items():
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
    kernel = require(tensors, "embedding/kernel", path)
    block = "Transformer/encoderblock_0/"
    class_token = "cls" in tensors
    arch = {
        "patch_size": int(kernel.shape[0]),
        "hidden_size": int(kernel.shape[-1]),
        "num_layers": count_blocks(tensors, r"Transformer/encoderblock_(\d+)/", path),
        "num_heads": int(require(tensors, block + "MultiHeadDotProductAttention_1/query/kernel", path).shape[1]),
        "mlp_dim": int(require(tensors, block + "MlpBlock_3/Dense_0/kernel", path).shape[1]),
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
    arch["qkv_bias"] = qkv_bias_of(tensors, *(attention + part + "/bias" for part in ("query", "key", "value")))
    arch.update(npz_stem_architecture(tensors))
    return with_top(arch, tensors, LAYOUT, source_prefix, path=path)


def read_arrays(raw, path):
    """Reads the arrays `raw` of a `.npz` file: what `keras_vit.weights.formats.read_checkpoint` returns.

    The `NPZ_NOTES` arrays (save_npz's) are read as its config, not as weights.
    """
    tensors, names, source_prefix = normalize_npz(raw)
    notes = {key: tensors.pop(key) for key in list(tensors) if key.startswith(NPZ_NOTES)}
    for key in notes:
        del names[key]
    return LAYOUT.read(tensors, names, source_prefix, notes, path)


LAYOUT = Layout(
    "vit_jax", "npz", "embedding/kernel", ("head/kernel", "head/bias"), ("pre_logits/kernel", "pre_logits/bias"),
    "Transformer/posembed_input/pos_embedding", "bilinear", normalize_npz, npz_architecture,
)
register_top(LAYOUT, torch_linear=False)
# A NaFlex model's encoder holds PatchEncoder's variables under the same names.
register_layer_mapping("vit_jax", "NaFlexPatchEncoder", _npz_embedding)
