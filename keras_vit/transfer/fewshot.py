"""Accuracy of frozen features without training a network: linear few-shot and weighted k-NN (NumPy only).

`linear_fewshot` is the ViT paper's few-shot linear evaluation as big_vision computes it: per
shot count and draw, a closed-form regularised least-squares fit of the sampled training
features onto {-1, 1} one-vs-all targets. `knn_accuracy` is DINO's weighted k-NN classifier:
cosine similarity to the training features, the k nearest vote with weight exp(similarity / T).

Example:

>>> rng = np.random.default_rng(0)
>>> centres = 10 * rng.normal(size=(3, 8))
>>> train_labels, test_labels = np.repeat(np.arange(3), 10), np.repeat(np.arange(3), 5)
>>> train = centres[train_labels] + rng.normal(size=(30, 8))
>>> test = centres[test_labels] + rng.normal(size=(15, 8))
>>> linear_fewshot(train, train_labels, test, test_labels, shots=(1, 5), draws=2)[5]["mean"]
1.0
>>> knn_accuracy(train, train_labels, test, test_labels, k=5)
1.0
"""

from __future__ import annotations

import numpy as np

from keras_vit._validation import check_number_in, check_positive_int, check_positive_number, check_seed

# big_vision's few-shot defaults: its l2 regulariser (a fixed constant, configs' 2.0 ** 10) and
# the constant of the bias feature, large so that the bias is almost unregularised.
L2_REG = 2.0**10
BIAS_CONSTANT = 100.0
SHOTS = (1, 5, 10, 25)
# Added to each feature's standard deviation before whitening (a constant feature stays finite).
_STD_EPSILON = 1e-5
# Similarities computed at once by knn_accuracy: 2**24 float32 values (64 MiB; with argpartition's
# int64 indices about 200 MiB at peak).
_SIMILARITY_CHUNK = 2**24


def check_fewshot_arguments(shots=SHOTS, draws=5, l2_reg=L2_REG, seed=0, name=None):
    """Checks `linear_fewshot`'s numbers before any feature is computed: ValueError naming the argument.

    Args:
        shots: sequence of int. As for `linear_fewshot`. Defaults to (1, 5, 10, 25).
        draws: int. As for `linear_fewshot`. Defaults to 5.
        l2_reg: float. As for `linear_fewshot`. Defaults to 2.0 ** 10.
        seed: int. As for `linear_fewshot`. Defaults to 0.
        name: callable or None. How an argument is spelled in messages (`keras-vit fewshot`
            passes its flags, "--shots"). Defaults to None (the argument's own name).

    Returns:
        The shot counts as a tuple of int, sorted, without repeats.

    Example:

    >>> check_fewshot_arguments(shots=(5, 1, 5))
    (1, 5)
    >>> check_fewshot_arguments(shots=(0, 5))
    Traceback (most recent call last):
    ...
    ValueError: Invalid shots=(0, 5). Expected one or more integers >= 1 (images per class), e.g. (1, 5, 10, 25).
    """
    name = name or (lambda field: field)
    values = tuple(shots) if isinstance(shots, (list, tuple)) else None
    if not values or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1 for v in values):
        raise ValueError(
            f"Invalid {name('shots')}={shots!r}. Expected one or more integers >= 1 (images per class), "
            "e.g. (1, 5, 10, 25)."
        )
    check_positive_int(name("draws"), draws)
    check_positive_number(name("l2_reg"), l2_reg)
    check_seed(name("seed"), seed)
    return tuple(sorted({int(v) for v in values}))


def check_knn_arguments(k=20, temperature=0.07, num_train=None, name=None):
    """Checks `knn_accuracy`'s numbers: ValueError naming the argument.

    Args:
        k: int. Neighbours that vote. Defaults to 20.
        temperature: float. Temperature of the votes. Defaults to 0.07.
        num_train: int or None. Training examples, when known: k may not exceed it. Defaults
            to None.
        name: callable or None. How an argument is spelled in messages. Defaults to None.

    Example:

    >>> check_knn_arguments(k=30, num_train=18)
    Traceback (most recent call last):
    ...
    ValueError: Invalid k=30: there are only 18 training examples to vote. Expected an integer in [1, 18].
    """
    name = name or (lambda field: field)
    check_positive_int(name("k"), k)
    if num_train is not None and k > num_train:
        raise ValueError(
            f"Invalid {name('k')}={k}: there are only {num_train} training examples to vote. "
            f"Expected an integer in [1, {num_train}]."
        )
    check_number_in(name("temperature"), temperature, 0, float("inf"), include_low=False, include_high=False)


def check_shots(shots, train_labels, classes=None, class_names=None, name=None, held_out_labels=None,
                uncut_labels=None) -> None:
    """Refuses shot counts that some class cannot fill, and data of fewer than two classes.

    The message names each short class with its count and, given `held_out_labels`, what the
    held-out share took of it; then what to pass: the shot counts that fit, or, for a class left
    without training examples (no shot count fits it), where its images must come from. Given
    `uncut_labels`, a class that only `max_train_examples` left short is refused naming it.

    Args:
        shots: sequence of int. Shot counts, as for `linear_fewshot`.
        train_labels: array (N,). Integer labels of the training examples.
        classes: sequence of int or None. The classes to draw from; None takes those of
            `train_labels`. Defaults to None.
        class_names: sequence of str or None. Name of each label, for the message. Defaults to None.
        name: callable or None. How an argument is spelled in messages. Defaults to None.
        held_out_labels: array or None. Labels of the examples held out of the same images for
            testing (a folder's held-out share), to say what it took. Defaults to None.
        uncut_labels: array or None. Labels of all the training examples, of which `train_labels`
            are the first (max_train_examples), to say when that cut left a class short. Defaults
            to None.

    Example:

    >>> check_shots((1, 5), [0, 0, 0, 1, 1, 1, 1, 1], class_names=["cat", "dog"], held_out_labels=[0, 1])
    Traceback (most recent call last):
    ...
    ValueError: Invalid shots=(1, 5): 1 class(es) have fewer than 5 training examples (cat: 3, 1 more held out).
    Pass shots of at most 3, the smallest class's count (of those asked for: 1), add images to cat, or hold out
    fewer with validation_split.

    >>> check_shots((2,), [0, 1, 0], uncut_labels=[0, 1, 0, 0, 1, 1])
    Traceback (most recent call last):
    ...
    ValueError: Invalid max_train_examples=3: its first 3 training examples leave 1 class(es) fewer than 2 for
    shots=(2,) (class 1: 1 of 3). Pass max_train_examples of at least 5 (the first 5 hold 2 of every class) or
    leave it out.
    """
    name = name or (lambda field: field)
    labels = np.asarray(train_labels)
    if uncut_labels is not None and len(uncut_labels) > len(labels):
        # The whole training split first: a larger cut cannot fill a class that the data leaves short.
        check_shots(shots, uncut_labels, classes, class_names, name, held_out_labels)
        _check_cut(shots, labels, np.asarray(uncut_labels), classes, class_names, name)
        return
    classes = np.unique(labels) if classes is None else np.asarray(classes)
    if len(classes) < 2:
        raise ValueError(
            f"The training data has {len(classes)} class: few-shot accuracy needs at least 2 (a folder of at least "
            "two class sub-folders)."
        )
    counts = {int(c): int(np.sum(labels == c)) for c in classes}
    largest = max(shots)
    short = {c: n for c, n in counts.items() if n < largest}
    if not short:
        return
    held = np.asarray(held_out_labels if held_out_labels is not None else [], np.int64)
    held = {c: int(np.sum(held == c)) for c in counts}

    def label(c):
        return class_names[c] if class_names is not None and c < len(class_names) else f"class {c}"

    def described(c, n):
        if not held[c]:
            return f"{label(c)}: {n}"
        if n:
            return f"{label(c)}: {n}, {held[c]} more held out"
        return f"{label(c)}: 0, the held-out share took " + (
            "its only image" if held[c] == 1 else f"all {held[c]} of its images")

    listed = "; ".join(described(c, n) for c, n in sorted(short.items())[:5])
    problem = (f"Invalid {name('shots')}={tuple(shots)}: {len(short)} class(es) have fewer than {largest} training "
               f"examples ({listed}{'; ...' if len(short) > 5 else ''}).")
    smallest = min(counts.values())
    if smallest:
        fitting = ",".join(str(s) for s in shots if s <= smallest)
        asked = f" (of those asked for: {fitting})" if fitting else ""
        fewer = f", or hold out fewer with {name('validation_split')}" if any(held[c] for c in short) else ""
        advice = (f"Pass {name('shots')} of at most {smallest}, the smallest class's count{asked}, add images to "
                  f"{', '.join(label(c) for c in sorted(short))}{fewer}.")
    else:
        empty = [c for c, n in counts.items() if n == 0]
        advice = f"No shot count fits a class without training examples: add images to {', '.join(map(label, empty))}"
        if any(held[c] for c in empty):
            # The held-out share is at least one image, drawn from every class at random: with so few
            # images some class can lose all of them whatever the fraction or seed.
            advice += (f" (the held-out share, at least one image drawn at random by {name('seed')}, comes out of the "
                       "training images), or pass data with a test split of its own, e.g. a folder with train/ and "
                       "test/ sub-folders, of which nothing is held out")
        advice += "."
    raise ValueError(f"{problem} {advice}")


def _check_cut(shots, labels, uncut, classes, class_names, name):
    """`check_shots` of the first len(labels) of `uncut` training labels, which hold every shot count."""
    classes = np.unique(uncut) if classes is None else np.asarray(classes)
    largest = max(shots)
    short = {int(c): int(np.sum(labels == c)) for c in classes if np.sum(labels == c) < largest}
    if not short:
        return
    # The shortest prefix of the training examples that holds `largest` of every class.
    counts = np.stack([np.cumsum(uncut == c) for c in classes])
    needed = int(np.argmax(counts.min(axis=0) >= largest)) + 1
    listed = "; ".join(f"{class_names[c] if class_names is not None and c < len(class_names) else f'class {c}'}: "
                       f"{n} of {int(np.sum(uncut == c))}" for c, n in sorted(short.items())[:5])
    cut = name("max_train_examples")
    raise ValueError(
        f"Invalid {cut}={len(labels)}: its first {len(labels)} training examples leave {len(short)} class(es) fewer "
        f"than {largest} for {name('shots')}={tuple(shots)} ({listed}{'; ...' if len(short) > 5 else ''}). Pass "
        f"{cut} of at least {needed} (the first {needed} hold {largest} of every class) or leave it out."
    )


def linear_fewshot(train_features, train_labels, test_features, test_labels, *, shots=SHOTS, draws=5,
                   l2_reg=L2_REG, seed=0) -> dict:
    """Linear few-shot accuracy of frozen features: closed-form regularised least squares, averaged over draws.

    For each draw, every class's training examples are put in a random order (by `seed` and
    the draw) and each shot count takes the first `shots` of them, so a draw's 1-shot set is
    inside its 5-shot set, as big_vision draws them. On those examples the features are
    whitened (each dimension's mean subtracted, divided by its standard deviation + 1e-5, both
    of the sampled examples), a constant feature of 100 is appended for a nearly unregularised
    bias, and ridge regression onto one-vs-all targets in {-1, 1} is solved in closed form with
    regulariser `l2_reg`. Test features get the same whitening; the prediction is the argmax.
    A class with fewer training examples than the largest shot count is refused: pass fewer
    shots rather than a silently smaller set.

    Args:
        train_features: array (N, D). Features of the training examples.
        train_labels: array (N,). Their integer labels.
        test_features: array (M, D). Features of the test examples.
        test_labels: array (M,). Their integer labels.
        shots: sequence of int. Training examples per class. Defaults to (1, 5, 10, 25).
        draws: int. Random draws per shot count. Defaults to 5.
        l2_reg: float. The ridge regulariser, big_vision's fixed 2**10 (1024). Defaults to 1024.
        seed: int. Seed of the draws. Defaults to 0.

    Returns:
        dict shot count -> {"mean": float, "std": float, "draws": tuple of float}, accuracies
        in [0, 1] (std over draws, 0 for one draw).

    Example:

    >>> rng = np.random.default_rng(1)
    >>> labels = rng.integers(0, 4, size=400)
    >>> result = linear_fewshot(rng.normal(size=(400, 16)), labels, rng.normal(size=(2000, 16)),
    ...                         rng.integers(0, 4, size=2000), shots=(10,), draws=3)
    >>> abs(result[10]["mean"] - 0.25) < 0.05, len(result[10]["draws"])
    (True, 3)
    """
    shots = check_fewshot_arguments(shots, draws, l2_reg, seed)
    x_train, y_train, x_test, y_test = _check_features(train_features, train_labels, test_features, test_labels)
    classes = np.unique(np.concatenate([y_train, y_test]))
    check_shots(shots, y_train, classes)
    index_of = {int(c): i for i, c in enumerate(classes)}
    test_targets = np.array([index_of[int(c)] for c in y_test])
    accuracies = {count: [] for count in shots}
    for draw in range(draws):
        rng = np.random.default_rng([seed, draw])
        order = [rng.permutation(np.flatnonzero(y_train == c)) for c in classes]
        for count in shots:
            chosen = np.concatenate([indices[:count] for indices in order])
            targets = np.array([index_of[int(c)] for c in y_train[chosen]])
            predictions = _ridge_predict(x_train[chosen], targets, len(classes), x_test, l2_reg)
            accuracies[count].append(float(np.mean(predictions == test_targets)))
    return {count: {"mean": float(np.mean(values)), "std": float(np.std(values)), "draws": tuple(values)}
            for count, values in accuracies.items()}


def _ridge_predict(x, targets, num_classes, x_test, l2_reg):
    """Class indices of x_test by ridge regression of whitened x (plus a bias feature) onto {-1, 1} one-hot."""
    mean = x.mean(axis=0, keepdims=True)
    std = x.std(axis=0, keepdims=True) + _STD_EPSILON

    def design(features):
        whitened = (features - mean) / std
        return np.concatenate([whitened, np.full((len(whitened), 1), BIAS_CONSTANT)], axis=1)

    a = design(x)
    y = 2.0 * np.eye(num_classes)[targets] - 1.0
    n, d = a.shape
    # The same minimiser in either form; the smaller system is solved (few shots: n << d).
    if n >= d:
        weights = np.linalg.solve(a.T @ a + l2_reg * np.eye(d), a.T @ y)
    else:
        weights = a.T @ np.linalg.solve(a @ a.T + l2_reg * np.eye(n), y)
    return np.argmax(design(x_test) @ weights, axis=1)


def knn_accuracy(train_features, train_labels, test_features, test_labels, *, k=20, temperature=0.07,
                 num_classes=None) -> float:
    """Weighted k-NN accuracy of frozen features, as DINO evaluates them.

    Features are L2-normalised; each test example's k most cosine-similar training examples
    vote for their label with weight exp(similarity / temperature); the class with the largest
    sum is the prediction (ties: the lower class index). The similarity matrix is computed in
    chunks of test examples (at most 2**24 similarities, 64 MiB, at a time), so 50,000
    training by 10,000 test examples fit in memory.

    Args:
        train_features: array (N, D). Features of the training examples.
        train_labels: array (N,). Their integer labels, >= 0.
        test_features: array (M, D). Features of the test examples.
        test_labels: array (M,). Their integer labels, >= 0.
        k: int. Neighbours that vote, 1 <= k <= N. Defaults to 20.
        temperature: float. Temperature of the votes, > 0. Defaults to 0.07.
        num_classes: int or None. Number of classes; None takes the largest label + 1.
            Defaults to None.

    Returns:
        float. Top-1 accuracy in [0, 1].

    Example:

    >>> train = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> knn_accuracy(train, [0, 0, 1, 1], np.array([[2.0, 0.1], [0.2, 3.0]]), [0, 1], k=2)
    1.0
    """
    x_train, y_train, x_test, y_test = _check_features(train_features, train_labels, test_features, test_labels)
    check_knn_arguments(k, temperature, num_train=len(x_train))
    largest = int(max(y_train.max(), y_test.max()))
    if num_classes is None:
        num_classes = largest + 1
    check_positive_int("num_classes", num_classes)
    if largest >= num_classes:
        raise ValueError(f"Invalid num_classes={num_classes}: the labels go up to {largest}.")
    x_train = _l2_normalized(x_train).astype(np.float32)
    x_test = _l2_normalized(x_test).astype(np.float32)
    chunk = max(1, _SIMILARITY_CHUNK // len(x_train))
    correct = 0
    for start in range(0, len(x_test), chunk):
        similarity = x_test[start:start + chunk] @ x_train.T
        nearest = np.argpartition(-similarity, k - 1, axis=1)[:, :k]
        weights = np.exp(np.take_along_axis(similarity, nearest, axis=1).astype(np.float64) / temperature)
        votes = np.zeros((len(similarity), num_classes))
        np.add.at(votes, (np.arange(len(similarity))[:, None], y_train[nearest]), weights)
        correct += int(np.sum(np.argmax(votes, axis=1) == y_test[start:start + chunk]))
    return correct / len(x_test)


def _l2_normalized(x):
    # A zero vector stays zero (similarity 0 to everything) instead of becoming NaN.
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def _check_features(train_features, train_labels, test_features, test_labels):
    """The four arrays as float64 features (N, D) and int64 labels (N,), checked to agree."""
    arrays = []
    for what, features, labels in (("train", train_features, train_labels), ("test", test_features, test_labels)):
        features, labels = np.asarray(features), np.asarray(labels)
        if features.ndim != 2 or len(features) == 0:
            raise ValueError(
                f"Invalid {what}_features of shape {features.shape}. Expected (examples, features) with at "
                "least one example: a model with pooled features (load_pretrained's feature model)."
            )
        if not np.all(np.isfinite(features)):
            raise ValueError(f"Invalid {what}_features: they hold NaN or infinite values.")
        if labels.shape != (len(features),) or not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0:
            raise ValueError(
                f"Invalid {what}_labels of shape {labels.shape} and dtype {labels.dtype}. Expected "
                f"{len(features)} integer labels >= 0, one per row of {what}_features."
            )
        arrays += [features.astype(np.float64), labels.astype(np.int64)]
    if arrays[0].shape[1] != arrays[2].shape[1]:
        raise ValueError(
            f"train_features have {arrays[0].shape[1]} dimensions and test_features {arrays[2].shape[1]}: "
            "expected features of one model."
        )
    return arrays
