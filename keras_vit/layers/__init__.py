"""Keras layers that make up a Vision Transformer; each is serializable under package keras_vit."""

from keras_vit.layers.attention_pooling import AttentionPooling
from keras_vit.layers.bottleneck_unit import BottleneckUnit
from keras_vit.layers.dino_head import DinoHead
from keras_vit.layers.drop_path import DropPath
from keras_vit.layers.dpt_depth_head import DPTDepthHead
from keras_vit.layers.dpt_fusion import DPTFusion
from keras_vit.layers.dpt_reassemble import DPTReassemble
from keras_vit.layers.dpt_residual_unit import DPTResidualUnit
from keras_vit.layers.inference_mode import InferenceMode
from keras_vit.layers.layer_scale import LayerScale
from keras_vit.layers.mask_tokens import MaskTokens
from keras_vit.layers.naflex_patch_encoder import NaFlexPatchEncoder
from keras_vit.layers.patch_encoder import PatchEncoder, sincos2d_embedding
from keras_vit.layers.patches import Patches
from keras_vit.layers.projection_head import ProjectionHead
from keras_vit.layers.random_masking import RandomPatchMasking
from keras_vit.layers.resize_like import ResizeLike
from keras_vit.layers.rotary_embedding import RotaryPositionEmbedding
from keras_vit.layers.self_attention import MultiHeadSelfAttention
from keras_vit.layers.shifted_patches import ShiftedPatches
from keras_vit.layers.standardized_conv import StandardizedConv2D
from keras_vit.layers.text_embedding import TextEmbedding
from keras_vit.layers.text_pooling import TextPooling
from keras_vit.layers.token_map import TokenMap
from keras_vit.layers.token_pooling import TokenPooling
from keras_vit.layers.transformer_block import TransformerBlock

__all__ = [
    "AttentionPooling",
    "BottleneckUnit",
    "DinoHead",
    "DPTDepthHead",
    "DPTFusion",
    "DPTReassemble",
    "DPTResidualUnit",
    "DropPath",
    "InferenceMode",
    "LayerScale",
    "MaskTokens",
    "MultiHeadSelfAttention",
    "NaFlexPatchEncoder",
    "ShiftedPatches",
    "PatchEncoder",
    "Patches",
    "ProjectionHead",
    "RandomPatchMasking",
    "ResizeLike",
    "RotaryPositionEmbedding",
    "StandardizedConv2D",
    "TextEmbedding",
    "TextPooling",
    "TokenMap",
    "TokenPooling",
    "TransformerBlock",
    "sincos2d_embedding",
]
