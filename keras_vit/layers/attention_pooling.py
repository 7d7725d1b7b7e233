"""AttentionPooling: multihead attention pooling with a learned probe (MAP head, SigLIP)."""

from __future__ import annotations

import math

import keras
from keras import ops

from keras_vit._validation import check_choice, check_divisible, check_positive_int
from keras_vit.layers.self_attention import masked_softmax
from keras_vit.layers.transformer_block import MLP_ACTIVATIONS, mlp_activation


@keras.saving.register_keras_serializable(package="keras_vit")
class AttentionPooling(keras.layers.Layer):
    """Pools tokens (B, T, D) to (B, D): a learned probe attends to every token, then a residual MLP.

    x = MHA(probe, tokens); y = x + MLP(LN(x)), as big_vision's `MAPHead` (SigLIP), timm's
    `AttentionPoolLatent` and Hugging Face's `SiglipMultiheadAttentionPoolingHead`. The
    projections have the shapes of `MultiHeadSelfAttention` (query/key/value (D, heads, D /
    heads), attention_output (heads, D / heads, D)); `norm`, `mlp_dense_0` and `mlp_dense_1` are
    named as in `TransformerBlock`. Call with `return_attention_scores=True` to also get the
    probe's attention (B, heads, 1, T), and with `padding_mask` (B, T) (True for real tokens) to
    keep padding tokens out of it (SigLIP 2 NaFlex).

    Args:
        hidden_size: int. Token width D.
        num_heads: int. Attention heads.
        mlp_dim: int. Width of the MLP's hidden layer.
        mlp_activation: str. "gelu", "quick_gelu" or "swiglu". Defaults to "gelu".
        approximate_gelu: bool. tanh GELU (SigLIP's). Defaults to False.
        layer_norm_epsilon: float. Epsilon of the LayerNorm. Defaults to 1e-6.

    Example:

    >>> import numpy as np
    >>> tuple(AttentionPooling(16, 2, 24)(np.zeros((2, 5, 16), "float32")).shape)
    (2, 16)
    """

    def __init__(
        self, hidden_size, num_heads, mlp_dim, mlp_activation="gelu", approximate_gelu=False,
        layer_norm_epsilon=1e-6, **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("hidden_size", hidden_size)
        check_positive_int("num_heads", num_heads)
        check_positive_int("mlp_dim", mlp_dim)
        check_divisible("hidden_size", hidden_size, "num_heads", num_heads)
        check_choice("mlp_activation", mlp_activation, MLP_ACTIVATIONS)
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.mlp_dim = mlp_dim
        self.mlp_activation = mlp_activation
        self.approximate_gelu = bool(approximate_gelu)
        self.layer_norm_epsilon = layer_norm_epsilon
        policy = self.dtype_policy
        heads, width = num_heads, hidden_size // num_heads
        for name in ("query", "key", "value"):
            setattr(self, name, keras.layers.EinsumDense(
                "abc,cde->abde", (None, heads, width), bias_axes="de", dtype=policy, name=name))
        self.attention_output = keras.layers.EinsumDense(
            "abcd,cde->abe", (None, hidden_size), bias_axes="e", dtype=policy, name="attention_output")
        self.norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, dtype=policy, name="norm")
        inner = 2 * mlp_dim if mlp_activation == "swiglu" else mlp_dim
        self.mlp_dense_0 = keras.layers.Dense(inner, dtype=policy, name="mlp_dense_0")
        self.mlp_dense_1 = keras.layers.Dense(hidden_size, dtype=policy, name="mlp_dense_1")

    def build(self, input_shape):
        if len(input_shape) != 3 or input_shape[-1] != self.hidden_size:
            raise ValueError(
                f"Expected tokens of shape (batch, tokens, {self.hidden_size}), got input_shape={tuple(input_shape)}."
            )
        d = self.hidden_size
        self.probe = self.add_weight(name="probe", shape=(1, 1, d), initializer="glorot_uniform")
        for name in ("query", "key", "value"):
            getattr(self, name).build(input_shape)
        self.attention_output.build((None, 1, self.num_heads, d // self.num_heads))
        self.norm.build((None, 1, d))
        self.mlp_dense_0.build((None, 1, d))
        self.mlp_dense_1.build((None, 1, self.mlp_dim))
        super().build(input_shape)

    def projections(self):
        """Returns {"query"|"key"|"value"|"output": (kernel, bias)}, the variables checkpoints map to."""
        layers = {"query": self.query, "key": self.key, "value": self.value, "output": self.attention_output}
        return {name: (layer.kernel, layer.bias) for name, layer in layers.items()}

    def call(self, tokens, return_attention_scores=False, padding_mask=None):
        d, heads = self.hidden_size, self.num_heads
        width = d // heads
        batch = ops.shape(tokens)[0]
        probe = ops.broadcast_to(ops.cast(self.probe, tokens.dtype), (batch, 1, d))
        query = self.query(probe) * ops.cast(1.0 / math.sqrt(width), tokens.dtype)  # (B, 1, H, w)
        key, value = self.key(tokens), self.value(tokens)  # (B, T, H, w)
        scores = ops.einsum("bqhw,bthw->bhqt", query, key)
        weights = masked_softmax(scores, padding_mask, compute_dtype="float32")
        context = ops.einsum("bhqt,bthw->bqhw", weights, value)
        x = self.attention_output(context)  # (B, 1, D)
        y = mlp_activation(self.mlp_dense_0(self.norm(x)), self.mlp_activation, self.approximate_gelu)
        x = (x + self.mlp_dense_1(y))[:, 0]
        if return_attention_scores:
            return x, weights
        return x

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def compute_output_spec(self, tokens, return_attention_scores=False, padding_mask=None):
        outputs = keras.KerasTensor((tokens.shape[0], self.hidden_size), dtype=self.compute_dtype)
        if not return_attention_scores:
            return outputs
        scores = keras.KerasTensor((tokens.shape[0], self.num_heads, 1, tokens.shape[1]), dtype=self.compute_dtype)
        return outputs, scores

    def get_config(self):
        return {
            **super().get_config(),
            "hidden_size": self.hidden_size,
            "num_heads": self.num_heads,
            "mlp_dim": self.mlp_dim,
            "mlp_activation": self.mlp_activation,
            "approximate_gelu": self.approximate_gelu,
            "layer_norm_epsilon": self.layer_norm_epsilon,
        }
