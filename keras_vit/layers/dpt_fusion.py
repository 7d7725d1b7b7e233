"""DPTFusion: one feature-fusion block of DPT's decoder."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_bool, check_positive_int
from keras_vit.layers.align_corners import resize_align_corners
from keras_vit.layers.dpt_residual_unit import DPTResidualUnit


@keras.saving.register_keras_serializable(package="keras_vit")
class DPTFusion(keras.layers.Layer):
    """Fuses the decoder's running map with a finer stage's map, then upsamples and projects.

    x = inputs (+ residual_unit_1(residual) with `residual`); x = residual_unit_2(x); x resized
    bilinearly with aligned corners to the size of `reference` (the next stage's map), or to
    twice its size without one; then a 1x1 convolution (`projection`). The running map and the
    residual must have the same size: DPT's decoder resizes each block's output to the next
    stage's size (Hugging Face resizes a mismatched residual, which Depth Anything's
    reassemble sizes never produce).

    Args:
        channels: int. Width of the maps (Hugging Face's fusion_hidden_size).
        residual: bool. The block takes a residual map (every block but the first, which
            starts from the coarsest stage alone). Defaults to True.

    Example:

    >>> import numpy as np
    >>> fusion = DPTFusion(8)
    >>> x, finer = np.zeros((1, 3, 4, 8), "float32"), np.zeros((1, 6, 7, 8), "float32")
    >>> tuple(fusion(x, x, reference=finer).shape), tuple(DPTFusion(8, residual=False)(x).shape)
    ((1, 6, 7, 8), (1, 6, 8, 8))
    """

    def __init__(self, channels, residual=True, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("channels", channels)
        check_bool("residual", residual)
        self.channels = channels
        self.residual = residual
        self.residual_unit_1 = (
            DPTResidualUnit(channels, dtype=self.dtype_policy, name="residual_unit_1") if residual else None)
        self.residual_unit_2 = DPTResidualUnit(channels, dtype=self.dtype_policy, name="residual_unit_2")
        self.projection = keras.layers.Conv2D(channels, 1, dtype=self.dtype_policy, name="projection")

    def build(self, inputs_shape, residual_shape=None, reference_shape=None):
        shape = tuple(inputs_shape)[:3] + (self.channels,)
        for layer in (self.residual_unit_1, self.residual_unit_2, self.projection):
            if layer is not None:
                layer.build(shape)

    def call(self, inputs, residual=None, reference=None):
        if (residual is not None) != self.residual:
            raise ValueError(
                f"DPTFusion {self.name!r} was built with residual={self.residual} and called "
                f"{'with' if residual is not None else 'without'} a residual map.")
        x = inputs
        if residual is not None:
            x = x + self.residual_unit_1(residual)
        x = self.residual_unit_2(x)
        if reference is not None:
            size = ops.shape(reference)[1:3]
        else:
            size = [2 * side for side in ops.shape(x)[1:3]]
        return self.projection(resize_align_corners(x, size[0], size[1]))

    def compute_output_shape(self, inputs_shape, residual_shape=None, reference_shape=None):
        if reference_shape is not None:
            sides = tuple(reference_shape)[1:3]
        else:
            sides = tuple(None if n is None else 2 * n for n in tuple(inputs_shape)[1:3])
        return (tuple(inputs_shape)[0],) + sides + (self.channels,)

    def get_config(self):
        return {**super().get_config(), "channels": self.channels, "residual": self.residual}
