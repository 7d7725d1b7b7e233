"""Keras layers that make up a Vision Transformer; each is serializable under package keras_vit."""

from keras_vit.layers.drop_path import DropPath
from keras_vit.layers.patch_encoder import PatchEncoder, sincos2d_embedding
from keras_vit.layers.patches import Patches
from keras_vit.layers.token_pooling import TokenPooling
from keras_vit.layers.transformer_block import TransformerBlock

__all__ = ["DropPath", "PatchEncoder", "Patches", "TokenPooling", "TransformerBlock", "sincos2d_embedding"]
