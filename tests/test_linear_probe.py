"""The small-data probe (issue 50): ridge regression whose regulariser is chosen on held-out folds."""

import numpy as np
import pytest

from keras_vit.transfer import linear_probe
from keras_vit.transfer.linear_probe import fit_ridge_probe


def _few_images_many_features(seed=0, per_class=10, classes=5, dim=192, latent=8):
    """Few images per class; the class and its nuisance live in a few directions mixed into many
    features, plus noise in every feature, as a backbone's features do: an unregularised fit
    learns the noise."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, latent))
    mix = rng.normal(size=(latent, dim))
    train_y = np.repeat(np.arange(classes), per_class)
    test_y = np.repeat(np.arange(classes), 400)

    def images(y):
        return (centres[y] + rng.normal(size=(len(y), latent))) @ mix + rng.normal(size=(len(y), dim))

    return images(train_y), train_y, images(test_y), test_y, images


def _accuracy(probe, x, y):
    return float(np.mean((x @ probe.kernel + probe.bias).argmax(-1) == y))


def test_the_regulariser_chosen_on_folds_beats_a_nearly_unregularised_fit_on_held_out_data():
    train, train_y, test, test_y, _ = _few_images_many_features()
    chosen = fit_ridge_probe(train, train_y, 5)
    nearly_none = fit_ridge_probe(train, train_y, 5, l2_grid=(1e-4,))
    # The defect: a fit that learns 50 training images in 192 dimensions (train accuracy 1.0)
    # scores far less on new images than the one the folds chose.
    assert _accuracy(nearly_none, train, train_y) == 1.0
    assert chosen.l2 > 1e-3
    assert _accuracy(chosen, test, test_y) > _accuracy(nearly_none, test, test_y) + 0.1
    assert chosen.cv_accuracy == chosen.cv_accuracies[chosen.l2] == max(chosen.cv_accuracies.values())


def test_the_choice_reads_the_training_folds_only_and_is_seeded():
    train, train_y, _, _, _ = _few_images_many_features(seed=1)
    first = fit_ridge_probe(train, train_y, 5, seed=3)
    again = fit_ridge_probe(train, train_y, 5, seed=3)
    np.testing.assert_array_equal(first.kernel, again.kernel)
    assert first.folds == 5 and set(first.cv_accuracies) == set(linear_probe.L2_GRID)


def test_the_probe_solves_ridge_on_standardised_features_with_an_unpenalised_bias():
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(40, 6)) * [1, 2, 3, 4, 5, 6] + 7, np.arange(40) % 3
    probe = fit_ridge_probe(x, y, 3, l2_grid=(0.5,))
    # The same minimiser by the normal equations: standardised x, a free intercept, targets in {-1, 1}.
    z = (x - x.mean(0)) / (x.std(0) + 1e-6)
    targets = 2.0 * np.eye(3)[y] - 1.0
    design = np.concatenate([z, np.ones((40, 1))], axis=1)
    penalty = np.diag([0.5 * 40] * 6 + [0.0])
    weights = np.linalg.solve(design.T @ design + penalty, design.T @ targets)
    expected = probe.temperature * (design @ weights)
    np.testing.assert_allclose(x @ probe.kernel + probe.bias, expected, atol=1e-8)


def test_flipped_features_are_kept_only_where_the_folds_say_they_help():
    train, train_y, _, _, images = _few_images_many_features(seed=4)
    # "Flips" that are other views of the same classes: more rows of the right kind, a better fit.
    assert fit_ridge_probe(train, train_y, 5, flipped=images(train_y)).flips
    # Flips whose features belong to another class: the folds refuse them.
    assert not fit_ridge_probe(train, train_y, 5, flipped=images((train_y + 1) % 5)).flips


def test_the_temperature_turns_scores_into_calibrated_logits():
    train, train_y, test, test_y, _ = _few_images_many_features(seed=6)
    probe = fit_ridge_probe(train, train_y, 5)
    logits = test @ probe.kernel + probe.bias
    probabilities = np.exp(logits - logits.max(1, keepdims=True))
    probabilities /= probabilities.sum(1, keepdims=True)
    # Calibrated: the mean confidence is near the accuracy (the raw ridge scores, within [-1, 1],
    # would give near-uniform probabilities).
    assert probe.temperature > 1.0
    assert abs(probabilities.max(1).mean() - _accuracy(probe, test, test_y)) < 0.15


@pytest.mark.parametrize("arguments, message", [
    (dict(features=np.zeros((4, 2)), labels=[0, 0, 0, 0], num_classes=2), "at least 2"),
    (dict(features=np.zeros((4, 2)), labels=[0, 1, 2, 1], num_classes=2), "Invalid labels"),
    (dict(features=np.full((4, 2), np.nan), labels=[0, 1, 0, 1], num_classes=2), "not finite"),
    (dict(features=np.zeros((4, 2)), labels=[0, 1], num_classes=2), "Invalid features of shape"),
    (dict(features=np.zeros((4, 2)), labels=[0, 1, 0, 1], num_classes=2, l2_grid=(0.0,)), "Invalid l2_grid"),
    (dict(features=np.zeros((4, 2)), labels=[0, 1, 0, 1], num_classes=2, flipped=np.zeros((3, 2))), "flipped"),
])
def test_bad_arguments_are_refused_by_name(arguments, message):
    with pytest.raises(ValueError, match=message):
        fit_ridge_probe(**arguments)


def test_two_images_per_class_still_give_two_folds():
    x, y = np.eye(4, 3)[[0, 0, 1, 1]] + 0.01 * np.arange(4)[:, None], np.array([0, 0, 1, 1])
    probe = fit_ridge_probe(x, y, 2)
    assert probe.folds == 2 and _accuracy(probe, x, y) == 1.0


def test_fit_probe_puts_the_cross_validated_ridge_probe_of_the_backbone_features_into_the_head():
    import keras_vit
    from keras_vit.data.sources import from_arrays
    from keras_vit.training.probe import feature_model, fit_probe

    rng = np.random.default_rng(0)
    images = rng.integers(0, 255, (30, 16, 16, 3)).astype("uint8")
    labels = np.arange(30) % 3
    images[labels == 1] //= 3
    model = keras_vit.ViT("tiny", num_classes=3, image_size=16, preprocessing="unit")
    result = fit_probe(model, from_arrays(images, labels), batch_size=8, seed=1)
    features = np.asarray(feature_model(model).predict(images.astype("float32"), verbose=0))
    flipped = np.asarray(feature_model(model).predict(images[:, :, ::-1].astype("float32"), verbose=0))
    expected = fit_ridge_probe(features, labels, 3, flipped=flipped, seed=1)
    kernel, bias = model.get_layer("head").get_weights()
    np.testing.assert_allclose(kernel, expected.kernel, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(bias, expected.bias, rtol=1e-4, atol=1e-4)
    assert (result.l2, result.flips, result.cv_accuracy) == (expected.l2, expected.flips, expected.cv_accuracy)


def test_the_probes_passes_trace_the_backbone_once_for_training_and_once_for_validation():
    """A short last batch is padded, image and mirror share one backbone call, the comparison reuses the pass.

    Each trace of the probe's pass calls the backbone's layers in Python; before, the training
    images traced twice (the 4-image batches, then the 2 left) with two backbone calls each, and
    the comparison after fine-tuning traced another model.
    """
    from unittest import mock

    import keras_vit
    from keras_vit.data.sources import from_arrays
    from keras_vit.training.probe import LinearProbe

    rng = np.random.default_rng(0)
    images = rng.integers(0, 255, (10, 16, 16, 3)).astype("uint8")
    model = keras_vit.ViT("tiny", num_classes=2, image_size=16, preprocessing="unit")
    norm = model.get_layer("encoder_norm")
    probe = LinearProbe(model, batch_size=4)
    with mock.patch.object(norm, "call", wraps=norm.call) as calls:
        probe.fit(from_arrays(images, np.arange(10) % 2), from_arrays(images[:3], np.arange(3) % 2))
        assert calls.call_count == 2
        probe.compare_on_validation()
        assert calls.call_count == 2
