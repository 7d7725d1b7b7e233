"""TransformerBlock: one pre-LayerNorm encoder block of the ViT paper (eq. 2-3)."""

from __future__ import annotations

import functools
import math

import keras
from keras import ops

from keras_vit._validation import check_choice, check_divisible, check_positive_int, check_rate
from keras_vit.layers.drop_path import DropPath
from keras_vit.layers.layer_scale import LayerScale
from keras_vit.layers.self_attention import MultiHeadSelfAttention

# MLP kinds: "gelu" (exact or tanh, `approximate_gelu`), "quick_gelu" (x * sigmoid(1.702 x), OpenAI
# CLIP) and "swiglu" (silu(x W_gate) * (x W), DINOv2 giant; the first Dense holds gate then value).
MLP_ACTIVATIONS = ("gelu", "quick_gelu", "swiglu")


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


def mlp_activation(x, kind="gelu", approximate_gelu=False):
    """The MLP's nonlinearity of kind `kind` (see `MLP_ACTIVATIONS`); "swiglu" halves the width.

    Args:
        x: tensor. Output of the MLP's first Dense layer.
        kind: str. "gelu", "quick_gelu" or "swiglu". Defaults to "gelu".
        approximate_gelu: bool. tanh GELU for kind "gelu". Defaults to False.

    Example:

    >>> import numpy as np
    >>> tuple(mlp_activation(np.ones((2, 8), "float32"), "swiglu").shape)
    (2, 4)
    """
    if kind == "quick_gelu":
        return x * ops.sigmoid(ops.cast(1.702, x.dtype) * x)
    if kind == "swiglu":
        gate, value = ops.split(x, 2, axis=-1)
        return ops.silu(gate) * value
    return gelu(x, approximate_gelu)


def dense_activation(kind="gelu", approximate_gelu=False):
    """The nonlinearity the MLP's first Dense applies itself, or None for "swiglu" (split after it).

    Inside the Dense's own call, TensorFlow's grappler fuses the tanh GELU with the product and
    its bias into one oneDNN kernel; applied after the layer's output it does not (the exact GELU
    fuses either way; RESULTS section 4, "The MLP's products fused").

    Args:
        kind: str. "gelu", "quick_gelu" or "swiglu". Defaults to "gelu".
        approximate_gelu: bool. tanh GELU for kind "gelu". Defaults to False.

    Example:

    >>> import numpy as np
    >>> dense_activation("swiglu") is None, round(float(dense_activation()(np.float32(1.0))), 4)
    (True, 0.8413)
    """
    if kind == "swiglu":
        return None
    return functools.partial(mlp_activation, kind=kind, approximate_gelu=approximate_gelu)


@keras.saving.register_keras_serializable(package="keras_vit")
class TransformerBlock(keras.layers.Layer):
    """Pre-LN encoder block: x + MSA(LN(x)), then x + MLP(LN(x)).

    The MLP is Dense(mlp_dim) -> GELU -> Dropout -> Dense(D) -> Dropout (SwiGLU: Dense(2 mlp_dim),
    gate and value halves); with `mlp_norm`, a LayerNorm (`mlp_norm`) on the hidden layer before the
    second Dense (EVA-02's sub-LN). With `layer_scale_init`, each branch is scaled per channel by a
    `LayerScale` (`layer_scale_1`, `layer_scale_2`) before the residual sum. Stochastic depth drops
    each residual branch per sample. Call with `return_attention_scores=True` to also get the
    attention weights (B, heads, T, T); with `rope=` (what `RotaryPositionEmbedding` returns)
    to rotate the attention's queries and keys by position, with `padding_mask` (B, T) (True
    for real tokens) to keep padding tokens out of the attention, and with `causal=True` to let
    each token attend only to the tokens up to it (see `MultiHeadSelfAttention`).

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
        mlp_activation: str. "gelu", "quick_gelu" or "swiglu" (see `MLP_ACTIVATIONS`).
            Defaults to "gelu".
        layer_scale_init: float or None. Initial LayerScale value; None has no LayerScale.
            Defaults to None.
        fused_attention: bool or "auto". The attention's `fused` path (one fused kernel, see
            `MultiHeadSelfAttention`); same weights, same outputs. Defaults to "auto".
        qkv_bias: str. Which of the attention's query, key and value have a bias: "qkv", "qv"
            or "none" (see `MultiHeadSelfAttention`). Defaults to "qkv".
        mlp_norm: bool. A LayerNorm on the MLP's hidden layer, after the activation (timm's
            scale_mlp: EVA-02 B and L). Defaults to False.

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
        mlp_activation="gelu",
        layer_scale_init=None,
        fused_attention="auto",
        qkv_bias="qkv",
        mlp_norm=False,
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
        check_choice("mlp_activation", mlp_activation, MLP_ACTIVATIONS)
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.mlp_dim = mlp_dim
        self.dropout_rate = dropout_rate
        self.attention_dropout_rate = attention_dropout_rate
        self.drop_path_rate = drop_path_rate
        self.approximate_gelu = bool(approximate_gelu)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.mlp_activation = mlp_activation
        self.layer_scale_init = layer_scale_init
        self.fused_attention = fused_attention
        self.qkv_bias = qkv_bias
        self.mlp_norm = bool(mlp_norm)

        policy = self.dtype_policy
        self.norm1 = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=policy, name="norm1"
        )
        self.attention = MultiHeadSelfAttention(
            hidden_size, num_heads, attention_dropout_rate, fused=self.fused_attention, qkv_bias=qkv_bias, dtype=policy,
            name="attention",
        )
        self.attention_dropout = keras.layers.Dropout(dropout_rate, dtype=policy, name="attention_output_dropout")
        self.norm2 = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=policy, name="norm2"
        )
        inner = 2 * mlp_dim if mlp_activation == "swiglu" else mlp_dim
        self.mlp_dense_0 = keras.layers.Dense(
            inner, activation=dense_activation(mlp_activation, self.approximate_gelu), dtype=policy, name="mlp_dense_0")
        self.mlp_dense_1 = keras.layers.Dense(hidden_size, dtype=policy, name="mlp_dense_1")
        self.mlp_dropout = keras.layers.Dropout(dropout_rate, dtype=policy, name="mlp_dropout")
        self.mlp_hidden_norm = None
        if self.mlp_norm:
            self.mlp_hidden_norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, dtype=policy, name="mlp_norm")
        self.drop_path = DropPath(drop_path_rate, dtype=policy, name="drop_path")
        self.layer_scale_1 = self.layer_scale_2 = None
        if layer_scale_init is not None:
            self.layer_scale_1 = LayerScale(layer_scale_init, dtype=policy, name="layer_scale_1")
            self.layer_scale_2 = LayerScale(layer_scale_init, dtype=policy, name="layer_scale_2")

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
        if self.mlp_hidden_norm is not None:
            self.mlp_hidden_norm.build(tuple(input_shape[:-1]) + (self.mlp_dim,))
        if self.layer_scale_1 is not None:
            self.layer_scale_1.build(input_shape)
            self.layer_scale_2.build(input_shape)
        super().build(input_shape)

    def call(self, inputs, training=None, return_attention_scores=False, rope=None, padding_mask=None, causal=False):
        x = self.norm1(inputs)
        masks = dict(rope=rope, padding_mask=padding_mask, causal=causal)
        if return_attention_scores:
            x, scores = self.attention(x, return_attention_scores=True, training=training, **masks)
        else:
            x = self.attention(x, training=training, **masks)
        x = self.attention_dropout(x, training=training)
        if self.layer_scale_1 is not None:
            x = self.layer_scale_1(x)
        x = inputs + self.drop_path(x, training=training)

        y = self.norm2(x)
        # Inference runs the MLP on (B*T, D) rows: on TensorFlow with oneDNN, grappler fuses a 2-D
        # MatMul with its BiasAdd and GELU into one kernel, where the Dense's 3-D product (a
        # tensordot) leaves the bias and each of GELU's element-wise ops to run alone (ViT-B/16
        # bfloat16 inference 1.10x). A training step keeps the 3-D product: with the rows it ran
        # 0.94-0.96x (RESULTS section 4, "The MLP's products fused").
        rows = not training
        if rows:
            y = ops.reshape(y, (-1, self.hidden_size))
        y = self.mlp_dense_0(y)  # its activation included (`dense_activation`)
        if self.mlp_activation == "swiglu":
            y = mlp_activation(y, "swiglu")
        y = self.mlp_dropout(y, training=training)
        if self.mlp_hidden_norm is not None:
            y = self.mlp_hidden_norm(y)
        y = self.mlp_dense_1(y)
        if rows:
            y = ops.reshape(y, ops.shape(x))
        y = self.mlp_dropout(y, training=training)
        if self.layer_scale_2 is not None:
            y = self.layer_scale_2(y)
        y = x + self.drop_path(y, training=training)
        if return_attention_scores:
            return y, scores
        return y

    def compute_output_shape(self, input_shape):
        return input_shape

    def compute_output_spec(self, inputs, training=None, return_attention_scores=False, rope=None, padding_mask=None,
                            causal=False):
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
            "mlp_activation": self.mlp_activation,
            "layer_scale_init": self.layer_scale_init,
            "fused_attention": self.fused_attention,
            "qkv_bias": self.qkv_bias,
            "mlp_norm": self.mlp_norm,
        }
