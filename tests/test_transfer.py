"""keras_vit.transfer: the one loader of a pre-trained backbone, its features, few-shot and k-NN accuracy, the CLI."""

import numpy as np
import pytest

from keras_vit.transfer import fewshot, knn_accuracy, linear_fewshot


def _separable_split(seed=0, classes=5):
    rng = np.random.default_rng(seed)
    centres = 10 * rng.normal(size=(classes, 24))
    train_labels, test_labels = np.repeat(np.arange(classes), 30), np.repeat(np.arange(classes), 20)
    train = centres[train_labels] + 0.3 * rng.normal(size=(len(train_labels), 24))
    test = centres[test_labels] + 0.3 * rng.normal(size=(len(test_labels), 24))
    return train, train_labels, test, test_labels


def _random_split(seed=0, classes=4):
    rng = np.random.default_rng(seed)
    train_labels = np.repeat(np.arange(classes), 50)
    return (rng.normal(size=(len(train_labels), 16)), train_labels, rng.normal(size=(3000, 16)),
            rng.integers(0, classes, size=3000))


# --------------------------------------------------------------------------------------------
# Few-shot and k-NN on synthetic features


def test_fewshot_on_separable_features_is_perfect_at_every_shot_count():
    result = linear_fewshot(*_separable_split(), shots=(1, 5, 10, 25), draws=3)
    assert sorted(result) == [1, 5, 10, 25]
    for scores in result.values():
        assert scores["mean"] == 1.0 and scores["std"] == 0.0 and scores["draws"] == (1.0, 1.0, 1.0)


def test_fewshot_on_random_labels_is_near_chance():
    result = linear_fewshot(*_random_split(), shots=(1, 5, 10, 25), draws=5, seed=3)
    for count, scores in result.items():
        assert abs(scores["mean"] - 0.25) < 0.1, (count, scores)
        assert len(scores["draws"]) == 5 and scores["std"] == pytest.approx(np.std(scores["draws"]))


def test_fewshot_solves_the_regularised_least_squares_of_whitened_features_with_a_bias():
    """Both closed forms (few points, many points) equal the ridge solution computed as one stacked lstsq."""
    rng = np.random.default_rng(2)
    for n, d in ((6, 20), (60, 5)):
        x, targets, x_test = rng.normal(size=(n, d)), rng.integers(0, 3, size=n), rng.normal(size=(40, d))
        mean, std = x.mean(0), x.std(0) + 1e-5
        design = lambda f: np.hstack([(f - mean) / std, np.full((len(f), 1), fewshot.BIAS_CONSTANT)])  # noqa: E731
        y = 2 * np.eye(3)[targets] - 1
        l2 = 7.0
        stacked = np.vstack([design(x), np.sqrt(l2) * np.eye(d + 1)])
        weights = np.linalg.lstsq(stacked, np.vstack([y, np.zeros((d + 1, 3))]), rcond=None)[0]
        expected = np.argmax(design(x_test) @ weights, axis=1)
        np.testing.assert_array_equal(fewshot._ridge_predict(x, targets, 3, x_test, l2), expected)


def test_fewshot_draws_are_seeded_and_nested():
    data = _random_split(seed=4)
    first = linear_fewshot(*data, shots=(1, 5), draws=2, seed=7)
    assert first == linear_fewshot(*data, shots=(5, 1), draws=2, seed=7)
    assert first != linear_fewshot(*data, shots=(1, 5), draws=2, seed=8)


def test_fewshot_refuses_shots_a_class_cannot_fill_naming_shots_and_the_class():
    train, labels, test, test_labels = _separable_split()
    keep = (labels != 2) | (np.arange(len(labels)) % 30 < 4)  # class 2 keeps 4 images
    with pytest.raises(ValueError, match=r"Invalid shots=\(1, 5\): 1 class\(es\) have fewer than 5 .*class 2: 4\)"):
        linear_fewshot(train[keep], labels[keep], test, test_labels, shots=(1, 5))
    with pytest.raises(ValueError, match="Invalid shots=.*integers >= 1"):
        linear_fewshot(train, labels, test, test_labels, shots=(0, 1))
    with pytest.raises(ValueError, match="needs at least 2"):
        linear_fewshot(train[:30], labels[:30], test[:20], test_labels[:20], shots=(1,))


def test_knn_on_separable_features_is_perfect_and_on_random_labels_near_chance():
    assert knn_accuracy(*_separable_split(), k=20) == 1.0
    assert abs(knn_accuracy(*_random_split(), k=20) - 0.25) < 0.1


def test_knn_votes_are_weighted_by_exp_similarity_over_temperature():
    """One very close neighbour of class 0 outvotes two far ones of class 1 at T=0.07, not at a high T."""
    train = np.array([[1.0, 0.0], [0.5, 0.866], [0.5, -0.866]])
    labels, test = np.array([0, 1, 1]), np.array([[1.0, 0.05]])
    assert knn_accuracy(train, labels, test, [0], k=3, temperature=0.07) == 1.0
    assert knn_accuracy(train, labels, test, [0], k=3, temperature=100.0) == 0.0  # nearly a plain majority
    # Cosine: the length of a feature does not count.
    assert knn_accuracy(train * [[100.0], [1.0], [1.0]], labels, 50 * test, [0], k=3) == 1.0


def test_knn_in_chunks_equals_knn_at_once(monkeypatch):
    data = _random_split(seed=5, classes=3)
    at_once = knn_accuracy(*data, k=7)
    monkeypatch.setattr(fewshot, "_SIMILARITY_CHUNK", 3 * len(data[0]) + 1)  # 3 test rows per chunk
    assert knn_accuracy(*data, k=7) == at_once


@pytest.mark.parametrize("arguments, message", [
    (dict(k=0), r"Invalid k=0\. Expected an integer >= 1"),
    (dict(k=201), r"Invalid k=201: there are only 200 training examples"),
    (dict(temperature=0.0), r"Invalid temperature=0\.0\. Expected a number in \(0, inf\)"),
    (dict(num_classes=2), r"Invalid num_classes=2: the labels go up to 3"),
])
def test_knn_bad_arguments_are_refused_by_name(arguments, message):
    with pytest.raises(ValueError, match=message):
        knn_accuracy(*_random_split(), **arguments)


def test_a_probe_of_features_that_are_not_one_vector_per_image_is_refused():
    tokens = np.zeros((10, 5, 8))
    with pytest.raises(ValueError, match=r"Invalid train_features of shape \(10, 5, 8\)\. Expected \(examples, features\)"):
        knn_accuracy(tokens, np.arange(10) % 2, tokens, np.arange(10) % 2, k=1)
