"""Hugging Face DINOv3 (`DINOv3ViTModel`): rotary position, no learned embedding, a gated MLP kept in three parts."""

import re

import numpy as np

from keras_vit.layers.rotary_embedding import rope_settings
from keras_vit.weights.config_json import config_value
from keras_vit.weights.files import CheckpointError
from keras_vit.weights.huggingface.family import HFFamily


# DINOv3's query_bias, key_bias, value_bias (config.json) -> keras_vit's qkv_bias.
DINOV3_QKV_BIASES = {(True, True, True): "qkv", (True, False, True): "qv", (False, False, False): "none"}


def _architecture(tensors, config, path):
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


_RENAMES = (
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
FAMILIES = {
    # DINOv3ViTModel (and its Backbone): blocks under "model." in memory, saved as "layer.{i}" by transformers 5.
    "dinov3_vit": HFFamily(
        ("model.",), _RENAMES, (r"^embeddings\.mask_token$",), 0,
        {"hidden_act": "gelu", "layer_norm_eps": 1e-5, "image_size": 224, "patch_size": 16}, _architecture,
        regroup=_dinov3_gated_mlp, activations={"gelu": ("gelu", False), "silu": ("swiglu", False)},
        ungroup=_dinov3_split_mlp,
    ),
}
