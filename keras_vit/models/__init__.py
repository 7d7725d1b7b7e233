"""Functional model builders: the generic `ViT` and one thin builder per variant."""

from keras_vit.models.head import head_activation, outputs_probabilities
from keras_vit.models.mimetic import mimetic_initialization
from keras_vit.models.resnet import BiTResNet
from keras_vit.models.segmentation import LinearSegmenter, compile_segmenter, segmentation_metrics
from keras_vit.models.vit import (
    R26_ViT_B32,
    R26_ViT_S32,
    R50_ViT_B16,
    R50_ViT_L32,
    R_ViT_Ti16,
    ViT,
    ViT_B8,
    ViT_B16,
    ViT_B32,
    ViT_H14,
    ViT_e14,
    ViT_g14,
    ViT_G14,
    ViT_L16,
    ViT_L32,
    ViT_S16,
    ViT_S32,
    ViT_Ti16,
)

__all__ = [
    "BiTResNet",
    "compile_segmenter",
    "head_activation",
    "LinearSegmenter",
    "mimetic_initialization",
    "outputs_probabilities",
    "R26_ViT_B32",
    "R26_ViT_S32",
    "R50_ViT_B16",
    "R50_ViT_L32",
    "R_ViT_Ti16",
    "segmentation_metrics",
    "ViT", "ViT_B8", "ViT_B16", "ViT_B32", "ViT_H14", "ViT_g14", "ViT_G14", "ViT_e14", "ViT_L16", "ViT_L32", "ViT_S16", "ViT_S32", "ViT_Ti16"]
