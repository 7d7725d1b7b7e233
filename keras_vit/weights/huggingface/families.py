"""Every Hugging Face family keras_vit reads, by `model_type`: one module per family, each with its records.

A new family is a module beside these (its `FAMILIES`: model_type -> `HFFamily`) and its name in
`_MODULES`.

Example:

>>> sorted(HF_FAMILIES)[:4]
['clip', 'clip_vision_model', 'deit', 'dinov2']
>>> hf_family({"model_type": "dinov2"}, "config.json") is HF_FAMILIES["dinov2"]
True
"""

from __future__ import annotations

from keras_vit.weights.config_json import config_value
from keras_vit.weights.files import CheckpointError
from keras_vit.weights.huggingface import clip, deit, dinov2, dinov3, siglip, vit, vit_mae

_MODULES = (vit, deit, dinov2, dinov3, siglip, clip, vit_mae)
# model_type (config.json) -> family.
HF_FAMILIES = {model_type: family for module in _MODULES for model_type, family in module.FAMILIES.items()}


# Hugging Face's DepthAnythingForDepthEstimation: a backbone (read as its family) and a DPT decoder
# (keras_vit.weights.depth_anything).
DEPTH_MODEL_TYPE = "depth_anything"


def hf_family(config, path):
    """The `HFFamily` of a config.json, refused naming its model_type when there is none."""
    model_type = config_value(config, "model_type", path, "name", "vit")
    if model_type not in HF_FAMILIES:
        hint = " A depth model: keras_vit.DepthEstimator(weights=...) reads it." if model_type == DEPTH_MODEL_TYPE else ""
        raise CheckpointError(
            f"Hugging Face config {path!r}: model_type={model_type!r} is not a family keras_vit builds; "
            f"supported model_type values: {sorted(HF_FAMILIES)}.{hint}"
        )
    return HF_FAMILIES[model_type]
