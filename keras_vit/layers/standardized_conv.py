"""StandardizedConv2D: a convolution whose kernel is weight-standardised at run time (BiT)."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_choice, check_positive_int


@keras.saving.register_keras_serializable(package="keras_vit")
class StandardizedConv2D(keras.layers.Layer):
    """2-D convolution with weight standardisation, as in BiT and the ViT hybrids.

    The stored kernel stays raw; each call uses (w - mean) / (std + epsilon), mean and
    population std taken per output channel over the (height, width, input) axes. This is the
    formula of the original vit_jax / BiT checkpoints; timm and Hugging Face use
    (w - mean) / sqrt(var + 1e-8) instead, which differs by about epsilon / std. The
    standardisation runs in float32 under mixed precision.

    Args:
        filters: int. Output channels.
        kernel_size: int. Side of the square kernel.
        strides: int. Stride in both directions. Defaults to 1.
        padding: str. "same" (TensorFlow/Flax SAME: the extra pixel of an odd total padding
            goes to the bottom/right) or "valid". Defaults to "same".
        use_bias: bool. Add a bias. Defaults to False.
        epsilon: float. Added to the standard deviation. Defaults to 1e-5.
        kernel_initializer: initializer. Defaults to "he_normal".

    Example:

    >>> import numpy as np
    >>> tuple(StandardizedConv2D(8, 3, strides=2)(np.zeros((1, 7, 7, 3), "float32")).shape)
    (1, 4, 4, 8)
    """

    def __init__(
        self,
        filters,
        kernel_size,
        strides=1,
        padding="same",
        use_bias=False,
        epsilon=1e-5,
        kernel_initializer="he_normal",
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("filters", filters)
        check_positive_int("kernel_size", kernel_size)
        check_positive_int("strides", strides)
        check_choice("padding", padding, ("same", "valid"))
        if not isinstance(epsilon, (int, float)) or isinstance(epsilon, bool) or epsilon < 0:
            raise ValueError(f"Invalid epsilon={epsilon!r}. Expected a number >= 0.")
        self.filters = filters
        self.kernel_size = kernel_size
        self.strides = strides
        self.padding = padding
        self.use_bias = bool(use_bias)
        self.epsilon = epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, input_shape):
        channels = input_shape[-1]
        if len(input_shape) != 4 or channels is None:
            raise ValueError(
                f"StandardizedConv2D expects images (batch, height, width, channels) with known "
                f"channels, got input_shape={tuple(input_shape)}."
            )
        k = self.kernel_size
        # autocast=False: the standardisation must see the float32 kernel, not a bfloat16 copy.
        self.kernel = self.add_weight(
            name="kernel", shape=(k, k, channels, self.filters), initializer=self.kernel_initializer, autocast=False
        )
        if self.use_bias:
            self.bias = self.add_weight(name="bias", shape=(self.filters,), initializer="zeros")
        super().build(input_shape)

    def standardized_kernel(self):
        """Returns the kernel as the convolution uses it, in float32."""
        w = ops.convert_to_tensor(self.kernel.value, "float32")
        mean = ops.mean(w, axis=(0, 1, 2), keepdims=True)
        std = ops.sqrt(ops.mean(ops.square(w - mean), axis=(0, 1, 2), keepdims=True))
        return (w - mean) / (std + self.epsilon)

    def call(self, inputs):
        kernel = ops.cast(self.standardized_kernel(), self.compute_dtype)
        x = ops.conv(inputs, kernel, strides=self.strides, padding=self.padding)
        if self.use_bias:
            x = x + self.bias
        return x

    def compute_output_shape(self, input_shape):
        batch, height, width, _ = input_shape

        def out(size):
            if size is None:
                return None
            if self.padding == "same":
                return -(-size // self.strides)
            return (size - self.kernel_size) // self.strides + 1

        return (batch, out(height), out(width), self.filters)

    def get_config(self):
        return {
            **super().get_config(),
            "filters": self.filters,
            "kernel_size": self.kernel_size,
            "strides": self.strides,
            "padding": self.padding,
            "use_bias": self.use_bias,
            "epsilon": self.epsilon,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }
