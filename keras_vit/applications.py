"""keras.applications' helpers for ViT classifiers: `preprocess_input` and `decode_predictions`.

`preprocess_input` applies one of the pixel scalings of `keras_vit.configs.SCALINGS` outside the
model (a model built with `preprocessing=` does it itself). `decode_predictions` names the
ImageNet-1k classes from a list shipped with the package (`imagenet1k_classes.txt`, from the
timm wheel; see its header), so nothing is downloaded.

Example:

>>> import numpy as np
>>> preprocess_input(np.array([[[0, 127.5, 255]]], "float32"), mode="symmetric")
array([[[-1.,  0.,  1.]]], dtype=float32)
>>> scores = np.zeros((1, 1000)); scores[0, 281] = 0.9
>>> decode_predictions(scores, top=1)
[[('n02123045', 'tabby', 0.9)]]
"""

from __future__ import annotations

import functools
import os

import keras
import numpy as np

from keras_vit import configs
from keras_vit._validation import check_choice, check_positive_int

IMAGENET_CLASSES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "imagenet1k_classes.txt")
NUM_IMAGENET_CLASSES = 1000


def preprocess_input(x, mode):
    """Scales channels-last images with pixels in [0, 255] as a model trained with `mode` expects.

    Args:
        x: NumPy array, nested list or tensor. Images (height, width, channels) or a batch
            (batch, height, width, channels), values in [0, 255]. It is not modified.
        mode: str. A key of `keras_vit.configs.SCALINGS`: "unit" ([0, 1]), "symmetric"
            ([-1, 1], the original Google checkpoints and most timm ViTs) or "imagenet"
            (ImageNet mean/std per RGB channel, DeiT). There is no default: use the scaling the
            checkpoint was trained with.

    Returns:
        A float32 NumPy array for array or list input (float64 stays float64), else a tensor.

    Example:

    >>> import numpy as np
    >>> preprocess_input(np.full((1, 2, 2, 3), 255, "uint8"), mode="unit")[0, 0, 0]
    array([1., 1., 1.], dtype=float32)
    >>> preprocess_input(np.zeros((2, 2, 3)), mode="imagenet")[0, 0].round(3)
    array([-2.118, -2.036, -1.804])
    """
    check_choice("mode", mode, tuple(configs.SCALINGS))
    mean, std = configs.SCALINGS[mode]
    as_numpy = isinstance(x, (np.ndarray, list, tuple, int, float, np.number))
    if as_numpy:
        x = np.asarray(x)
        if x.dtype.kind not in "uif":
            raise ValueError(f"Invalid x of dtype {x.dtype}: expected pixel values (numbers) in [0, 255].")
        if x.dtype.kind != "f":
            x = x.astype("float32")
        if x.size and not (np.nanmin(x) >= 0 and np.nanmax(x) <= 255 and not np.isnan(x).any()):
            raise ValueError(
                f"Invalid x: pixel values range from {np.nanmin(x)} to {np.nanmax(x)}"
                f"{' with NaN' if np.isnan(x).any() else ''}; preprocess_input expects [0, 255]."
            )
    shape = tuple(x.shape)
    if len(shape) not in (3, 4):
        raise ValueError(
            f"Invalid x of shape {shape}: expected channels-last images (height, width, channels) "
            "or (batch, height, width, channels)."
        )
    if len(mean) > 1 and shape[-1] is not None and shape[-1] != len(mean):
        raise ValueError(
            f"Invalid x of shape {shape} for mode={mode!r}: it scales {len(mean)} channels (RGB, "
            f"channels last), the images have {shape[-1]}."
        )
    if not as_numpy and not keras.backend.is_float_dtype(keras.backend.standardize_dtype(x.dtype)):
        x = keras.ops.cast(x, "float32")
    return scale_pixels(x, mean, std)


def scale_pixels(x, mean, std):
    """Returns `(x - mean) / std` per channel, in `x`'s float dtype: the one pixel scaling of keras_vit.

    `preprocess_input`, the input pipeline, the exports and `predict` all scale through it.

    Args:
        x: float NumPy array, TensorFlow tensor (tf.data or an exported graph, on any Keras
            backend) or Keras tensor. Channels-last pixels.
        mean: sequence of float. 1 or `channels` values on the pixels' scale.
        std: sequence of float. 1 or `channels` values, each > 0.

    Example:

    >>> scale_pixels(np.array([[0.0, 255.0]], "float32"), (127.5,), (127.5,))
    array([[-1.,  1.]], dtype=float32)
    """
    if isinstance(x, np.ndarray):
        return ((x - np.asarray(mean, x.dtype)) / np.asarray(std, x.dtype)).astype(x.dtype, copy=False)
    as_numpy_dtype = getattr(x.dtype, "as_numpy_dtype", None)  # a TensorFlow tensor
    if as_numpy_dtype is not None:
        return (x - np.asarray(mean, as_numpy_dtype)) / np.asarray(std, as_numpy_dtype)
    return (x - keras.ops.convert_to_tensor(mean, x.dtype)) / keras.ops.convert_to_tensor(std, x.dtype)


@functools.cache
def imagenet_classes() -> tuple[tuple[str, str], ...]:
    """The 1000 ImageNet-1k classes in class-index order, as (WordNet id, name) pairs.

    The name is the first WordNet lemma with spaces as underscores, as keras.applications
    names them ("tabby", "tiger_cat").

    Example:

    >>> classes = imagenet_classes()
    >>> len(classes), classes[0], classes[282]
    (1000, ('n01440764', 'tench'), ('n02123159', 'tiger_cat'))
    """
    with open(IMAGENET_CLASSES_FILE, encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip() and not line.startswith("#")]
    if len(rows) != NUM_IMAGENET_CLASSES or any(len(row) != 2 for row in rows):
        raise RuntimeError(
            f"{IMAGENET_CLASSES_FILE!r} is damaged: expected {NUM_IMAGENET_CLASSES} lines 'id<TAB>lemmas'. "
            "Reinstall keras_vit."
        )
    return tuple((wnid, lemmas.split(",")[0].strip().replace(" ", "_")) for wnid, lemmas in rows)


def decode_predictions(preds, top=5):
    """Names the `top` best ImageNet-1k classes of each prediction, as keras.applications does.

    Args:
        preds: NumPy array or tensor of shape (batch, 1000): scores of an ImageNet-1k
            classifier, best probabilities (a softmax head, the builders' default).
        top: int. How many classes per image. Defaults to 5.

    Returns:
        A list (one per image) of lists of (WordNet id, class name, score) tuples, best first.

    Example:

    >>> import numpy as np
    >>> scores = np.full((2, 1000), 1e-4); scores[0, 1] = 0.7; scores[1, 0] = 0.6
    >>> [[name for _, name, _ in best] for best in decode_predictions(scores, top=1)]
    [['goldfish'], ['tench']]
    """
    check_positive_int("top", top)
    if top > NUM_IMAGENET_CLASSES:
        raise ValueError(f"Invalid top={top!r}. Expected an integer in [1, {NUM_IMAGENET_CLASSES}].")
    scores = np.asarray(keras.ops.convert_to_numpy(preds) if not isinstance(preds, (np.ndarray, list, tuple)) else preds)
    if scores.ndim != 2 or scores.shape[1] != NUM_IMAGENET_CLASSES:
        raise ValueError(
            f"decode_predictions expects ImageNet-1k predictions of shape (batch, {NUM_IMAGENET_CLASSES}), "
            f"got shape {scores.shape}. For other classes, name them from your own list "
            "(e.g. keras_vit.export.read_labels)."
        )
    classes = imagenet_classes()
    # A stable sort on the negated scores keeps ties in class order.
    best = np.argsort(-scores, axis=-1, kind="stable")[:, :top]
    return [[classes[i] + (float(row[i]),) for i in order] for row, order in zip(scores, best)]
