"""TextEmbedding: token and learned position embeddings of a text tower (CLIP, SigLIP)."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_positive_int


@keras.saving.register_keras_serializable(package="keras_vit")
class TextEmbedding(keras.layers.Layer):
    """Token ids (B, T) -> token embedding + position embedding of positions 0..T-1, (B, T, D).

    Args:
        vocab_size: int. Rows of the token table.
        hidden_size: int. Token width D.
        max_length: int. Rows of the position table: the longest sequence the tower takes
            (CLIP's 77, SigLIP's 64).

    Example:

    >>> import numpy as np
    >>> layer = TextEmbedding(100, 8, 16)
    >>> tuple(layer(np.array([[1, 2, 3]], "int32")).shape)
    (1, 3, 8)
    """

    def __init__(self, vocab_size, hidden_size, max_length, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("vocab_size", vocab_size)
        check_positive_int("hidden_size", hidden_size)
        check_positive_int("max_length", max_length)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.max_length = max_length

    def build(self, input_shape):
        if len(input_shape) != 2:
            raise ValueError(f"TextEmbedding takes token ids (batch, tokens), got input_shape={tuple(input_shape)}.")
        if input_shape[1] is not None and input_shape[1] > self.max_length:
            raise ValueError(f"Sequences of {input_shape[1]} tokens exceed max_length={self.max_length}.")
        init = keras.initializers.RandomNormal(stddev=0.02)
        self.token_embedding = self.add_weight(name="token_embedding", shape=(self.vocab_size, self.hidden_size),
                                               initializer=init)
        self.position_embedding = self.add_weight(name="position_embedding", shape=(self.max_length, self.hidden_size),
                                                  initializer=init)
        super().build(input_shape)

    def call(self, inputs):
        tokens = ops.take(self.token_embedding, ops.cast(inputs, "int32"), axis=0)
        positions = self.position_embedding[: ops.shape(inputs)[1]]
        return ops.cast(tokens + positions[None], self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape) + (self.hidden_size,)

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size, "hidden_size": self.hidden_size,
                "max_length": self.max_length}
