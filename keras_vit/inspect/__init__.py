"""See what a ViT learned: attention maps and rollout, attention distance, position and patch embeddings.

Functions return NumPy arrays; `keras_vit.inspect.plots` draws them (needs matplotlib, the
`plot` extra). `keras-vit inspect MODEL [IMAGE...] --out DIR` writes every figure.

Example:

>>> import numpy as np, keras_vit
>>> from keras_vit import inspect
>>> model = keras_vit.ViT("tiny", num_classes=3)
>>> inspect.attention_maps(model, np.zeros((1, 32, 32, 3))).shape
(2, 1, 2, 65, 65)
"""

from keras_vit.inspect.analysis import (
    HEAD_FUSIONS,
    attention_distances,
    attention_rollout,
    mean_attention_distance,
    neighbour_contrast,
    patch_embedding_filters,
    position_embedding_similarity,
    position_embeddings,
    probe_maps,
    probe_readout,
    readout_to_grid,
    rollout_maps,
    rollout_to_grid,
    upsample_maps,
)
from keras_vit.inspect.attention import (
    attention_maps,
    attention_model,
    has_probe,
    patch_encoder,
    probe_attention,
    token_layout,
    transformer_blocks,
)

__all__ = [
    "HEAD_FUSIONS",
    "attention_distances",
    "attention_maps",
    "attention_model",
    "attention_rollout",
    "has_probe",
    "mean_attention_distance",
    "neighbour_contrast",
    "patch_embedding_filters",
    "patch_encoder",
    "position_embedding_similarity",
    "position_embeddings",
    "probe_attention",
    "probe_maps",
    "probe_readout",
    "readout_to_grid",
    "rollout_maps",
    "rollout_to_grid",
    "token_layout",
    "transformer_blocks",
    "upsample_maps",
]
