"""A linear probe of a frozen backbone, trained with `model.fit` on features computed once.

The backbone runs once over the training images (no augmentation) and once over the
validation images; a Dense layer is then fitted to the standardised features for
`PROBE_STEPS` steps, and folded (standardisation included) into the model's own `head`, so the
model that is saved and exported is the usual classifier: backbone + head. Nothing but the head
changes; a probe of a folder costs one forward pass plus seconds.

Example (a tiny model on 32 images of two classes):

>>> import numpy as np, keras_vit
>>> from keras_vit.data.sources import from_arrays
>>> rng = np.random.default_rng(0)
>>> images = rng.integers(0, 255, (32, 16, 16, 3)).astype("uint8"); labels = np.arange(32) % 2
>>> images[labels == 1] //= 4  # class 1 is darker
>>> model = keras_vit.ViT("tiny", num_classes=2, image_size=16, preprocessing="unit")
>>> result = fit_probe(model, from_arrays(images, labels, ["light", "dark"]), batch_size=16)
>>> result.train_accuracy
1.0
"""

from __future__ import annotations

import dataclasses
import time

import keras
import numpy as np

# Optimizer steps of the probe's head: enough for a linear model on standardised features to
# converge (its loss changes by < 1e-3 over the last hundred on the transfer benchmark's 250
# images), a few seconds on a CPU.
PROBE_STEPS = 500
PROBE_LEARNING_RATE = 1e-2
PROBE_WEIGHT_DECAY = 1e-4


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    """What a probe measured.

    Attributes: `train_accuracy` and `validation_accuracy` (None without validation images),
    `forward_seconds_per_image` (the backbone's measured inference speed), `seconds` (the
    whole probe), `num_features`.
    """

    train_accuracy: float
    validation_accuracy: float | None
    forward_seconds_per_image: float
    seconds: float
    num_features: int


def feature_model(model):
    """The model from its input to the input of its `head` layer: the features the head reads.

    Example:

    >>> import keras_vit
    >>> feature_model(keras_vit.ViT("tiny", num_classes=3)).output_shape
    (None, 32)
    """
    names = [layer.name for layer in model.layers]
    if "head" not in names:
        raise ValueError(f"Invalid model {model.name!r} for a linear probe: it has no layer named 'head' whose input "
                         "are the features (build it with include_top=True).")
    return keras.Model(model.inputs, model.get_layer("head").input, name=f"{model.name}_features")


def fit_probe(model, train, validation=None, *, batch_size=256, seed=0, verbose=0) -> ProbeResult:
    """Fits `model`'s head as a linear probe of its frozen backbone on `train` (a data `Source`).

    Args:
        model: keras.Model. A keras_vit classifier whose scaling is inside (raw [0, 255] pixels in).
        train: `keras_vit.data.sources.Source`. The training images.
        validation: `Source` or None. Images to report the probe's accuracy on. Defaults to None.
        batch_size: int. Batch of the forward pass and of the head's fit. Defaults to 256.
        seed: int. Seed of the head's fit. Defaults to 0.
        verbose: int. Keras verbosity of the forward passes. Defaults to 0.

    Returns:
        A `ProbeResult`; the model's `head` holds the probe.
    """
    from keras_vit.transfer.features import extract_features

    start = time.perf_counter()
    features = feature_model(model)
    train_features = extract_features(features, train, batch_size=batch_size, verbose=verbose)
    forward = (time.perf_counter() - start) / max(len(train_features.labels), 1)
    x, y = train_features.features.astype("float64"), train_features.labels
    mean, std = x.mean(axis=0), x.std(axis=0) + 1e-6
    head = model.get_layer("head")
    num_classes = head.units
    keras.utils.set_random_seed(seed)
    probe = keras.Sequential([keras.Input((x.shape[1],)), keras.layers.Dense(num_classes, kernel_initializer="zeros")])
    probe.compile(optimizer=keras.optimizers.AdamW(PROBE_LEARNING_RATE, weight_decay=PROBE_WEIGHT_DECAY),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    batch = min(batch_size, len(y))
    steps_per_epoch = -(-len(y) // batch)
    probe.fit(((x - mean) / std).astype("float32"), y, batch_size=batch, epochs=-(-PROBE_STEPS // steps_per_epoch),
              shuffle=True, verbose=0)
    kernel, bias = (np.asarray(w, "float64") for w in probe.layers[-1].get_weights())
    # (x - mean) / std @ K + b  ==  x @ (K / std) + (b - (mean / std) @ K): the model's head reads raw features.
    head.set_weights([(kernel / std[:, None]).astype("float32"), (bias - (mean / std) @ kernel).astype("float32")])
    train_accuracy = _accuracy(model, train_features)
    validation_accuracy = None
    if validation is not None:
        validation_accuracy = _accuracy(model, extract_features(features, validation, batch_size=batch_size))
    return ProbeResult(train_accuracy, validation_accuracy, forward, time.perf_counter() - start, int(x.shape[1]))


def _accuracy(model, extracted):
    """Accuracy of `model`'s head on features already extracted (the head alone, not the backbone again).

    The argmax is the same whether the head returns logits or probabilities.
    """
    outputs = keras.ops.convert_to_numpy(model.get_layer("head")(extracted.features))
    return float(np.mean(outputs.argmax(axis=-1) == extracted.labels))
