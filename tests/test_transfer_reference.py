"""`keras-vit fewshot` and `knn` against reference computations on the same features (issue 50): DINO's
weighted k-NN written in torch as its evaluation computes it, and the paper's few-shot ridge regression
as a least-squares problem solved by SciPy."""

import numpy as np
import pytest
import scipy.linalg

from keras_vit.transfer import knn_accuracy, linear_fewshot


def _features(seed, classes=6, train=120, test=300, dim=24):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, dim))
    train_y, test_y = rng.integers(0, classes, train), rng.integers(0, classes, test)
    return (centres[train_y] + 1.5 * rng.normal(size=(train, dim)), train_y,
            centres[test_y] + 1.5 * rng.normal(size=(test, dim)), test_y)


def _dino_knn(torch, train, train_y, test, test_y, k, temperature, classes):
    """DINO's k-NN evaluation: top-k cosine similarities, one-hot votes weighted by exp(similarity / T)."""
    train = torch.nn.functional.normalize(torch.from_numpy(train), dim=1)
    test = torch.nn.functional.normalize(torch.from_numpy(test), dim=1)
    similarity = test @ train.T
    distances, indices = similarity.topk(k, dim=1)
    retrieved = torch.from_numpy(train_y)[indices]
    one_hot = torch.zeros(len(test), k, classes, dtype=torch.float64).scatter_(2, retrieved[..., None], 1.0)
    votes = (one_hot * (distances / temperature).exp()[..., None]).sum(1)
    return float((votes.argmax(1) == torch.from_numpy(test_y)).double().mean())


@pytest.mark.parametrize("seed, k, temperature", [(0, 20, 0.07), (1, 5, 0.5), (2, 1, 0.07)])
def test_knn_equals_dinos_weighted_knn_on_the_same_features(seed, k, temperature):
    torch = pytest.importorskip("torch")
    train, train_y, test, test_y = _features(seed)
    expected = _dino_knn(torch, train, train_y, test, test_y, k, temperature, 6)
    assert knn_accuracy(train, train_y, test, test_y, k=k, temperature=temperature) == pytest.approx(expected, abs=1e-12)


def test_linear_fewshot_equals_the_regularised_least_squares_solved_by_scipy():
    train, train_y, test, test_y = _features(3)
    shots, l2 = 5, 2.0**10
    result = linear_fewshot(train, train_y, test, test_y, shots=(shots,), draws=3, seed=7)
    accuracies = []
    for draw in range(3):  # the draws as linear_fewshot documents them: each class's first `shots` of a permutation
        rng = np.random.default_rng([7, draw])
        chosen = np.concatenate([rng.permutation(np.flatnonzero(train_y == c))[:shots] for c in range(6)])
        x = train[chosen]
        mean, std = x.mean(0), x.std(0) + 1e-5
        design = np.hstack([(x - mean) / std, np.full((len(x), 1), 100.0)])
        targets = 2.0 * np.eye(6)[train_y[chosen]] - 1.0
        # min |design w - targets|^2 + l2 |w|^2 as one stacked least-squares problem.
        stacked = np.vstack([design, np.sqrt(l2) * np.eye(design.shape[1])])
        padded = np.vstack([targets, np.zeros((design.shape[1], 6))])
        weights = scipy.linalg.lstsq(stacked, padded)[0]
        predicted = (np.hstack([(test - mean) / std, np.full((len(test), 1), 100.0)]) @ weights).argmax(1)
        accuracies.append(float(np.mean(predicted == test_y)))
    assert result[shots]["draws"] == pytest.approx(tuple(accuracies), abs=1e-12)
