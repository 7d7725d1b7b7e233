"""Where images come from: tensorflow-datasets names, folders of class sub-folders, NumPy arrays, the shipped sample.

`load_source` resolves what the command line names (`--dataset`, a split) to a `Source`
(`keras_vit.data.source`), from an image folder (`keras_vit.data.folders`), tensorflow-datasets
(`from_tfds`), the Fashion-MNIST IDX files or the sample shipped in the package; `load_splits`
gives a training run's train, validation and test sources.

Example:

>>> import numpy as np
>>> source = from_arrays(np.zeros((4, 8, 8), "uint8"), np.array([0, 1, 0, 1]), class_names=["a", "b"])
>>> source.num_examples, source.class_names, tuple(next(iter(source.dataset))[0].shape)
(4, ('a', 'b'), (8, 8, 1))
"""

from __future__ import annotations

import os
import socket

import tensorflow as tf

from keras_vit._validation import check_fraction
# What the other modules of the package and their users read from here.
from keras_vit.data.folders import (  # noqa: F401
    FLAT_FOLDER_VALIDATION_SPLIT, IMAGE_EXTENSIONS, VALIDATION, check_not_a_loop, folder_split, from_folder,
    naming_corrupt_files, split_dirs,
)
from keras_vit.data.source import Source, from_arrays, hold_out  # noqa: F401


def from_tfds(name: str, split: str = "train", data_dir=None, download: bool = False) -> Source:
    """Loads split `split` of the tensorflow-datasets data set `name` as a `Source`.

    Args:
        name: str. A tfds name such as "cifar10", "fashion_mnist", "oxford_flowers102".
        split: str. A tfds split string, e.g. "train", "test", "train[:90%]". Defaults to "train".
        data_dir: str or None. Where tfds keeps prepared data. Defaults to tfds' own default.
        download: bool. Let tfds download and prepare data it does not find. Defaults to False,
            so nothing is fetched unless asked for. Without a network it fails within seconds
            with a ConnectionError.

    Example:

    >>> import tempfile, tensorflow_datasets as tfds
    >>> with tfds.testing.mock_data(num_examples=4):  # random stand-in data, nothing downloaded
    ...     source = from_tfds("mnist", split="train")
    >>> source.num_classes, tuple(next(iter(source.dataset))[0].shape)
    (10, (28, 28, 1))
    >>> from_tfds("mnist", data_dir=tempfile.mkdtemp())  # not prepared there, and download=False
    Traceback (most recent call last):
    ...
    FileNotFoundError: dataset='mnist' is not prepared in data_dir=...; pass download=True
    (--download) or point data_dir at prepared data.
    """
    import tensorflow_datasets as tfds

    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except tfds.core.registered.DatasetNotFoundError as error:
        raise ValueError(f"Unknown dataset={name!r}: not a tensorflow-datasets name nor a folder.") from error
    if download and not builder.is_prepared():
        try:
            _probe_network()
            builder.download_and_prepare()
        except OSError as error:  # requests' ConnectionError and socket errors are OSErrors
            raise ConnectionError(
                f"Could not download dataset={name!r}: {type(error).__name__}: {str(error)[:300]}. "
                "Expected a network connection; or prepare the data where there is one and pass its data_dir."
            ) from error

    def read(shuffle_files, seed=None):
        read_config = tfds.ReadConfig(shuffle_seed=seed) if shuffle_files else None
        dataset = builder.as_dataset(split=split, as_supervised=True, shuffle_files=shuffle_files, read_config=read_config)
        return dataset.map(lambda image, label: (tf.cast(image, tf.uint8), tf.cast(label, tf.int32)))

    try:
        dataset = read(shuffle_files=False)
    except AssertionError as error:  # tfds asserts when the data was never prepared
        raise FileNotFoundError(
            f"dataset={name!r} is not prepared in data_dir={data_dir!r}; pass download=True "
            "(--download) or point data_dir at prepared data."
        ) from error
    except ValueError as error:
        raise ValueError(
            f"Invalid split={split!r} for dataset={name!r}: {error}. Its splits: {', '.join(builder.info.splits)}."
        ) from error
    class_names = tuple(builder.info.features["label"].names)
    try:
        num_examples = builder.info.splits[split].num_examples
    except (KeyError, ValueError):
        num_examples = None
    shape = dataset.element_spec[0].shape
    size = tuple(shape[:2]) if None not in shape[:2] else None
    return Source(
        dataset, class_names, num_examples, image_size=size,
        reorder=lambda seed: read(shuffle_files=True, seed=seed), description=f"tfds {name}:{split}",
    )



def _probe_network(host="storage.googleapis.com", port=443, timeout=3.0):
    """Raises OSError within `timeout` seconds when tfds' download host cannot be reached
    (tfds itself retries for minutes), through the HTTPS proxy when one is set."""
    from urllib.parse import urlsplit

    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    if proxy:
        parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        host, port = parts.hostname, parts.port or 80
    socket.create_connection((host, port), timeout=timeout).close()


SAMPLE_NAMES = ("sample", "fashion_mnist_sample")


def load_source(dataset: str = "sample", split: str = "train", data_dir=None, on_corrupt="skip", download=False,
                validation_split=None, seed: int = 0) -> Source:
    """Resolves a data set spec of the command line to a `Source`.

    Splits: the sample and the Fashion-MNIST IDX files have "train" and "test"; a folder with
    split sub-folders (train/, test/, ...) has those; a flat class folder has "train" and
    "validation", the latter a held-out `validation_split` (default 0.1) of its images, so
    nothing is ever evaluated on the images trained on. With `validation_split`, "train" of
    any source loses that held-out share to "validation".

    Args:
        dataset: str. "sample" (the Fashion-MNIST sample shipped in the package), a folder
            (class sub-folders, or `split` sub-folders of class sub-folders, or the four
            Fashion-MNIST IDX files), or a tensorflow-datasets name. Defaults to "sample".
        split: str. "train", "test", "validation", another split folder or a tfds split
            string. Defaults to "train".
        data_dir: str or None. tfds data_dir. Defaults to None.
        on_corrupt: str. "skip" or "error" for corrupt image files. Defaults to "skip".
        download: bool. Allow tfds to download. Defaults to False.
        validation_split: float or None. Share of "train" held out as "validation", chosen at
            random by `seed`. Defaults to None (0.1 for a flat class folder).
        seed: int. Seed of the held-out choice. Defaults to 0.

    Example:

    >>> load_source("sample", "test").num_examples
    2000
    >>> load_source("sample", "validation", validation_split=0.25).num_examples
    2000
    >>> load_source("sample", "validaton")
    Traceback (most recent call last):
    ...
    ValueError: Invalid split='validaton' for dataset='sample'. Expected one of 'test', 'train'
    (or 'validation' with a validation_split).
    """
    if not isinstance(split, str) or not split:
        raise ValueError(f"Invalid split={split!r}. Expected a split name such as 'train' or 'test'.")
    if validation_split is not None:  # the fraction now; what it leaves of the examples once they are counted
        check_fraction("validation_split", validation_split)
    check_not_a_loop(dataset)
    if dataset in SAMPLE_NAMES or (os.path.isdir(dataset) and has_idx_files(dataset)):
        return _arrays_split(dataset, split, validation_split, seed)
    if os.path.isdir(dataset):
        return folder_split(dataset, split, on_corrupt, validation_split, seed)
    if os.sep in dataset or dataset.startswith("."):
        raise FileNotFoundError(f"Image folder not found: dataset={dataset!r}.")
    if validation_split is not None and split in ("train", VALIDATION):
        split = _tfds_hold_out(dataset, split, validation_split, data_dir)
    return from_tfds(dataset, split=split, data_dir=data_dir, download=download)


def load_splits(dataset="sample", train_split="train", test_split="test", validation_split=None, seed=0,
                data_dir=None, on_corrupt="skip", download=False):
    """The (train, validation, test) `Source`s of a training run; validation and test may be None.

    Validation is the held-out share when there is one (given, or the default of a flat class
    folder, which has no test split), else the test split. A folder with split sub-folders but
    no `test_split` one refuses unless a `validation_split` is given.

    Args:
        dataset, data_dir, on_corrupt, download: as for `load_source`.
        train_split: str. Defaults to "train".
        test_split: str or None. None for no test. Defaults to "test".
        validation_split: float or None. Held-out share of the training split. Defaults to None.
        seed: int. Seed of the held-out choice. Defaults to 0.

    Example:

    >>> train, validation, test = load_splits("sample", validation_split=0.25)
    >>> train.num_examples, validation.num_examples, test.num_examples
    (6000, 2000, 2000)
    >>> load_splits("sample")[1] is not None
    True
    """
    flat = _is_flat_folder(dataset)
    if flat and validation_split is None:
        validation_split = FLAT_FOLDER_VALIDATION_SPLIT
    args = dict(data_dir=data_dir, on_corrupt=on_corrupt, download=download, validation_split=validation_split, seed=seed)
    train = load_source(dataset, train_split, **args)
    validation = load_source(dataset, VALIDATION, **args) if validation_split else None
    test = None
    if test_split and not flat:
        dirs = split_dirs(dataset)
        if not (dirs and test_split not in dirs and validation_split):
            test = load_source(dataset, test_split, **args)
    return train, validation if validation is not None else test, test


def _arrays_split(dataset, split, validation_split, seed):
    from keras_vit.data import fashion_mnist

    train, test = fashion_mnist.load_sample() if dataset in SAMPLE_NAMES else fashion_mnist.read_idx_dataset(dataset)
    parts = {"train": train, "test": test}
    if validation_split is not None:
        kept, held = hold_out(len(train[1]), validation_split, seed)
        parts.update(train=(train[0][kept], train[1][kept]), validation=(train[0][held], train[1][held]))
    _check_split(dataset, split, parts, validation_split)
    return from_arrays(*parts[split], class_names=fashion_mnist.CLASS_NAMES)


def _is_flat_folder(dataset):
    return (
        dataset not in SAMPLE_NAMES and os.path.isdir(dataset) and not has_idx_files(dataset)
        and not split_dirs(dataset)
    )


def _check_split(dataset, split, parts, validation_split):
    if split not in parts:
        extra = "" if validation_split is not None else " (or 'validation' with a validation_split)"
        raise ValueError(
            f"Invalid split={split!r} for dataset={dataset!r}. Expected one of {', '.join(map(repr, sorted(parts)))}{extra}."
        )


def _tfds_hold_out(name, split, fraction, data_dir):
    """The tfds split strings of the kept and held-out shares of "train" (its last examples)."""
    import tensorflow_datasets as tfds

    try:
        count = tfds.builder(name, data_dir=data_dir).info.splits["train"].num_examples
    except Exception:  # noqa: BLE001  unknown names and unprepared data fail with their own message later
        return split
    kept, _ = hold_out(count, fraction)
    cut = len(kept)
    return f"train[:{cut}]" if split == "train" else f"train[{cut}:]"


def has_idx_files(directory):
    return os.path.isfile(os.path.join(directory, "train-images-idx3-ubyte.gz"))
