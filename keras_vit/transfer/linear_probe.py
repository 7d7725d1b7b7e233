"""A linear probe for small data: ridge regression whose regulariser is chosen by cross-validation.

On a few hundred images a linear head fitted without regularisation learns the training set
(95.6% train, 60.8% validation on issue 50's 250 images). The ViT paper's few-shot evaluation
fits closed-form ridge regression onto {-1, 1} one-vs-all targets; here the regulariser is not
a constant but the one with the best accuracy on held-out folds of the training images, all
candidates solved at once from one SVD per fold. The scores are then scaled by the temperature
that minimises the held-out cross-entropy, so that they serve as the logits of a softmax head
(the start of fine-tuning, LP-FT). Features of horizontally flipped images, when given, join the
training rows of their image's fold, and are kept only where the folds say they help.

Example:

>>> rng = np.random.default_rng(0)
>>> labels = np.repeat(np.arange(3), 20)
>>> features = 3 * np.eye(3, 8)[labels] + rng.normal(size=(60, 8))
>>> probe = fit_ridge_probe(features, labels, num_classes=3)
>>> probe.cv_accuracy > 0.9, probe.kernel.shape, probe.bias.shape
(True, (8, 3), (3,))
"""

from __future__ import annotations

import dataclasses

import numpy as np

from keras_vit._validation import check_positive_int, check_seed

# Candidate regularisers, in units of the number of training rows (standardised features: the
# data term grows with the rows). 1e-4 is nearly unregularised; 1e2 leaves little but the class
# means. Half-decade steps: the held-out accuracy is flat within one.
L2_GRID = tuple(10.0 ** (k / 2) for k in range(-8, 5))
FOLDS = 5
# Candidate temperatures (logits = temperature x ridge score), log-spaced.
TEMPERATURES = tuple(np.geomspace(0.5, 200.0, 41))
# Added to each feature's standard deviation (a constant feature stays finite).
_STD_EPSILON = 1e-6


@dataclasses.dataclass(frozen=True)
class RidgeProbe:
    """A fitted probe: logits = features @ kernel + bias (raw features in, standardisation folded in).

    Attributes:
        kernel: np.ndarray float64 (D, C).
        bias: np.ndarray float64 (C,).
        l2: float. The chosen regulariser, in units of training rows.
        cv_accuracy: float. Held-out accuracy of the chosen set-up, over the folds.
        cv_accuracies: dict. Held-out accuracy of each regulariser, for the chosen flip setting.
        temperature: float. Scale of the ridge scores in the logits.
        flips: bool. Whether flipped images' features are among the training rows.
        folds: int. Folds the choice was made on.
    """

    kernel: np.ndarray
    bias: np.ndarray
    l2: float
    cv_accuracy: float
    cv_accuracies: dict
    temperature: float
    flips: bool
    folds: int


def fit_ridge_probe(features, labels, num_classes, *, flipped=None, folds=FOLDS, l2_grid=L2_GRID,
                    seed=0) -> RidgeProbe:
    """Fits a ridge probe with its regulariser (and the use of flips) chosen by k-fold cross-validation.

    Folds are stratified by class and drawn by `seed`; a flipped image's row always stays in its
    image's fold. Ties in held-out accuracy go to the larger regulariser, then to no flips.

    Args:
        features: array (N, D). Features of the training images.
        labels: array (N,). Integer labels in [0, num_classes).
        num_classes: int. Number of classes (columns of the kernel).
        flipped: array (N, D) or None. Features of the same images flipped left-right, row for
            row; None fits without. Defaults to None.
        folds: int. Folds of the cross-validation, at most the smallest class's count (fewer are
            used when a class has fewer images; at least 2). Defaults to 5.
        l2_grid: sequence of float. Candidate regularisers, in units of training rows.
            Defaults to `L2_GRID` (1e-4 to 1e2).
        seed: int. Seed of the folds. Defaults to 0.

    Returns:
        `RidgeProbe`.
    """
    x, y = _checked(features, labels, num_classes)
    check_positive_int("folds", folds)
    check_seed("seed", seed)
    grid = tuple(float(v) for v in l2_grid)
    if not grid or any(not np.isfinite(v) or v <= 0 for v in grid):
        raise ValueError(f"Invalid l2_grid={l2_grid!r}. Expected one or more finite numbers > 0.")
    if flipped is not None:
        flipped = np.asarray(flipped, np.float64)
        if flipped.shape != x.shape:
            raise ValueError(f"Invalid flipped of shape {flipped.shape}: expected the features' shape {x.shape}.")
    fold_of = _stratified_folds(y, folds, seed)
    settings = [False] + ([True] if flipped is not None else [])
    results = {flips: _cross_validate(x, y, num_classes, fold_of, grid, flipped if flips else None)
               for flips in settings}
    # Best accuracy; ties to the larger regulariser, then to no flips (the simpler fit).
    flips, index = max(((f, i) for f in settings for i in range(len(grid))),
                       key=lambda fi: (results[fi[0]][0][fi[1]], fi[1], not fi[0]))
    accuracies, scores = results[flips]
    temperature = _temperature(scores[index], y)
    rows, targets = _rows(x, y, flipped if flips else None)
    kernel, bias = _solve(rows, targets, num_classes, [grid[index]])[0]
    return RidgeProbe(kernel=kernel * temperature, bias=bias * temperature, l2=grid[index],
                      cv_accuracy=float(accuracies[index]),
                      cv_accuracies={grid[i]: float(a) for i, a in enumerate(accuracies)},
                      temperature=float(temperature), flips=flips, folds=int(fold_of.max() + 1))


def _checked(features, labels, num_classes):
    check_positive_int("num_classes", num_classes)
    x = np.asarray(features, np.float64)
    y = np.asarray(labels)
    if x.ndim != 2 or y.shape != (len(x),):
        raise ValueError(f"Invalid features of shape {x.shape} and labels of shape {y.shape}: expected (N, D) and (N,).")
    if not np.all(np.isfinite(x)):
        raise ValueError("Invalid features: some are not finite (NaN or infinity); a probe needs finite features.")
    if y.size and (y.min() < 0 or y.max() >= num_classes or not np.issubdtype(y.dtype, np.integer)):
        raise ValueError(f"Invalid labels: expected integers in [0, {num_classes}), got {np.unique(y)[:10].tolist()}.")
    present = np.unique(y)
    if len(present) < 2:
        raise ValueError(f"The training data has {len(present)} class: a probe needs images of at least 2 classes.")
    return x, y.astype(np.int64)


def _stratified_folds(y, folds, seed):
    """Fold index of each row: every class dealt round-robin over the folds in a random order."""
    smallest = min(int(np.sum(y == c)) for c in np.unique(y))
    folds = max(2, min(folds, smallest)) if smallest >= 2 else 2
    fold_of = np.empty(len(y), np.int64)
    rng = np.random.default_rng(seed)
    offset = 0
    for c in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == c))
        fold_of[members] = (np.arange(len(members)) + offset) % folds
        offset += len(members)  # classes start at different folds, so small classes spread out
    return fold_of


def _rows(x, y, flipped):
    if flipped is None:
        return x, y
    return np.concatenate([x, flipped]), np.concatenate([y, y])


def _solve(x, y, num_classes, l2_values):
    """(kernel, bias) on raw features for each regulariser: ridge on standardised x onto {-1, 1} targets."""
    mean = x.mean(axis=0)
    std = x.std(axis=0) + _STD_EPSILON
    z = (x - mean) / std
    targets = 2.0 * np.eye(num_classes)[y] - 1.0
    target_mean = targets.mean(axis=0)
    u, s, vt = np.linalg.svd(z, full_matrices=False)
    projected = u.T @ (targets - target_mean)
    solutions = []
    for l2 in l2_values:
        weights = vt.T @ ((s / (s**2 + l2 * len(z)))[:, None] * projected)  # centred: the bias is not penalised
        kernel = weights / std[:, None]
        solutions.append((kernel, target_mean - mean @ kernel))
    return solutions


def _cross_validate(x, y, num_classes, fold_of, grid, flipped):
    """(accuracy per regulariser, held-out scores per regulariser (N, C)) over the folds."""
    scores = np.zeros((len(grid), len(y), num_classes))
    for fold in range(int(fold_of.max()) + 1):
        held = fold_of == fold
        rows, targets = _rows(x[~held], y[~held], None if flipped is None else flipped[~held])
        for i, (kernel, bias) in enumerate(_solve(rows, targets, num_classes, grid)):
            scores[i, held] = x[held] @ kernel + bias
    accuracies = np.mean(scores.argmax(axis=-1) == y[None], axis=1)
    return accuracies, scores


def _temperature(scores, y):
    """The temperature of `TEMPERATURES` with the least cross-entropy of softmax(t * scores) on held-out scores."""
    best, best_loss = TEMPERATURES[0], np.inf
    for t in TEMPERATURES:
        logits = t * scores
        logits = logits - logits.max(axis=1, keepdims=True)
        loss = np.mean(np.log(np.exp(logits).sum(axis=1)) - logits[np.arange(len(y)), y])
        if loss < best_loss:
            best, best_loss = t, loss
    return float(best)
