"""DINO's projection head: an MLP to a bottleneck, L2-normalised, then a weight-normalised linear layer to prototypes."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_bool, check_positive_int

# The epsilon of the features' L2 normalisation (torch's F.normalize, which DINO's head uses).
NORMALIZE_EPSILON = 1e-12
# The epsilon of the hidden layers' batch standardisation (torch's BatchNorm1d default).
BATCH_NORM_EPSILON = 1e-5


@keras.saving.register_keras_serializable(package="keras_vit")
class DinoHead(keras.layers.Layer):
    """Maps pooled features (B, D) to prototype scores (B, out_dim), as DINO's head does (Caron et al. 2021).

    `num_layers` Dense layers (GELU between them, the last one to `bottleneck_dim`), the result
    L2-normalised, then a linear layer without bias whose columns are normalised to unit length
    (DINO's weight normalisation with its gain fixed at 1, `norm_last_layer`): every output is a
    cosine between the features and a learned prototype. Computed in float32 whatever the dtype
    policy, as the softmax of its scores at DINO's teacher temperature (0.04) needs.

    With `batch_norm` each hidden layer's outputs are standardised over the batch, then scaled and
    shifted by learned vectors (DINO's `use_bn_in_head`), in training and inference alike: the head
    only ever scores batches, and the teacher's head standardises with its own batch as DINO's
    teacher in training mode does. It keeps apart the features of images that a new backbone maps
    close together (a cosine of 0.94 between two CIFAR images' features at initialisation of the
    conv stem + ViT), which centring would otherwise flatten into the uniform collapse.

    Args:
        out_dim: int. Number of prototypes (the softmax's width).
        hidden_dim: int. Width of the hidden Dense layers. Defaults to 2048 (DINO's).
        bottleneck_dim: int. Width before the prototypes. Defaults to 256 (DINO's).
        num_layers: int. Dense layers before the prototypes, at least 1. Defaults to 3 (DINO's).
        batch_norm: bool. Standardise the hidden layers over the batch. Defaults to False (DINO's).

    Example:

    >>> import numpy as np
    >>> head = DinoHead(8, hidden_dim=16, bottleneck_dim=4)
    >>> scores = head(np.ones((2, 6), "float32"))
    >>> tuple(scores.shape), bool(np.all(np.abs(np.asarray(scores)) <= 1.0 + 1e-6))
    ((2, 8), True)
    """

    def __init__(self, out_dim, hidden_dim=2048, bottleneck_dim=256, num_layers=3, batch_norm=False, **kwargs):
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)
        for field, value in (("out_dim", out_dim), ("hidden_dim", hidden_dim), ("bottleneck_dim", bottleneck_dim),
                             ("num_layers", num_layers)):
            check_positive_int(field, value)
        check_bool("batch_norm", batch_norm)
        self.out_dim, self.hidden_dim, self.bottleneck_dim, self.num_layers = out_dim, hidden_dim, bottleneck_dim, num_layers
        self.batch_norm = bool(batch_norm)
        widths = [hidden_dim] * (num_layers - 1) + [bottleneck_dim]
        # DINO initialises its head with truncated normals of std 0.02 and zero biases.
        init = keras.initializers.TruncatedNormal(stddev=0.02)
        self.mlp = [keras.layers.Dense(width, kernel_initializer=init, dtype="float32", name=f"mlp_{i}")
                    for i, width in enumerate(widths)]

    def build(self, input_shape):
        width = input_shape[-1]
        for layer in self.mlp:
            layer.build((None, width))
            width = layer.units
        self.norms = []
        if self.batch_norm:
            for i, layer in enumerate(self.mlp[:-1]):
                scale = self.add_weight(name=f"norm_{i}_scale", shape=(layer.units,), initializer="ones")
                shift = self.add_weight(name=f"norm_{i}_shift", shape=(layer.units,), initializer="zeros")
                self.norms.append((scale, shift))
        self.prototypes = self.add_weight(name="prototypes", shape=(self.bottleneck_dim, self.out_dim),
                                          initializer=keras.initializers.TruncatedNormal(stddev=0.02))
        super().build(input_shape)

    def call(self, inputs):
        x = ops.cast(inputs, "float32")
        for i, layer in enumerate(self.mlp):
            x = layer(x)
            if i < len(self.mlp) - 1:
                if self.norms:
                    scale, shift = self.norms[i]
                    mean, variance = ops.moments(x, axes=[0], keepdims=True)
                    x = (x - mean) / ops.sqrt(variance + BATCH_NORM_EPSILON) * scale + shift
                x = keras.activations.gelu(x, approximate=False)
        x = x / ops.maximum(ops.norm(x, axis=-1, keepdims=True), NORMALIZE_EPSILON)
        prototypes = self.prototypes / ops.maximum(ops.norm(self.prototypes, axis=0, keepdims=True), NORMALIZE_EPSILON)
        return ops.matmul(x, prototypes)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.out_dim,)

    def get_config(self):
        config = super().get_config()
        config.pop("dtype", None)  # always float32
        return {**config, "out_dim": self.out_dim, "hidden_dim": self.hidden_dim,
                "bottleneck_dim": self.bottleneck_dim, "num_layers": self.num_layers, "batch_norm": self.batch_norm}
