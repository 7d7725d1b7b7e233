"""LayerScale: a learned per-channel scale on a residual branch (CaiT, DeiT-III, DINOv2)."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_positive_number


@keras.saving.register_keras_serializable(package="keras_vit")
class LayerScale(keras.layers.Layer):
    """Multiplies tokens (..., D) by a learned vector gamma (D,), initialised to `init_value`.

    Args:
        init_value: float. Initial value of every channel's scale (timm's `init_values`, e.g.
            1e-5 for DINOv2, 1e-6 for DeiT-III). Defaults to 1e-5.

    Example:

    >>> import numpy as np
    >>> layer = LayerScale(0.5)
    >>> layer(np.ones((1, 2, 4), "float32")).numpy()[0, 0].tolist()
    [0.5, 0.5, 0.5, 0.5]
    """

    def __init__(self, init_value=1e-5, **kwargs):
        super().__init__(**kwargs)
        check_positive_number("init_value", init_value)
        self.init_value = init_value

    def build(self, input_shape):
        if input_shape[-1] is None:
            raise ValueError(f"LayerScale needs a known channel axis, got input_shape={tuple(input_shape)}.")
        self.gamma = self.add_weight(
            name="gamma", shape=(input_shape[-1],), initializer=keras.initializers.Constant(self.init_value)
        )
        super().build(input_shape)

    def call(self, inputs):
        return inputs * ops.cast(self.gamma, inputs.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "init_value": self.init_value}
