"""Hugging Face text towers (`CLIPModel`'s, `SiglipModel`'s, `Siglip2Model`'s): their keys, read and written.

A two-tower file keeps the text tower under "text_model." and, beside it, CLIP's
`text_projection.weight` and the scalars `logit_scale` (and SigLIP's `logit_bias`). The blocks are
named as the image tower's (`keras_vit.weights.huggingface.clip.RENAMES`) and read through the
same block mapping; the embedding, the final LayerNorm and the projection have mappings of the
layout "hf_text" here, by the text tower's layer names (`keras_vit.text.text_tower`).

Example:

>>> text_key("text_model.encoder.layers.1.mlp.fc1.weight"), text_key("vision_model.head.probe")
('encoder.layer.1.intermediate.dense.weight', None)
>>> file_key("encoder.layer.1.intermediate.dense.weight")
'text_model.encoder.layers.1.mlp.fc1.weight'
"""

from __future__ import annotations

from keras_vit.weights.huggingface.clip import RENAMES
from keras_vit.weights.huggingface.family import HFFamily
from keras_vit.weights.huggingface.layout import hf_block_entries, rename_hf_key
from keras_vit.weights.layout import block_index
from keras_vit.weights.mapping import Entry, register_layer_mapping
from keras_vit.weights.torch_entries import dense_entries, norm_entries

LAYOUT_NAME = "hf_text"
PREFIX = "text_model."
# Keys beside the tower, kept as they are: CLIP's projection (no bias).
TOP_LEVEL = ("text_projection.",)
SCALARS = ("logit_scale", "logit_bias")
# The blocks' rows of CLIP's renames: the text tower names its blocks as the image tower does.
TEXT_FAMILY = HFFamily((PREFIX,), tuple(row for row in RENAMES if row[0].startswith("encoder.layers.")), (), 0, {},
                       None)


def text_key(key):
    """A file key of the text tower -> its canonical name; None for a key of another tower or a scalar."""
    if key.startswith(TOP_LEVEL):
        return key
    if not key.startswith(PREFIX) or key.endswith("position_ids"):
        return None
    return rename_hf_key(key[len(PREFIX):], TEXT_FAMILY, to_canonical=True)


def file_key(key):
    """`text_key` undone: a canonical text-tower name -> the key a two-tower file stores."""
    if key.startswith(TOP_LEVEL):
        return key
    return PREFIX + rename_hf_key(key, TEXT_FAMILY, to_canonical=False)


def text_tensors(raw):
    """(canonical key -> array, canonical key -> file key) of the text tower in a two-tower file's tensors."""
    tensors, names = {}, {}
    for original, array in raw.items():
        key = text_key(original)
        if key is not None:
            tensors[key], names[key] = array, original
    return tensors, names


@register_layer_mapping(LAYOUT_NAME, "TextEmbedding")
def _embedding(layer, context):
    return [Entry("embeddings.token_embedding.weight", layer.token_embedding),
            Entry("embeddings.position_embedding.weight", layer.position_embedding)]


# The blocks: the image towers' Hugging Face block mapping (canonical ViT names).
register_layer_mapping(LAYOUT_NAME, "TransformerBlock",
                       lambda layer, context: hf_block_entries(layer, f"encoder.layer.{block_index(layer)}."))
register_layer_mapping(LAYOUT_NAME, "final_norm", lambda layer, context: norm_entries(layer, "final_layer_norm"))
register_layer_mapping(LAYOUT_NAME, "text_projection", lambda layer, context: dense_entries(layer, "text_projection"))
register_layer_mapping(LAYOUT_NAME, "head", lambda layer, context: dense_entries(layer, "head"))
