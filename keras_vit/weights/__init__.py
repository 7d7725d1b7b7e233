"""Pretrained weights: readers for vit_jax `.npz`, Hugging Face and timm checkpoints (files, folders,
Hub ids), `save_npz`, `save_hf` (a Hugging Face `save_pretrained` folder) and `save_timm` (a timm
Hub folder), the preprocessing a checkpoint states, position-embedding resampling and a registry
of named public checkpoints.

Example:

>>> import numpy as np
>>> from keras_vit.weights import resample_position_embedding
>>> resample_position_embedding(np.zeros((1, 1 + 4 * 4, 8)), (6, 6)).shape
(1, 37, 8)
"""

from keras_vit.layers.grid_resampling import INTERPOLATIONS
from keras_vit.weights.files import CheckpointError, detect_format, read_npz, read_safetensors, write_safetensors
from keras_vit.weights.formats import LAYOUTS
from keras_vit.weights.hf_writer import save_hf
from keras_vit.weights import hub
from keras_vit.weights.layout import Layout
from keras_vit.weights.loader import Checkpoint, load_weights, save_npz
from keras_vit.weights.depth_anything import read_depth_anything
from keras_vit.weights.mapping import Entry, MappingContext, register_layer_mapping
from keras_vit.weights.preprocessing import Preprocessing
from keras_vit.weights.registry import CHECKPOINTS, CheckpointSpec, fetch_checkpoint
from keras_vit.weights.resample import resample_position_embedding, resize_patch_kernel
from keras_vit.weights.timm_writer import save_timm

__all__ = [
    "CHECKPOINTS",
    "Checkpoint",
    "CheckpointError",
    "CheckpointSpec",
    "Entry",
    "INTERPOLATIONS",
    "LAYOUTS",
    "Layout",
    "MappingContext",
    "Preprocessing",
    "detect_format",
    "fetch_checkpoint",
    "hub",
    "load_weights",
    "read_depth_anything",
    "read_npz",
    "read_safetensors",
    "register_layer_mapping",
    "resample_position_embedding",
    "resize_patch_kernel",
    "save_hf",
    "save_npz",
    "save_timm",
    "write_safetensors",
]
