"""Hugging Face CLIP (`CLIPVisionModel`, `CLIPModel`'s image tower): pre-norm, no patch bias, a projection.

Its key names (`RENAMES`) are SigLIP's too. `TEXT_TOWER` matches the keys of the text tower and
of the two towers' scalars, which the image tower's reader skips (text towers: `keras_vit.text`).
"""

from keras_vit.weights.huggingface.family import HFFamily


def _architecture(tensors, config, path):
    projection = tensors.get("visual_projection.weight")
    return {
        "pre_norm": True, "patch_bias": False,
        "projection_size": int(projection.shape[0]) if projection is not None else None,
    }


RENAMES = (
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


TEXT_TOWER = (r"^text_model\.", r"^text_projection\.", r"^logit_scale$", r"^logit_bias$", r"position_ids$")


_CLIP = HFFamily(
    ("vision_model.",), RENAMES, TEXT_TOWER, 1,
    {"hidden_act": "quick_gelu", "layer_norm_eps": 1e-5, "image_size": 224, "patch_size": 32},
    _architecture, vision_key="vision_config", nested=True,
)
FAMILIES = {"clip": _CLIP, "clip_vision_model": _CLIP}
