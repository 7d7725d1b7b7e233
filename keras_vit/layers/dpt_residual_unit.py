"""DPTResidualUnit: the pre-activation residual convolution unit of DPT's fusion blocks."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_positive_int


@keras.saving.register_keras_serializable(package="keras_vit")
class DPTResidualUnit(keras.layers.Layer):
    """x + conv2(relu(conv1(relu(x)))), both convolutions 3x3 with bias, `channels` wide.

    Sublayer names: `conv1`, `conv2`.

    Args:
        channels: int. Width of the input and of both convolutions.

    Example:

    >>> import numpy as np
    >>> tuple(DPTResidualUnit(8)(np.zeros((1, 3, 5, 8), "float32")).shape)
    (1, 3, 5, 8)
    """

    def __init__(self, channels, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("channels", channels)
        self.channels = channels
        self.conv1, self.conv2 = (
            keras.layers.Conv2D(channels, 3, padding="same", dtype=self.dtype_policy, name=name)
            for name in ("conv1", "conv2")
        )

    def build(self, input_shape):
        shape = tuple(input_shape)[:3] + (self.channels,)
        self.conv1.build(shape)
        self.conv2.build(shape)

    def call(self, inputs):
        return inputs + self.conv2(ops.relu(self.conv1(ops.relu(inputs))))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "channels": self.channels}
