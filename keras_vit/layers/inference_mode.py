"""InferenceMode: runs a wrapped layer or model in inference mode, even inside `fit` (a frozen backbone)."""

from __future__ import annotations

import keras


@keras.saving.register_keras_serializable(package="keras_vit")
class InferenceMode(keras.layers.Wrapper):
    """Calls the wrapped layer with `training=False` always: no dropout, no stochastic depth.

    A functional model passes its own `training` flag to every layer it calls, overriding a
    `training=False` written into the graph (`backbone(x, training=False)` inside `fit` still
    runs the backbone's dropout). Frozen feature extractors, such as a linear probe's backbone,
    must compute the same features in training as in evaluation; this wrapper makes them.

    Args:
        layer: `keras.layers.Layer` (a `keras.Model` included). The layer to run in inference mode.
        **kwargs: base layer arguments; `trainable=False` freezes the wrapped layer's weights
            for good (each variable's `trainable` is set to False).

    Example:

    >>> import numpy as np, keras
    >>> frozen = InferenceMode(keras.layers.Dropout(0.5))
    >>> bool((np.asarray(frozen(np.ones((2, 8), "float32"), training=True)) == 1).all())
    True
    """

    def __init__(self, layer, **kwargs):
        super().__init__(layer, **kwargs)
        if not self.trainable:
            # A layer made with trainable=False, as loading a file remakes each one, leaves the sublayers
            # it makes in __init__ (a block's Dense layers) trainable in Keras 3.15: freeze the variables.
            self.layer.trainable = False
            for variable in self.layer.weights:
                variable.trainable = False

    def call(self, inputs):
        return self.layer(inputs, training=False)

    def compute_output_shape(self, input_shape):
        return self.layer.compute_output_shape(input_shape)
