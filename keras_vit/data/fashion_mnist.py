"""Fashion-MNIST: the small real sample shipped in the package, and a reader of the full IDX files.

The sample (8,000 training and 2,000 test images, class-balanced, drawn with a fixed seed from
the official files) lets `keras-vit train`, the examples and the tests run offline. Fashion-MNIST
is (c) 2017 Zalando SE, MIT licence: see `sample/LICENSE-fashion-mnist.txt`.

Example:

>>> (x_train, y_train), (x_test, y_test) = load_sample()
>>> x_train.shape, x_train.dtype.name, x_test.shape, CLASS_NAMES[int(y_test[0])] in CLASS_NAMES
((8000, 28, 28), 'uint8', (2000, 28, 28), True)
"""

from __future__ import annotations

import gzip
import hashlib
import os

import numpy as np

from keras_vit._atomic import atomic_file

CLASS_NAMES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)

SAMPLE_PATH = os.path.join(os.path.dirname(__file__), "sample", "fashion_mnist_sample.npz")

_FILES = {
    "x_train": "train-images-idx3-ubyte.gz",
    "y_train": "train-labels-idx1-ubyte.gz",
    "x_test": "t10k-images-idx3-ubyte.gz",
    "y_test": "t10k-labels-idx1-ubyte.gz",
}


def load_sample():
    """Returns the shipped sample as ((x_train, y_train), (x_test, y_test)), uint8 images (N, 28, 28).

    Labels are uint8 class indices into `CLASS_NAMES`; each class has 800 training and 200 test
    images.

    Example:

    >>> (x_train, y_train), (x_test, y_test) = load_sample()
    >>> y_test.shape, np.bincount(y_train).tolist() == [800] * 10
    ((2000,), True)
    """
    with np.load(SAMPLE_PATH, allow_pickle=False) as data:
        return (data["x_train"], data["y_train"]), (data["x_test"], data["y_test"])


def read_idx_dataset(directory):
    """Reads the four official Fashion-MNIST IDX gz files in `directory`.

    Checksums are verified against a SHA256SUMS file in the folder when there is one.

    Args:
        directory: str. Folder holding train-images-idx3-ubyte.gz and the other three files.

    Returns:
        ((x_train, y_train), (x_test, y_test)) as uint8 arrays.

    Example:

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> def write_idx(name, array):  # IDX: magic 2048 + ndim, each dimension, then the bytes
    ...     dims = b"".join(d.to_bytes(4, "big") for d in array.shape)
    ...     header = (2048 + array.ndim).to_bytes(4, "big") + dims
    ...     with gzip.open(os.path.join(folder, name), "wb") as f:
    ...         _ = f.write(header + array.astype("uint8").tobytes())
    >>> for prefix, n in (("train", 3), ("t10k", 2)):
    ...     write_idx(f"{prefix}-images-idx3-ubyte.gz", np.zeros((n, 28, 28)))
    ...     write_idx(f"{prefix}-labels-idx1-ubyte.gz", np.arange(n))
    >>> (x_train, y_train), (x_test, y_test) = read_idx_dataset(folder)
    >>> x_train.shape, y_test.tolist()
    ((3, 28, 28), [0, 1])
    """
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"Fashion-MNIST folder not found: directory={directory!r}.")
    sums = _read_checksums(os.path.join(directory, "SHA256SUMS"))
    arrays = {}
    for key, name in _FILES.items():
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Missing Fashion-MNIST file {name!r} in directory={directory!r}.")
        with open(path, "rb") as f:
            raw = f.read()
        if name in sums and hashlib.sha256(raw).hexdigest() != sums[name]:
            raise ValueError(f"Checksum mismatch for {path!r}: the file is corrupt or not the official one.")
        arrays[key] = _parse_idx(gzip.decompress(raw), path)
    return (arrays["x_train"], arrays["y_train"]), (arrays["x_test"], arrays["y_test"])


def make_sample(directory, output_path=SAMPLE_PATH, train_per_class=800, test_per_class=200, seed=2026):
    """Draws the class-balanced sample from the full data set and writes it as a compressed .npz.

    This is how the shipped sample was made: `make_sample("../shared/data/fashion-mnist")`.
    """
    (x_train, y_train), (x_test, y_test) = read_idx_dataset(directory)
    rng = np.random.default_rng(seed)

    def pick(labels, per_class):
        chosen = [rng.choice(np.flatnonzero(labels == c), per_class, replace=False) for c in range(10)]
        return np.sort(np.concatenate(chosen))

    train_index, test_index = pick(y_train, train_per_class), pick(y_test, test_per_class)
    with atomic_file(output_path) as tmp_path:  # keeps the ".npz" suffix, so NumPy adds none
        np.savez_compressed(
            tmp_path,
            x_train=x_train[train_index],
            y_train=y_train[train_index],
            x_test=x_test[test_index],
            y_test=y_test[test_index],
            train_index=train_index.astype(np.uint16),
            test_index=test_index.astype(np.uint16),
        )
    return output_path


def _parse_idx(data, path):
    magic = int.from_bytes(data[:4], "big")
    if magic not in (2049, 2051):
        raise ValueError(f"{path!r} is not an IDX file (magic number {magic}).")
    ndim = magic - 2048
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    offset = 4 + 4 * ndim
    array = np.frombuffer(data, np.uint8, offset=offset)
    if array.size != int(np.prod(dims)):
        raise ValueError(f"{path!r} is truncated: expected {int(np.prod(dims))} values, found {array.size}.")
    return array.reshape(dims)


def _read_checksums(path):
    if not os.path.isfile(path):
        return {}
    sums = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                sums[parts[1].lstrip("*")] = parts[0]
    return sums
