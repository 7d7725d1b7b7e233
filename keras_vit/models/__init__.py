"""Functional model builders: the generic `ViT` and one thin builder per variant."""

from keras_vit.models.vit import (
    ViT,
    ViT_B8,
    ViT_B16,
    ViT_B32,
    ViT_H14,
    ViT_L16,
    ViT_L32,
    ViT_S16,
    ViT_S32,
    ViT_Ti16,
)

__all__ = ["ViT", "ViT_B8", "ViT_B16", "ViT_B32", "ViT_H14", "ViT_L16", "ViT_L32", "ViT_S16", "ViT_S32", "ViT_Ti16"]
