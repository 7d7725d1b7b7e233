"""A linear probe of a frozen backbone on features computed once: ridge regression chosen by cross-validation.

The backbone runs once over the training images and their mirror images (no other
augmentation), and once over the validation images. `keras_vit.transfer.linear_probe`
then fits closed-form ridge regression whose regulariser, and whether the flipped images help,
are chosen on held-out folds of the training images (never on validation or test images), and
scales it into calibrated logits. The fit is folded (standardisation included) into the model's
own `head`, so the model that is saved and exported is the usual classifier: backbone + head.
Nothing but the head changes; a probe of a folder costs a forward pass of each image and its mirror.

Example (a tiny model on 32 images of two classes):

>>> import numpy as np, keras_vit
>>> from keras_vit.data.sources import from_arrays
>>> rng = np.random.default_rng(0)
>>> images = rng.integers(0, 255, (32, 16, 16, 3)).astype("uint8"); labels = np.arange(32) % 2
>>> images[labels == 1] //= 4  # class 1 is darker
>>> model = keras_vit.ViT("tiny", num_classes=2, image_size=16, preprocessing="unit")
>>> result = fit_probe(model, from_arrays(images, labels, ["light", "dark"]), batch_size=16)
>>> result.train_accuracy, result.cv_accuracy
(1.0, 1.0)
"""

from __future__ import annotations

import dataclasses
import math
import time

import keras
import numpy as np


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    """What a probe measured.

    Attributes: `train_accuracy` and `validation_accuracy` (None without validation images),
    `forward_seconds_per_image` (the backbone's measured inference speed, after the batch that
    traces it), `seconds` (the
    whole probe), `num_features`; `cv_accuracy` (held-out accuracy over folds of the training
    images), `l2` (the regulariser chosen, in units of training rows), `flips` (whether flipped
    images were used), `temperature` (the logits' scale).
    """

    train_accuracy: float
    validation_accuracy: float | None
    forward_seconds_per_image: float
    seconds: float
    num_features: int
    cv_accuracy: float
    l2: float
    flips: bool
    temperature: float


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
        validation: `Source` or None. Images to report the probe's accuracy on (not used to fit
            or choose it). Defaults to None.
        batch_size: int. Batch of the forward passes. Defaults to 256.
        seed: int. Seed of the cross-validation folds. Defaults to 0.
        verbose: int. Keras verbosity of the forward passes. Defaults to 0.

    Returns:
        A `ProbeResult`; the model's `head` holds the probe.
    """
    return LinearProbe(model, batch_size=batch_size, seed=seed, verbose=verbose).fit(train, validation)


class LinearProbe:
    """A probe of `model`'s frozen backbone that keeps its features, to fit the head again on more images.

    `fit(train, validation)` is `fit_probe`; `refit_with_validation()` then fits the head on the
    training and validation images together, from the features already computed (the backbone
    must be as it was at `fit`).

    Args:
        model: keras.Model. A keras_vit classifier whose scaling is inside.
        batch_size: int. Batch of the forward passes. Defaults to 256.
        seed: int. Seed of the cross-validation folds. Defaults to 0.
        verbose: int. Keras verbosity of the forward passes. Defaults to 0.
    """

    def __init__(self, model, *, batch_size=256, seed=0, verbose=0):
        self.model, self.batch_size, self.seed, self.verbose = model, batch_size, seed, verbose
        self._features = feature_model(model)
        self._with_flips = _with_flips(self._features)  # one pass, one trace: each image and its mirror
        self._parts = []  # (features, flipped features, labels) of each source fitted on

    def fit(self, train, validation=None) -> ProbeResult:
        """Fits the head on `train`; reports its accuracy on `validation` (None: no report)."""
        start = time.perf_counter()
        train_features, train_flipped = self._extract(train)
        forward = train_features.seconds_per_image  # steady: the first batch also traces the model
        if forward is None:
            forward = (time.perf_counter() - start) / max(len(train_features.labels), 1) / 2  # image and mirror
        self._parts = [(train_features.features, train_flipped, train_features.labels)]
        fitted = self._fit_head()
        train_accuracy = _accuracy(self.model, train_features)
        validation_accuracy = None
        if validation is not None:
            self._validation_source = validation
            self._validation, self._validation_flipped = self._extract(validation)
            self._validation_correct = _correct(self.model, self._validation)
            validation_accuracy = float(np.mean(self._validation_correct))
        return ProbeResult(train_accuracy, validation_accuracy, forward, time.perf_counter() - start,
                           int(train_features.features.shape[1]), fitted.cv_accuracy, fitted.l2, fitted.flips,
                           fitted.temperature)

    def compare_on_validation(self):
        """The probe, as `fit` left it, against the model as it is now (after fine-tuning from it), image by image.

        Returns (images only the probe got right, images only the model now gets right, the model's
        accuracy now) over the validation images: the pairs of a sign test (the images both got
        right or both wrong say nothing about which is better), and the one pass the accuracy needs.
        """
        now, _ = self._extract(self._validation_source)  # the probe's own traced pass: no second trace
        if not np.array_equal(now.labels, self._validation.labels):
            raise RuntimeError("The validation images were read in another order than at the probe's fit.")
        tuned = _correct(self.model, now)
        probe = self._validation_correct
        return int(np.sum(probe & ~tuned)), int(np.sum(tuned & ~probe)), float(np.mean(tuned))

    def refit_with_validation(self):
        """Fits the head again on the training and validation features together; returns the `RidgeProbe`."""
        self._parts.append((self._validation.features, self._validation_flipped, self._validation.labels))
        return self._fit_head()

    def _extract(self, source):
        """(`Features` of `source`, with `seconds_per_image` of one forward pass; the flipped images' features)."""
        from keras_vit.transfer.features import extract_features

        both = extract_features(self._with_flips, source, batch_size=self.batch_size, verbose=self.verbose)
        width = both.features.shape[1] // 2
        per_image = both.seconds_per_image / 2 if both.seconds_per_image is not None else None
        return dataclasses.replace(both, features=both.features[:, :width], seconds_per_image=per_image), \
            both.features[:, width:]

    def _fit_head(self):
        from keras_vit.transfer.linear_probe import fit_ridge_probe

        features, flipped, labels = (np.concatenate(parts) for parts in zip(*self._parts))
        head = self.model.get_layer("head")
        fitted = fit_ridge_probe(features, labels, head.units, flipped=flipped, seed=self.seed)
        head.set_weights([fitted.kernel.astype("float32"), fitted.bias.astype("float32")])
        return fitted


def _with_flips(features):
    """The feature model on its images and on the same images flipped left-right, side by side (batch, 2 D).

    One call of the backbone on both halves of a doubled batch: a graph of one backbone traces in
    half the time of two calls (ViT-Ti/4: 3.1 s against 6.6 s on a 2-core Xeon).
    """
    inputs = keras.Input(features.inputs[0].shape[1:], dtype=features.inputs[0].dtype)
    mirrored = keras.ops.flip(inputs, axis=2)  # width is axis 2 of channels-last images
    both = features(keras.ops.concatenate([inputs, mirrored], axis=0))
    return keras.Model(inputs, keras.ops.concatenate(keras.ops.split(both, 2, axis=0), axis=-1),
                       name=f"{features.name}_and_flipped")


def sign_test_p_value(wins: int, losses: int) -> float:
    """One-sided exact sign test: the chance of at least `wins` of `wins + losses` fair coin tosses.

    How likely a first classifier is to be right on `wins` of the images where exactly one of two is
    right, were both as good (McNemar's exact test, one-sided). 1.0 where they never disagree.

    Example:

    >>> sign_test_p_value(5, 0), sign_test_p_value(1, 0), sign_test_p_value(0, 0)
    (0.03125, 0.5, 1.0)
    """
    total = wins + losses
    return math.fsum(math.comb(total, k) for k in range(wins, total + 1)) / 2**total


def _accuracy(model, extracted):
    """Accuracy of `model`'s head on features already extracted (the head alone, not the backbone again)."""
    return float(np.mean(_correct(model, extracted)))


def _correct(model, extracted):
    """Whether `model`'s head gets each image of `extracted` right (bool array); argmax of logits or probabilities alike."""
    outputs = keras.ops.convert_to_numpy(model.get_layer("head")(extracted.features))
    return outputs.argmax(axis=-1) == extracted.labels
