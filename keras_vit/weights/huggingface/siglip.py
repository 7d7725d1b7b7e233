"""Hugging Face SigLIP and SigLIP 2 (`SiglipVisionModel`, `Siglip2VisionModel`, their two-tower models' image towers).

SigLIP's tower has no class token and pools with attention (`head.probe`); it names its keys as
CLIP does. SigLIP 2's fixed-resolution checkpoints are model_type "siglip"; model_type
"siglip2" is the NaFlex variant (a Linear patch embedding, any aspect).
"""

import dataclasses

import numpy as np

from keras_vit.layers.naflex_patch_encoder import NAFLEX_INTERPOLATION
from keras_vit.weights.config_json import config_value
from keras_vit.weights.files import CheckpointError
from keras_vit.weights.huggingface.clip import RENAMES, TEXT_TOWER
from keras_vit.weights.huggingface.family import HFFamily
from keras_vit.weights.resample import square_grid


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


def _siglip2_linear_patches(tensors):
    """The patch kernel as SigLIP 2 stores it: a Linear (out, P*P*C) on patches in (row, column, channel) order."""
    key = "embeddings.patch_embeddings.projection.weight"
    kernel = np.asarray(tensors[key])  # a Conv2d weight (out, C, P, P)
    tensors[key] = kernel.transpose(0, 2, 3, 1).reshape(kernel.shape[0], -1)


_SIGLIP = HFFamily(
    ("vision_model.",), RENAMES, TEXT_TOWER, 0,
    {"hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6, "image_size": 224, "patch_size": 16},
    _siglip_family, vision_key="vision_config", nested=True,
)


_SIGLIP2 = dataclasses.replace(
    _SIGLIP, defaults={"hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6, "patch_size": 16},
    architecture=_siglip2_family, interpolation=NAFLEX_INTERPOLATION, ungroup=_siglip2_linear_patches,
    refused=(("classifier.weight", "a Siglip2ForImageClassification head (a Linear on the mean of the real patch "
              "tokens, beside an attention-pooling head it leaves unused), which keras_vit does not read. Supported "
              "Hugging Face SigLIP 2 classes: Siglip2VisionModel, Siglip2Model (its image tower)"),),
)
FAMILIES = {"siglip": _SIGLIP, "siglip_vision_model": _SIGLIP, "siglip2": _SIGLIP2, "siglip2_vision_model": _SIGLIP2}
