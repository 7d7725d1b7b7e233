"""DropPath: stochastic depth, dropping a whole residual branch per sample."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_rate


@keras.saving.register_keras_serializable(package="keras_vit")
class DropPath(keras.layers.Layer):
    """Zeroes the input of some samples during training and scales the rest by 1 / (1 - rate).

    Applied to a residual branch, this drops the whole block for those samples (stochastic
    depth, Huang et al. 2016), as DeiT and timm do.

    Args:
        rate: float. Probability of dropping a sample's branch, in [0, 1). Defaults to 0.
        seed: int or None. Seed of the random draws. Defaults to None.

    Example:

    >>> import numpy as np
    >>> tuple(DropPath(0.5)(np.ones((4, 3, 2), "float32"), training=False).shape)
    (4, 3, 2)
    """

    def __init__(self, rate=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        check_rate("rate", rate)
        self.rate = rate
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, inputs, training=False):
        if not training or self.rate == 0:
            return inputs
        keep = 1.0 - self.rate
        shape = (ops.shape(inputs)[0],) + (1,) * (len(inputs.shape) - 1)
        kept = ops.cast(keras.random.uniform(shape, seed=self.seed_generator, dtype=inputs.dtype) < keep, inputs.dtype)
        # One broadcast product by a per-sample factor (timm's form): a select would add two
        # full-size tensors to the step and two more to its gradient.
        return inputs * (kept / ops.cast(keep, inputs.dtype))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "seed": self.seed}
