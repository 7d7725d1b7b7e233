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


@pytest.mark.backends("tensorflow", "jax", "torch")
def test_contradicting_num_classes_and_classes_is_refused():
    """Issue 29: ViT(num_classes=3, classes=5) built a 5-class head in silence."""
    import keras_vit

    with pytest.raises(ValueError, match=r"num_classes=3 and classes=5"):
        keras_vit.ViT("tiny", num_classes=3, classes=5)
    assert keras_vit.ViT("tiny", num_classes=3, classes=3).output_shape == (None, 3)  # the same: accepted
    assert keras_vit.ViT("tiny", classes=4).output_shape == (None, 4)


@pytest.mark.backends("tensorflow", "jax", "torch")
def test_wrong_channels_are_named_before_the_convolution():
    """Issue 29: a 1-channel model on a 3-channel batch failed with Conv2D's 'number of groups (3)'."""
    import keras_vit

    model = keras_vit.ViT("tiny", num_classes=3, input_shape=(32, 32, 1), preprocessing="unit")
    with pytest.raises(ValueError, match=r"shape \(2, 32, 32, 3\).*takes 1 channel"):
        model(np.zeros((2, 32, 32, 3), "float32"))
    assert tuple(model(np.zeros((2, 32, 32, 1), "float32")).shape) == (2, 3)


@pytest.mark.backends("tensorflow", "jax", "torch")
@pytest.mark.parametrize("side", [0, 30, 2])
def test_free_image_size_refuses_sides_the_patch_does_not_divide(side):
    """Issue 29: with image_size=None a 30x30 image for patch 4 gave the output of its 28x28 crop, a 0x0
    image vanished from the batch, and 2x2 failed in a reshape about 'a multiple of 128'."""
    import keras_vit

    model = keras_vit.ViT("tiny", num_classes=3, input_shape=(None, None, 3), position_embedding="sincos2d",
                          preprocessing="unit")
    with pytest.raises(ValueError, match=rf"got {side}x{side}.*|multiples of 4"):
        model(np.zeros((1, side, side, 3), "float32"))
    assert tuple(model(np.zeros((1, 28, 28, 3), "float32")).shape) == (1, 3)


def test_saved_model_with_a_free_size_refuses_sides_the_patch_does_not_divide(tmp_path):
    import keras_vit
    import tensorflow as tf
    from keras_vit import export
    from keras_vit.export.saved_model import error_text

    model = keras_vit.ViT("tiny", num_classes=3, input_shape=(None, None, 3), position_embedding="sincos2d",
                          preprocessing="unit")
    serving = tf.saved_model.load(export.saved_model(model, str(tmp_path / "s"))).signatures["serving_default"]
    assert serving(images=tf.zeros((2, 28, 28, 3)))["probabilities"].shape == (2, 3)
    for shape in [(1, 30, 30, 3), (1, 0, 0, 3), (1, 2, 2, 3)]:
        with pytest.raises(tf.errors.InvalidArgumentError) as error:
            serving(images=tf.zeros(shape))
        assert "positive multiples of 4 (the patch)" in error_text(error.value), error_text(error.value)
