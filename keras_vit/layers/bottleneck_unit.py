"""BottleneckUnit: the residual unit of the BiT ResNet stem of the ViT hybrids."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_divisible, check_positive_int
from keras_vit.layers.standardized_conv import StandardizedConv2D

GROUPS = 32


@keras.saving.register_keras_serializable(package="keras_vit")
class BottleneckUnit(keras.layers.Layer):
    """ResNet bottleneck unit with weight-standardised convolutions and GroupNorm.

    relu(shortcut + gn3(conv3(relu(gn2(conv2(relu(gn1(conv1(x))))))))): conv1 1x1 to `filters`,
    conv2 3x3 carrying the stride, conv3 1x1 to 4 * `filters`. The shortcut is
    gn_proj(conv_proj(x)) (1x1, strided) when the stride is not 1 or the input does not have
    4 * `filters` channels, else the identity. Sublayer names follow the original checkpoints
    (conv1, gn1, ..., conv_proj, gn_proj); gn3's scale starts at zero so a fresh unit is an
    identity-like residual.

    Args:
        filters: int. Bottleneck width; the unit outputs 4 * filters channels. Must be a
            multiple of 32 (the GroupNorm groups).
        strides: int. Stride of conv2 and of the projection. Defaults to 1.
        epsilon: float. GroupNorm epsilon. Defaults to 1e-6.
        standardization_epsilon: float. Epsilon of the weight standardisation. Defaults to 1e-5.

    Example:

    >>> import numpy as np
    >>> tuple(BottleneckUnit(32, strides=2)(np.zeros((1, 8, 8, 32), "float32")).shape)
    (1, 4, 4, 128)
    """

    def __init__(self, filters, strides=1, epsilon=1e-6, standardization_epsilon=1e-5, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("filters", filters)
        check_divisible("filters", filters, "the GroupNorm groups", GROUPS)
        check_positive_int("strides", strides)
        self.filters = filters
        self.strides = strides
        self.epsilon = epsilon
        self.standardization_epsilon = standardization_epsilon
        out = 4 * filters
        self.conv1, self.gn1 = self._conv(filters, 1, "conv1"), self._norm("gn1")
        self.conv2, self.gn2 = self._conv(filters, 3, "conv2", strides), self._norm("gn2")
        self.conv3, self.gn3 = self._conv(out, 1, "conv3"), self._norm("gn3", gamma="zeros")
        self.conv_proj = self.gn_proj = None

    def _conv(self, width, size, name, strides=1):
        return StandardizedConv2D(
            width, size, strides=strides, epsilon=self.standardization_epsilon, dtype=self.dtype_policy, name=name
        )

    def _norm(self, name, gamma="ones"):
        return keras.layers.GroupNormalization(
            GROUPS, epsilon=self.epsilon, gamma_initializer=gamma, dtype=self.dtype_policy, name=name
        )

    def build(self, input_shape):
        if len(input_shape) != 4 or input_shape[-1] is None:
            raise ValueError(
                f"BottleneckUnit expects feature maps (batch, height, width, channels) with known "
                f"channels, got input_shape={tuple(input_shape)}."
            )
        # The projection exists only where the checkpoints have one: unit 1 of each stage.
        if self.strides != 1 or input_shape[-1] != 4 * self.filters:
            self.conv_proj = self._conv(4 * self.filters, 1, "conv_proj", self.strides)
            self.gn_proj = self._norm("gn_proj")
        shape = tuple(input_shape)
        for conv, norm in ((self.conv1, self.gn1), (self.conv2, self.gn2), (self.conv3, self.gn3)):
            conv.build(shape)
            shape = conv.compute_output_shape(shape)
            norm.build(shape)
        if self.conv_proj is not None:
            self.conv_proj.build(tuple(input_shape))
            self.gn_proj.build(self.conv_proj.compute_output_shape(tuple(input_shape)))
        super().build(input_shape)

    def call(self, inputs):
        y = ops.relu(self.gn1(self.conv1(inputs)))
        y = ops.relu(self.gn2(self.conv2(y)))
        y = self.gn3(self.conv3(y))
        shortcut = self.gn_proj(self.conv_proj(inputs)) if self.conv_proj is not None else inputs
        return ops.relu(ops.cast(shortcut, y.dtype) + y)

    def compute_output_shape(self, input_shape):
        return self.conv2.compute_output_shape(tuple(input_shape))[:3] + (4 * self.filters,)

    def get_config(self):
        return {
            **super().get_config(),
            "filters": self.filters,
            "strides": self.strides,
            "epsilon": self.epsilon,
            "standardization_epsilon": self.standardization_epsilon,
        }
