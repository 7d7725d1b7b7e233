"""keras_vit's optimizers: AdamW and SGD with a learning-rate factor per layer (layer-wise decay).

`LayerDecayAdamW` is the AdamW of every AdamW recipe (with no factors it is plain AdamW). It
applies the decoupled weight decay inside each variable's update, at that variable's own rate, as
BEiT and timm do with layer decay; Keras' AdamW decays every variable at the base rate in a pass
of its own that evaluates the learning-rate schedule once per variable. On TensorFlow the Adam
update is TensorFlow's fused `ResourceApplyAdam` kernel: the whole update (clipping and decay
included) builds 25 graph operations a variable against Keras' AdamW's 53, and ViT-Ti/4's first LP-FT step (its trace and graph optimisation) took 16.5 s
instead of 29.5 s on a 2-core Xeon, the steps after it as fast (benchmarks/RESULTS.md). Its
arithmetic is Keras' Adam's (epsilon outside the square root).

Example:

>>> import keras_vit
>>> model = keras_vit.ViT("tiny", num_classes=3)
>>> optimizer = LayerDecayAdamW(1e-3, weight_decay=0.05, layer_scales=layer_learning_rate_scales(model, 0.65))
>>> round(optimizer.layer_scales["embedding/kernel"], 4), optimizer.get_config()["weight_decay"]
(0.2746, 0.05)
"""

from __future__ import annotations

import re

import keras

from keras_vit._validation import check_number_in


def layer_learning_rate_scales(model, decay: float) -> dict:
    """Layer-wise learning-rate decay (BEiT, DINOv2 fine-tuning): variable path -> factor on the rate.

    Layer ids follow the encoder: everything before the first block (patch embedding, class,
    register and distillation tokens, position embedding, a stem) is 0, block i (from 0) is
    i + 1, and what follows the last of L blocks (final norm, pooling, pre-logits, head) is
    L + 1; a variable of layer id l gets `decay ** (L + 1 - l)`.

    Args:
        model: keras.Model. A keras_vit model (its blocks are named `encoderblock_{i}`).
        decay: float. In (0, 1]; 1 trains every layer at the same rate.

    Example:

    >>> import keras_vit
    >>> scales = layer_learning_rate_scales(keras_vit.ViT("tiny", num_classes=3), 0.5)
    >>> [scales[path] for path in ("embedding/kernel", "encoderblock_0/norm1/gamma", "head/kernel")]
    [0.125, 0.25, 1.0]
    """
    check_number_in("decay", decay, 0, 1, include_low=False)
    depth = sum(layer.name.startswith("encoderblock_") for layer in model.layers)
    if depth == 0:
        raise ValueError("Invalid model for layer-wise learning-rate decay: it has no layer named encoderblock_0.")
    scales, seen_block = {}, False
    for layer in model.layers:
        if layer.name.startswith("encoderblock_"):
            layer_id, seen_block = int(layer.name.rsplit("_", 1)[1]) + 1, True
        else:
            layer_id = depth + 1 if seen_block else 0
        for variable in layer.trainable_variables:
            scales[variable.path] = float(decay ** (depth + 1 - layer_id))
    return scales


class _LayerScaledUpdates:
    """Scales each variable's learning rate by its layer's factor (`layer_learning_rate_scales`).

    `update_step` is the per-variable hook Keras documents for custom optimizers; a subclass of a
    built-in optimizer runs it on every backend (PyTorch's fused versions apply only to the
    built-in classes themselves).
    """

    def __init__(self, *args, layer_scales=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.layer_scales = dict(layer_scales or {})

    def build(self, variables):
        super().build(variables)
        self._learning_rate_scales = [float(self.layer_scales.get(v.path, 1.0)) for v in variables]

    def _index_and_rate(self, variable, learning_rate):
        # On TensorFlow `variable` is the backend's own variable (under tf.distribute, a replica's),
        # which has no Keras path; Keras' optimizers find a variable's slots by this index, and no
        # public API maps it back. tests/test_optimizers.py pins it on every backend.
        index = self._get_variable_index(variable)
        scale = self._learning_rate_scales[index]
        return index, (keras.ops.multiply(learning_rate, scale) if scale != 1.0 else learning_rate)

    def update_step(self, gradient, variable, learning_rate):
        _, learning_rate = self._index_and_rate(variable, learning_rate)
        return super().update_step(gradient, variable, learning_rate)

    def get_config(self):
        return {**super().get_config(), "layer_scales": self.layer_scales}


@keras.saving.register_keras_serializable(package="keras_vit")
class LayerDecayAdamW(_LayerScaledUpdates, keras.optimizers.Adam):
    """AdamW with a learning-rate factor per variable, its weight decay at each variable's own rate.

    Args:
        learning_rate: float or schedule. The base rate. Defaults to 0.001.
        weight_decay: float. Decoupled weight decay: each step multiplies a decayed variable by
            1 - rate x weight_decay, with the variable's own (scaled) rate. Defaults to 0.004
            (Keras' AdamW's).
        layer_scales: dict or None. Variable path -> factor on the rate (missing: 1). Defaults to None.
        **kwargs: the arguments of `keras.optimizers.Adam` (beta_1, beta_2, epsilon,
            global_clipnorm, use_ema, ...).

    `exclude_from_weight_decay(var_list, var_names)` works as Keras' does (a later call replaces
    an earlier one), and is refused once the optimizer is built. Keras' own `weight_decay`
    attribute stays None, since its own pass would decay a second time; `decoupled_weight_decay`
    holds the value.

    Example:

    >>> import numpy as np
    >>> optimizer = LayerDecayAdamW(0.1, weight_decay=0.5)
    >>> variable = keras.Variable(np.ones(2, "float32"))
    >>> optimizer.apply([np.zeros(2, "float32")], [variable])  # no gradient: only the decay moves it
    >>> keras.ops.convert_to_numpy(variable).tolist()
    [0.949999988079071, 0.949999988079071]
    """

    def __init__(self, learning_rate=0.001, weight_decay=0.004, *, layer_scales=None, name="adamw", **kwargs):
        super().__init__(learning_rate=learning_rate, layer_scales=layer_scales, name=name, weight_decay=None,
                         **kwargs)
        self.decoupled_weight_decay = weight_decay
        self._no_decay_ids, self._no_decay_pattern = set(), None

    def exclude_from_weight_decay(self, var_list=None, var_names=None):
        """Variables to leave undecayed: those of `var_list`, and those whose name contains one of `var_names`."""
        if self.built:  # the decayed variables are fixed at build
            raise ValueError("exclude_from_weight_decay() was called on a built optimizer: call it before the optimizer "
                             "is built (before model.fit or build_optimizer_variables).")
        self._no_decay_ids = {id(variable) for variable in var_list or ()}  # paths repeat among free variables
        self._no_decay_pattern = re.compile("|".join(set(var_names))) if var_names else None

    def build(self, variables):
        super().build(variables)
        self._decays = [bool(self.decoupled_weight_decay) and id(variable) not in self._no_decay_ids
                        and not (self._no_decay_pattern and self._no_decay_pattern.search(variable.name))
                        for variable in variables]

    def update_step(self, gradient, variable, learning_rate):
        index, learning_rate = self._index_and_rate(variable, learning_rate)
        if keras.backend.backend() == "tensorflow" and not self.amsgrad:
            return self._fused_tensorflow_step(index, gradient, variable, learning_rate)
        if self._decays[index]:
            self.assign_sub(variable, keras.ops.multiply(variable, keras.ops.cast(
                keras.ops.multiply(learning_rate, self.decoupled_weight_decay), variable.dtype)))
        return keras.optimizers.Adam.update_step(self, gradient, variable, learning_rate)

    def _fused_tensorflow_step(self, index, gradient, variable, learning_rate):
        import tensorflow as tf

        dtype = variable.dtype
        rate = tf.cast(learning_rate, dtype)
        if self._decays[index]:
            variable.assign_sub(variable * (rate * tf.cast(self.decoupled_weight_decay, dtype)))
        step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        # Keras' Adam keeps its slots in these lists, by the index above; Adam has no public accessor.
        # tests/test_optimizers.py pins the fused update against keras.optimizers.AdamW.
        momentum, velocity = self._momentums[index].value, self._velocities[index].value
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle, m=momentum.handle, v=velocity.handle,
            beta1_power=tf.pow(beta_1, step), beta2_power=tf.pow(beta_2, step), lr=rate, beta1=beta_1,
            beta2=beta_2, epsilon=tf.cast(self.epsilon, dtype), grad=tf.cast(tf.convert_to_tensor(gradient), dtype))

    def get_config(self):
        return {**super().get_config(), "weight_decay": self.decoupled_weight_decay}


@keras.saving.register_keras_serializable(package="keras_vit")
class LayerDecaySGD(_LayerScaledUpdates, keras.optimizers.SGD):
    """SGD with a learning-rate factor per variable (`layer_scales`: variable path -> factor)."""
