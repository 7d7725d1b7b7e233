"""DPTReassemble: one backbone feature map brought to a DPT decoder stage's resolution and width."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_positive_int, check_positive_number


def resize_stride(factor):
    """The integer stride of a reassemble `factor`: n for an n-times upsampling, n for 1/n; ValueError otherwise."""
    check_positive_number("factor", factor)
    stride = factor if factor >= 1 else 1 / factor
    if abs(stride - round(stride)) > 1e-9:
        raise ValueError(
            f"Invalid factor={factor!r}: a reassemble factor is an integer n >= 1 (upsampling by a transposed "
            "convolution of stride n) or 1/n (downsampling by a 3x3 convolution of stride n), e.g. 4, 2, 1, 0.5."
        )
    return int(round(stride))


@keras.saving.register_keras_serializable(package="keras_vit")
class DPTReassemble(keras.layers.Layer):
    """Projects a feature map to `channels`, resizes it by `factor` and convolves it to `output_channels`.

    The reassemble stage and neck convolution of DPT (Ranftl et al., 2021) as Depth Anything
    builds them: a 1x1 convolution to `channels`; then for a factor n > 1 a transposed
    convolution of kernel and stride n (n times larger), for 1 nothing, for 1/n a 3x3
    convolution of stride n padded by one pixel on every side (ceil(h / n) rows); then a 3x3
    convolution without bias to `output_channels` (the fusion width). Sublayer names:
    `projection`, `resize`, `conv`.

    Args:
        channels: int. Width after the projection (Hugging Face's neck_hidden_sizes entry).
        factor: int or float. Resize factor: an integer n >= 1 or 1/n.
        output_channels: int. Width after the last convolution (fusion_hidden_size).

    Example:

    >>> import numpy as np
    >>> layer = DPTReassemble(8, 0.5, 16)
    >>> tuple(layer(np.zeros((1, 5, 7, 24), "float32")).shape)
    (1, 3, 4, 16)
    """

    def __init__(self, channels, factor, output_channels, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("channels", channels)
        check_positive_int("output_channels", output_channels)
        stride = resize_stride(factor)
        self.channels = channels
        self.factor = factor
        self.output_channels = output_channels
        self.projection = keras.layers.Conv2D(channels, 1, dtype=self.dtype_policy, name="projection")
        if factor > 1:
            self.resize = keras.layers.Conv2DTranspose(
                channels, stride, strides=stride, dtype=self.dtype_policy, name="resize")
        elif factor < 1:
            # PyTorch pads one pixel on every side; "same" would pad only after an even side.
            self.resize = keras.layers.Conv2D(channels, 3, strides=stride, dtype=self.dtype_policy, name="resize")
        else:
            self.resize = None
        self.conv = keras.layers.Conv2D(
            output_channels, 3, padding="same", use_bias=False, dtype=self.dtype_policy, name="conv")

    def build(self, input_shape):
        shape = tuple(input_shape)
        self.projection.build(shape)
        shape = shape[:3] + (self.channels,)
        if self.resize is not None:
            self.resize.build(shape)
        self.conv.build(shape)

    def call(self, inputs):
        x = self.projection(inputs)
        if self.factor < 1:
            x = self.resize(ops.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0))))
        elif self.resize is not None:
            x = self.resize(x)
        return self.conv(x)

    def compute_output_shape(self, input_shape):
        batch, height, width = tuple(input_shape)[:3]
        stride = resize_stride(self.factor)
        side = (lambda n: n * stride) if self.factor > 1 else (lambda n: (n - 1) // stride + 1)
        return (batch,) + tuple(None if n is None else side(n) for n in (height, width)) + (self.output_channels,)

    def get_config(self):
        return {**super().get_config(), "channels": self.channels, "factor": self.factor,
                "output_channels": self.output_channels}
