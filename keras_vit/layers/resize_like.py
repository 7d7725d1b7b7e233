"""ResizeLike: resizes feature maps to another tensor's height and width (logits on the patch grid to the image)."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_choice

INTERPOLATIONS = ("bilinear", "nearest", "bicubic")


@keras.saving.register_keras_serializable(package="keras_vit")
class ResizeLike(keras.layers.Layer):
    """Resizes maps (B, h, w, C) to the height and width of `reference` (B, H, W, ...), channels last.

    The size is read from the reference at each call, so one layer serves every image size
    (dense heads upsample their patch-grid output to the image this way). Bilinear resizing is
    half-pixel centred, as PyTorch's `interpolate(..., align_corners=False)` and mmsegmentation's
    heads with `align_corners=False` compute it.

    Args:
        interpolation: str. "bilinear", "nearest" or "bicubic". Defaults to "bilinear".

    Example:

    >>> import numpy as np
    >>> logits, image = np.ones((2, 3, 5, 4), "float32"), np.zeros((2, 12, 20, 3), "uint8")
    >>> tuple(ResizeLike()(logits, image).shape)
    (2, 12, 20, 4)
    """

    def __init__(self, interpolation="bilinear", **kwargs):
        super().__init__(**kwargs)
        check_choice("interpolation", interpolation, INTERPOLATIONS)
        self.interpolation = interpolation

    def call(self, maps, reference):
        dynamic = ops.shape(reference)
        size = tuple(reference.shape[axis] if reference.shape[axis] is not None else dynamic[axis] for axis in (1, 2))
        return ops.image.resize(maps, size, interpolation=self.interpolation, data_format="channels_last")

    def compute_output_shape(self, maps_shape, reference_shape):
        return (maps_shape[0], reference_shape[1], reference_shape[2], maps_shape[-1])

    def get_config(self):
        return {**super().get_config(), "interpolation": self.interpolation}
