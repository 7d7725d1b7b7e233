"""TokenPooling: reduce the token sequence to one vector for the head."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_choice

POOLINGS = ("token", "gap", "max", "token_and_mean")
# Builder-level poolings that are layers of their own: "map" is `AttentionPooling`.
ALL_POOLINGS = POOLINGS + ("map",)


@keras.saving.register_keras_serializable(package="keras_vit")
class TokenPooling(keras.layers.Layer):
    """Pools tokens (B, T, D) to (B, D): the class token, or the mean or maximum of the patch tokens.

    Call with `padding_mask` (B, T) (True for real tokens) to leave padding tokens out of the
    mean and the maximum (SigLIP 2 NaFlex batches, as `Siglip2ForImageClassification` pools).

    Args:
        mode: str. "token" takes token 0 (the class token); "gap" averages the tokens after
            the first `num_prefix_tokens`, "max" takes their maximum; "token_and_mean"
            concatenates the class token and that mean, (B, 2D) (the DINOv2 linear-probe head,
            Hugging Face `Dinov2ForImageClassification`). Defaults to "token".
        num_prefix_tokens: int. Leading non-patch tokens (class, distillation and register
            tokens). Defaults to 1.
        token_index: int. The token "token" pooling takes: 0 the class token, 1 DeiT's
            distillation token. Defaults to 0.

    Example:

    >>> import numpy as np
    >>> tuple(TokenPooling("gap", num_prefix_tokens=1)(np.ones((2, 5, 8), "float32")).shape)
    (2, 8)
    """

    def __init__(self, mode="token", num_prefix_tokens=1, token_index=0, **kwargs):
        super().__init__(**kwargs)
        check_choice("pooling", mode, POOLINGS)
        if mode in ("token", "token_and_mean") and num_prefix_tokens < 1:
            raise ValueError(
                f"pooling={mode!r} needs a class token, got num_prefix_tokens="
                f"{num_prefix_tokens!r}. Use class_token=True or pooling='gap'."
            )
        if mode == "token" and not 0 <= token_index < num_prefix_tokens:
            raise ValueError(
                f"Invalid token_index={token_index!r}: expected a prefix token, 0 to {num_prefix_tokens - 1}."
            )
        self.mode = mode
        self.num_prefix_tokens = num_prefix_tokens
        self.token_index = token_index

    def call(self, tokens, padding_mask=None):
        if self.mode == "token":
            return tokens[:, self.token_index]
        patches = tokens[:, self.num_prefix_tokens:]
        if padding_mask is not None:
            mask = ops.cast(padding_mask, "bool")[:, self.num_prefix_tokens:, None]
            if self.mode == "max":
                return ops.max(ops.where(mask, patches, ops.cast(float("-inf"), patches.dtype)), axis=1)
            weights = ops.cast(mask, patches.dtype)
            mean = ops.sum(patches * weights, axis=1) / ops.maximum(ops.sum(weights, axis=1), 1.0)
        elif self.mode == "max":
            return ops.max(patches, axis=1)
        else:
            mean = ops.mean(patches, axis=1)
        if self.mode == "token_and_mean":
            return ops.concatenate([tokens[:, 0], mean], axis=-1)
        return mean

    def compute_output_shape(self, input_shape):
        width = input_shape[-1] if self.mode != "token_and_mean" or input_shape[-1] is None else 2 * input_shape[-1]
        return (input_shape[0], width)

    def get_config(self):
        return {
            **super().get_config(),
            "mode": self.mode,
            "num_prefix_tokens": self.num_prefix_tokens,
            "token_index": self.token_index,
        }
