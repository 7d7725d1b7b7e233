"""A contrastive projection head: Dense layers with batch standardisation and ReLU, the last one standardised too."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_bool, check_positive_int

# The epsilon of the batch standardisation (torch's BatchNorm1d default, which SimCLR and MoCo v3 use).
BATCH_NORM_EPSILON = 1e-5


@keras.saving.register_keras_serializable(package="keras_vit")
class ProjectionHead(keras.layers.Layer):
    """Maps pooled features (B, D) to projections (B, out_dim), as SimCLR's and MoCo v3's heads do.

    `num_layers` Dense layers; every hidden one is standardised over the batch, scaled and shifted
    by learned vectors, then passed through a ReLU; with `last_norm` the output is standardised
    over the batch too, without scale or shift (MoCo v3's head, Chen et al. 2021). The statistics
    are the batch's in training and inference alike: the head only ever scores the views of a
    batch, as it does in the loss. Computed in float32 whatever the dtype policy, as the
    contrastive loss's softmax at a temperature of 0.2 needs.

    Args:
        out_dim: int. Width of the projections.
        hidden_dim: int. Width of the hidden Dense layers. Defaults to 2048 (SimCLR's).
        num_layers: int. Dense layers, at least 1. Defaults to 3 (MoCo v3's and SimCLR v2's).
        last_norm: bool. Standardise the output over the batch. Defaults to True.

    Example:

    >>> import numpy as np
    >>> head = ProjectionHead(4, hidden_dim=16)
    >>> out = np.asarray(head(np.random.default_rng(0).normal(size=(8, 6)).astype("float32")))
    >>> out.shape, bool(np.allclose(out.mean(0), 0.0, atol=1e-5))
    ((8, 4), True)
    """

    def __init__(self, out_dim, hidden_dim=2048, num_layers=3, last_norm=True, **kwargs):
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)
        for field, value in (("out_dim", out_dim), ("hidden_dim", hidden_dim), ("num_layers", num_layers)):
            check_positive_int(field, value)
        check_bool("last_norm", last_norm)
        self.out_dim, self.hidden_dim, self.num_layers, self.last_norm = out_dim, hidden_dim, num_layers, bool(last_norm)
        widths = [hidden_dim] * (num_layers - 1) + [out_dim]
        self.mlp = [keras.layers.Dense(width, dtype="float32", name=f"mlp_{i}") for i, width in enumerate(widths)]

    def build(self, input_shape):
        width = input_shape[-1]
        self.norms = []
        for i, layer in enumerate(self.mlp):
            layer.build((None, width))
            width = layer.units
            if i < len(self.mlp) - 1:
                self.norms.append((self.add_weight(name=f"norm_{i}_scale", shape=(width,), initializer="ones"),
                                   self.add_weight(name=f"norm_{i}_shift", shape=(width,), initializer="zeros")))
        super().build(input_shape)

    def call(self, inputs):
        x = ops.cast(inputs, "float32")
        for i, layer in enumerate(self.mlp):
            x = layer(x)
            hidden = i < len(self.mlp) - 1
            if hidden or self.last_norm:
                mean, variance = ops.moments(x, axes=[0], keepdims=True)
                x = (x - mean) / ops.sqrt(variance + BATCH_NORM_EPSILON)
            if hidden:
                scale, shift = self.norms[i]
                x = ops.relu(x * scale + shift)
        return x

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.out_dim,)

    def get_config(self):
        config = super().get_config()
        config.pop("dtype", None)  # always float32
        return {**config, "out_dim": self.out_dim, "hidden_dim": self.hidden_dim, "num_layers": self.num_layers,
                "last_norm": self.last_norm}
