"""MultiHeadSelfAttention: the ViT's multi-head self-attention, with the checkpoints' kernel shapes."""

from __future__ import annotations

import functools
import math

import keras
from keras import ops

from keras_vit._validation import check_choice, check_divisible, check_positive_int, check_rate
from keras_vit.layers.rotary_embedding import apply_rotary

PROJECTIONS = ("query", "key", "value")
# Which projections have a bias: all three (the ViT paper), query and value (DINOv3, EVA: a key
# bias would add a position-dependent term once rotary position turns the keys), or none.
QKV_BIASES = ("qkv", "qv", "none")
FUSED_CHOICES = (True, False, "auto")


@functools.cache
def _flash_attention_here() -> bool:
    """Whether this process's Keras backend and device fuse attention by default (`machine.default_fused_attention`)."""
    from keras_vit import machine

    return machine.default_fused_attention(machine.detect(), keras.backend.backend())


@keras.saving.register_keras_serializable(package="keras_vit")
class MultiHeadSelfAttention(keras.layers.Layer):
    """Multi-head scaled dot-product self-attention over a sequence of tokens.

    The kernels have the shapes of the original checkpoints: query, key and value (D, heads,
    D / heads) with biases (heads, D / heads) (see `qkv_bias`); output (heads, D / heads, D)
    with bias (D,). Called with `rope=` (what `RotaryPositionEmbedding` returns), the queries and
    keys are rotated by their tokens' positions before the scores.
    Unlike `keras.layers.MultiHeadAttention` (whose TensorFlow einsum computes the kernel
    gradients one sample at a time), the projections run as one fused query-key-value matrix
    product and one output product over all tokens of the batch: a small ViT trains about 30%
    faster on CPU (see benchmarks/RESULTS.md). Call with `padding_mask` (B, T), True for the
    real tokens, to keep padding tokens out of every token's attention (SigLIP 2 NaFlex batches
    of different patch grids); the padding tokens' own outputs are computed but meaningless. Call
    with `causal=True` to let each token attend only to itself and the tokens before it (CLIP's
    text tower).

    Args:
        hidden_size: int. Token width D.
        num_heads: int. Attention heads; each has width D / num_heads.
        dropout_rate: float. Dropout on the attention weights. Defaults to 0.
        fused: bool or "auto". Calls that need neither the attention weights nor attention
            dropout run one fused kernel instead of the explicit softmax; same variables, same
            outputs. On JAX with a GPU of compute capability >= 8 it is cuDNN's flash attention
            on tokens padded to a multiple of 16 (`keras_vit.backends.jax.flash_attention`:
            unpadded, cuDNN has no gradient for 197 tokens), elsewhere
            `keras.ops.dot_product_attention`. "auto" fuses where it pays
            (`keras_vit.machine.default_fused_attention`: ViT-B/16 trained 1.19x faster on an
            H100 under JAX, a small ViT slower on CPU under TensorFlow). Defaults to "auto".
        qkv_bias: str. Which of query, key and value have a bias: "qkv", "qv" (no key bias)
            or "none". Defaults to "qkv".

    Example:
    >>> import numpy as np
    >>> attention = MultiHeadSelfAttention(64, 4)
    >>> y, weights = attention(np.zeros((2, 5, 64), "float32"), return_attention_scores=True)
    >>> tuple(y.shape), tuple(weights.shape), tuple(attention.query.kernel.shape)
    ((2, 5, 64), (2, 4, 5, 5), (64, 4, 16))
    """

    def __init__(self, hidden_size, num_heads, dropout_rate=0.0, fused="auto", qkv_bias="qkv", **kwargs):
        super().__init__(**kwargs)
        check_positive_int("hidden_size", hidden_size)
        check_positive_int("num_heads", num_heads)
        check_divisible("hidden_size", hidden_size, "num_heads", num_heads)
        check_rate("dropout_rate", dropout_rate)
        check_choice("qkv_bias", qkv_bias, QKV_BIASES)
        check_choice("fused", fused, FUSED_CHOICES)
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.dropout_rate = dropout_rate
        self.fused = fused
        self.qkv_bias = qkv_bias
        self.dropout = keras.layers.Dropout(dropout_rate, dtype=self.dtype_policy, name="dropout")

    def build(self, input_shape):
        if len(input_shape) != 3 or input_shape[-1] != self.hidden_size:
            raise ValueError(
                f"Expected tokens of shape (batch, tokens, {self.hidden_size}), got "
                f"input_shape={tuple(input_shape)}."
            )
        heads, width = self.num_heads, self.hidden_size // self.num_heads
        # EinsumDense layers named as keras.layers.MultiHeadAttention's hold the variables
        # (paths .../query/kernel ...: the weight schema, and the weight-decay rules read the
        # last path part); call() uses their kernels in fused products, not their einsums.
        for name in PROJECTIONS:
            biased = self.qkv_bias == "qkv" or (self.qkv_bias == "qv" and name != "key")
            dense = keras.layers.EinsumDense(
                "abc,cde->abde", (None, heads, width), bias_axes="de" if biased else None, dtype=self.dtype_policy,
                name=name)
            dense.build(input_shape)
            setattr(self, name, dense)
        self.attention_output = keras.layers.EinsumDense(
            "abcd,cde->abe", (None, self.hidden_size), bias_axes="e", dtype=self.dtype_policy, name="attention_output")
        self.attention_output.build(tuple(input_shape[:2]) + (heads, width))
        self.dropout.build((None, heads, None, None))
        super().build(input_shape)

    def projections(self):
        """Returns {"query"|"key"|"value"|"output": (kernel, bias)}, the variables checkpoints map to.

        A projection without a bias (see `qkv_bias`) has bias None.
        """
        layers = {"query": self.query, "key": self.key, "value": self.value, "output": self.attention_output}
        return {name: (layer.kernel, layer.bias) for name, layer in layers.items()}

    def call(self, inputs, training=None, return_attention_scores=False, rope=None, padding_mask=None, causal=False):
        dim, heads = self.hidden_size, self.num_heads
        width = dim // heads
        batch, tokens = ops.shape(inputs)[0], ops.shape(inputs)[1]
        # One (B*T, D) x (D, 3D) product: 2-D matrix products keep the weight gradients one
        # large product each, instead of one small product per sample.
        parts = [getattr(self, name) for name in PROJECTIONS]
        kernel = ops.concatenate([ops.reshape(part.kernel, (dim, dim)) for part in parts], axis=1)
        qkv = ops.matmul(ops.reshape(inputs, (-1, dim)), kernel)
        if self.qkv_bias != "none":
            biases = [ops.reshape(part.bias, (dim,)) if part.bias is not None else ops.zeros((dim,), qkv.dtype)
                      for part in parts]
            qkv = qkv + ops.concatenate(biases, axis=0)
        # Split before any reshape: the gradient of a split is one concatenation, where slicing
        # a (B, T, 3, heads, width) tensor three times made TensorFlow scatter each slice's
        # gradient into a zero tensor of the whole (12% of a small ViT's step on CPU).
        query, key, value = (ops.reshape(part, (batch, tokens, heads, width)) for part in ops.split(qkv, 3, axis=-1))
        if rope is not None:
            query, key = apply_rotary(query, rope), apply_rotary(key, rope)
        scale = 1.0 / math.sqrt(width)
        fused = _flash_attention_here() if self.fused == "auto" else self.fused
        if fused and not return_attention_scores and not (training and self.dropout_rate > 0):
            # One fused kernel on the (B, T, heads, width) layout the projection gives, with no
            # transposes; it keeps no weights to return and has no dropout, so those calls take
            # the explicit path below.
            if padding_mask is None and _flash_attention_here():
                from keras_vit.backends import jax as jax_backend

                context = jax_backend.flash_attention(query, key, value, scale, causal)
            else:
                mask = None if padding_mask is None else ops.cast(padding_mask, "bool")[:, None, None, :]
                context = ops.dot_product_attention(query, key, value, scale=scale, mask=mask, is_causal=causal)
            context = ops.reshape(context, (-1, dim))
            weights = None
        else:
            query = ops.transpose(query, (0, 2, 1, 3)) * ops.cast(scale, query.dtype)
            scores = ops.matmul(query, ops.transpose(key, (0, 2, 3, 1)))
            weights = masked_softmax(scores, padding_mask, causal=causal)
            context = ops.matmul(self.dropout(weights, training=training), ops.transpose(value, (0, 2, 1, 3)))
            context = ops.reshape(ops.transpose(context, (0, 2, 1, 3)), (-1, dim))
        output = self.attention_output
        outputs = ops.matmul(context, ops.reshape(output.kernel, (dim, dim))) + output.bias
        outputs = ops.reshape(outputs, (batch, tokens, dim))
        if return_attention_scores:
            return outputs, weights
        return outputs

    def compute_output_shape(self, input_shape):
        return input_shape

    def compute_output_spec(self, inputs, training=None, return_attention_scores=False, rope=None, padding_mask=None,
                            causal=False):
        outputs = keras.KerasTensor(inputs.shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return outputs
        batch, tokens = inputs.shape[0], inputs.shape[1]
        return outputs, keras.KerasTensor((batch, self.num_heads, tokens, tokens), dtype=self.compute_dtype)

    def get_config(self):
        return {
            **super().get_config(),
            "hidden_size": self.hidden_size,
            "num_heads": self.num_heads,
            "dropout_rate": self.dropout_rate,
            "fused": self.fused,
            "qkv_bias": self.qkv_bias,
        }


# What masked-out attention scores become: exp() of it minus any real score is 0 in float32
# and bfloat16 (the dtypes the softmax computes in), and a row of padding alone stays finite.
MASKED_SCORE = -1e9


def masked_softmax(scores, padding_mask=None, compute_dtype=None, causal=False):
    """Attention weights from scores (..., queries, keys), the keys where `padding_mask` (B, keys) is False left out.

    Args:
        scores: tensor (B, heads, queries, keys).
        padding_mask: tensor (B, keys) of bool (True for real tokens) or None. Defaults to None.
        compute_dtype: str or None. The softmax's dtype; None picks `_softmax_dtype` of the
            scores'. The weights come back in the scores' dtype. Defaults to None.
        causal: bool. Also leave out the keys after each query (query i sees keys 0..i).
            Defaults to False.

    Example:

    >>> import numpy as np
    >>> weights = masked_softmax(np.zeros((1, 1, 1, 3), "float32"), np.array([[True, True, False]]))
    >>> np.asarray(weights).round(2).tolist()
    [[[[0.5, 0.5, 0.0]]]]
    """
    scores = ops.convert_to_tensor(scores)
    dtype = scores.dtype
    scores = ops.cast(scores, compute_dtype or _softmax_dtype(dtype))
    if padding_mask is not None:
        mask = ops.cast(padding_mask, "bool")[:, None, None, :]
        scores = ops.where(mask, scores, ops.cast(MASKED_SCORE, scores.dtype))
    if causal:
        queries, keys = ops.shape(scores)[-2], ops.shape(scores)[-1]
        earlier = ops.arange(queries)[:, None] >= ops.arange(keys)[None, :]
        scores = ops.where(earlier, scores, ops.cast(MASKED_SCORE, scores.dtype))
    return ops.cast(ops.softmax(scores, axis=-1), dtype)


# Backends whose softmax kernels accumulate bfloat16 inputs in float32 (oneDNN, ATen).
_FLOAT32_ACCUMULATING_SOFTMAX = ("tensorflow", "torch")


def _softmax_dtype(dtype):
    """The dtype the attention softmax computes in for scores of `dtype`.

    float16 scores go to float32: the logits of long sequences overflow float16. bfloat16 has
    float32's range, and on TensorFlow and PyTorch its softmax accumulates in float32 anyway, so
    the two casts (as much memory traffic as the softmax itself) are skipped there.
    """
    dtype = keras.backend.standardize_dtype(dtype)
    if dtype == "bfloat16" and keras.backend.backend() in _FLOAT32_ACCUMULATING_SOFTMAX:
        return dtype
    return "float32" if dtype in ("float16", "bfloat16") else dtype
