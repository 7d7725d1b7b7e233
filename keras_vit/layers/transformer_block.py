"""TransformerBlock: one pre-LayerNorm encoder block of the ViT paper (eq. 2-3)."""

from __future__ import annotations

import math

import keras
from keras import ops

from keras_vit._validation import check_divisible, check_positive_int, check_rate
from keras_vit.layers.drop_path import DropPath
from keras_vit.layers.self_attention import MultiHeadSelfAttention


def gelu(x, approximate=False):
    """GELU, the exact form written as 0.5 x (1 + erf(x / sqrt 2)) on the TensorFlow backend.

    TensorFlow's `tf.nn.gelu` writes the exact GELU with erfc, which XLA runs ~1.5x slower on CPU
    (forward and backward) than the erf form that JAX and PyTorch compute; the TFLite converter
    still fuses the erf form into one GELU op. Other backends keep `keras.ops.gelu`.

    Args:
        x: tensor. Input.
        approximate: bool. The tanh approximation instead of the exact form. Defaults to False.

    Example:

    >>> import numpy as np
    >>> round(float(gelu(np.float32(1.0))), 4)
    0.8413
    """
    if approximate or keras.backend.backend() != "tensorflow":
        return ops.gelu(x, approximate=approximate)
    return 0.5 * x * (1.0 + ops.erf(x * (1.0 / math.sqrt(2.0))))


@keras.saving.register_keras_serializable(package="keras_vit")
class TransformerBlock(keras.layers.Layer):
    """Pre-LN encoder block: x + MSA(LN(x)), then x + MLP(LN(x)).

    The MLP is Dense(mlp_dim) -> GELU -> Dropout -> Dense(D) -> Dropout. Stochastic depth drops
    each residual branch per sample. Call with `return_attention_scores=True` to also get the
    attention weights (B, heads, T, T).

    Args:
        hidden_size: int. Token width D.
        num_heads: int. Attention heads; each has width D / num_heads.
        mlp_dim: int. Width of the MLP's hidden layer.
        dropout_rate: float. Dropout after the attention output and in the MLP. Defaults to 0.
        attention_dropout_rate: float. Dropout on the attention weights. Defaults to 0.
        drop_path_rate: float. Stochastic depth rate of both residual branches. Defaults to 0.
        approximate_gelu: bool. Use the tanh approximation of GELU, as the original Flax
            checkpoints were trained with; False uses the exact erf form. Defaults to False.
        layer_norm_epsilon: float. Epsilon of both LayerNorms. Defaults to 1e-6.

    Example:

    >>> import numpy as np
    >>> block = TransformerBlock(64, 4, 128)
    >>> y, attention = block(np.zeros((2, 5, 64), "float32"), return_attention_scores=True)
    >>> tuple(y.shape), tuple(attention.shape)
    ((2, 5, 64), (2, 4, 5, 5))
    """

    def __init__(
        self,
        hidden_size,
        num_heads,
        mlp_dim,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        drop_path_rate=0.0,
        approximate_gelu=False,
        layer_norm_epsilon=1e-6,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("hidden_size", hidden_size)
        check_positive_int("num_heads", num_heads)
        check_positive_int("mlp_dim", mlp_dim)
        check_divisible("hidden_size", hidden_size, "num_heads", num_heads)
        check_rate("dropout_rate", dropout_rate)
        check_rate("attention_dropout_rate", attention_dropout_rate)
        check_rate("drop_path_rate", drop_path_rate)
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.mlp_dim = mlp_dim
        self.dropout_rate = dropout_rate
        self.attention_dropout_rate = attention_dropout_rate
        self.drop_path_rate = drop_path_rate
        self.approximate_gelu = bool(approximate_gelu)
        self.layer_norm_epsilon = layer_norm_epsilon

        policy = self.dtype_policy
        self.norm1 = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=policy, name="norm1"
        )
        self.attention = MultiHeadSelfAttention(
            hidden_size, num_heads, attention_dropout_rate, dtype=policy, name="attention"
        )
        self.attention_dropout = keras.layers.Dropout(dropout_rate, dtype=policy, name="attention_output_dropout")
        self.norm2 = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=policy, name="norm2"
        )
        self.mlp_dense_0 = keras.layers.Dense(mlp_dim, dtype=policy, name="mlp_dense_0")
        self.mlp_dense_1 = keras.layers.Dense(hidden_size, dtype=policy, name="mlp_dense_1")
        self.mlp_dropout = keras.layers.Dropout(dropout_rate, dtype=policy, name="mlp_dropout")
        self.drop_path = DropPath(drop_path_rate, dtype=policy, name="drop_path")

    def build(self, input_shape):
        if len(input_shape) != 3 or input_shape[-1] != self.hidden_size:
            raise ValueError(
                f"Expected tokens of shape (batch, tokens, {self.hidden_size}), got "
                f"input_shape={tuple(input_shape)}."
            )
        self.norm1.build(input_shape)
        self.attention.build(input_shape)
        self.norm2.build(input_shape)
        self.mlp_dense_0.build(input_shape)
        self.mlp_dense_1.build(tuple(input_shape[:-1]) + (self.mlp_dim,))
        super().build(input_shape)

    def call(self, inputs, training=None, return_attention_scores=False):
        x = self.norm1(inputs)
        if return_attention_scores:
            x, scores = self.attention(x, return_attention_scores=True, training=training)
        else:
            x = self.attention(x, training=training)
        x = self.attention_dropout(x, training=training)
        x = inputs + self.drop_path(x, training=training)

        y = self.norm2(x)
        y = self.mlp_dense_0(y)
        y = gelu(y, self.approximate_gelu)
        y = self.mlp_dropout(y, training=training)
        y = self.mlp_dense_1(y)
        y = self.mlp_dropout(y, training=training)
        y = x + self.drop_path(y, training=training)
        if return_attention_scores:
            return y, scores
        return y

    def compute_output_shape(self, input_shape):
        return input_shape

    def compute_output_spec(self, inputs, training=None, return_attention_scores=False):
        # Residual blocks keep the token shape: the block returns what its attention returns.
        return self.attention.compute_output_spec(inputs, return_attention_scores=return_attention_scores)

    def get_config(self):
        return {
            **super().get_config(),
            "hidden_size": self.hidden_size,
            "num_heads": self.num_heads,
            "mlp_dim": self.mlp_dim,
            "dropout_rate": self.dropout_rate,
            "attention_dropout_rate": self.attention_dropout_rate,
            "drop_path_rate": self.drop_path_rate,
            "approximate_gelu": self.approximate_gelu,
            "layer_norm_epsilon": self.layer_norm_epsilon,
        }
