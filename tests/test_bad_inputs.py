"""Bad input, table-driven: each wrong value is refused with its argument's name, or accepted for a stated reason.

Recipes and learning-rate schedules first (issue 29): a negative, zero, NaN or infinite rate used
to be accepted and trained with a negative or NaN learning rate.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from keras_vit.training import recipes

NAN, INF = float("nan"), float("inf")
BASE = recipes.get_recipe("deit")

# (field, bad value): every one must be refused naming the field and the value.
RECIPE_REFUSED = [
    ("learning_rate", -5), ("learning_rate", 0), ("learning_rate", NAN), ("learning_rate", INF), ("learning_rate", "1e-3"),
    ("weight_decay", -0.1), ("weight_decay", NAN), ("warmup_epochs", -1), ("warmup_steps", -1), ("warmup_steps", 2.5),
    ("min_learning_rate_ratio", 1.5), ("min_learning_rate_ratio", -0.1), ("label_smoothing", 1.0),
    ("label_smoothing", -0.1), ("drop_path_rate", 1.0), ("beta_2", 1.0), ("momentum", -0.5), ("clip_norm", 0),
    ("clip_norm", -1.0), ("clip_norm", NAN), ("reference_batch_size", 0), ("batch_size", 0), ("batch_size", 2.0),
    ("optimizer", "adam"), ("schedule", "linear"), ("augment", "heavy"), ("decay_all", "yes"), ("name", ""),
    ("learning_rate", True),
]
# Accepted, and why: edges that mean something.
RECIPE_ACCEPTED = [
    ("weight_decay", 0.0),  # no decay
    ("warmup_epochs", 0.0),  # no warmup
    ("min_learning_rate_ratio", 1.0),  # a cosine that stays at the peak: constant after warmup
    ("clip_norm", None),  # no clipping
    ("learning_rate", np.float32(1e-3)),  # NumPy scalars are numbers
]


@pytest.mark.backends("tensorflow", "jax", "torch")
@pytest.mark.parametrize("field, value", RECIPE_REFUSED)
def test_recipe_refuses(field, value):
    with pytest.raises(ValueError, match=rf"Invalid {field}="):
        dataclasses.replace(BASE, **{field: value})


@pytest.mark.backends("tensorflow", "jax", "torch")
@pytest.mark.parametrize("field, value", RECIPE_ACCEPTED)
def test_recipe_accepts(field, value):
    assert getattr(dataclasses.replace(BASE, **{field: value}), field) == value


@pytest.mark.backends("tensorflow", "jax", "torch")
@pytest.mark.parametrize("arguments, field", [
    (dict(peak=NAN, total_steps=10), "peak"), (dict(peak=-1.0, total_steps=10), "peak"),
    (dict(peak=0.0, total_steps=10), "peak"), (dict(peak=INF, total_steps=10), "peak"),
    (dict(peak=1.0, total_steps=0), "total_steps"), (dict(peak=1.0, total_steps=NAN), "total_steps"),
    (dict(peak=1.0, total_steps=10, warmup_steps=-2), "warmup_steps"),
    (dict(peak=1.0, total_steps=10, min_ratio=2.0), "min_ratio"),
])
def test_warmup_cosine_refuses(arguments, field):
    with pytest.raises(ValueError, match=rf"Invalid {field}="):
        recipes.WarmupCosine(**arguments)


@pytest.mark.backends("tensorflow", "jax", "torch")
def test_every_schedule_value_is_finite_and_non_negative():
    schedule = recipes.make_schedule(BASE, batch_size=256, steps_per_epoch=7, epochs=3)
    rates = [float(schedule(step)) for step in range(0, 30)]
    assert all(math.isfinite(r) and r >= 0 for r in rates) and max(rates) == pytest.approx(BASE.learning_rate_for(256))


def test_non_finite_pixels_are_refused_before_any_model_sees_them(tmp_path):
    """The int8 TFLite file answered NaN pixels with plausible probabilities; now every route refuses them."""
    import keras_vit
    import tensorflow as tf
    from keras_vit import export
    from keras_vit.export.saved_model import error_text

    model = keras_vit.ViT("tiny", num_classes=3, preprocessing="unit")
    images = np.random.default_rng(0).uniform(0, 255, (3, 32, 32, 3)).astype("float32")
    bad = images.copy()
    bad[1, 4, 4, 0] = np.nan
    serving = tf.saved_model.load(export.saved_model(model, str(tmp_path / "serving"))).signatures["serving_default"]
    assert serving(images=tf.constant(images))["probabilities"].shape == (3, 3)
    for value in (np.nan, np.inf, -np.inf):
        bad[1, 4, 4, 0] = value
        with pytest.raises(tf.errors.InvalidArgumentError) as error:
            serving(images=tf.constant(bad))
        assert error_text(error.value) == "images[1] holds NaN or infinite pixels; expected values in [0, 255]."
    int8 = export.tflite(model, str(tmp_path / "int8.tflite"), "int8", representative_data=images).path
    for path in (int8, str(tmp_path / "serving"), str(tmp_path / "serving" / "1")):
        predictor = export.load_predictor(path)
        assert predictor.predict(images).shape == (3, 3)
        with pytest.raises(ValueError, match=r"images\[1\] holds NaN or infinite pixels"):
            predictor.predict(bad)
