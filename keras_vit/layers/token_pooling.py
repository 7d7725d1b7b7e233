"""TokenPooling: reduce the token sequence to one vector for the head."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_choice

POOLINGS = ("token", "gap", "max")


@keras.saving.register_keras_serializable(package="keras_vit")
class TokenPooling(keras.layers.Layer):
    """Pools tokens (B, T, D) to (B, D): the class token, or the mean or maximum of the patch tokens.

    Args:
        mode: str. "token" takes token 0 (the class token); "gap" averages the tokens after
            the first `num_prefix_tokens`, "max" takes their maximum. Defaults to "token".
        num_prefix_tokens: int. Leading non-patch tokens (1 with a class token, else 0).
            Defaults to 1.

    Example:

    >>> import numpy as np
    >>> tuple(TokenPooling("gap", num_prefix_tokens=1)(np.ones((2, 5, 8), "float32")).shape)
    (2, 8)
    """

    def __init__(self, mode="token", num_prefix_tokens=1, **kwargs):
        super().__init__(**kwargs)
        check_choice("pooling", mode, POOLINGS)
        if mode == "token" and num_prefix_tokens < 1:
            raise ValueError(
                "pooling='token' needs a class token, got num_prefix_tokens="
                f"{num_prefix_tokens!r}. Use class_token=True or pooling='gap'."
            )
        self.mode = mode
        self.num_prefix_tokens = num_prefix_tokens

    def call(self, tokens):
        if self.mode == "token":
            return tokens[:, 0]
        if self.mode == "max":
            return ops.max(tokens[:, self.num_prefix_tokens:], axis=1)
        return ops.mean(tokens[:, self.num_prefix_tokens:], axis=1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        return {**super().get_config(), "mode": self.mode, "num_prefix_tokens": self.num_prefix_tokens}
