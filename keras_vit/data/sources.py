"""Where images come from: tensorflow-datasets names, folders of class sub-folders, NumPy arrays.

Every source gives a `Source`: an unbatched tf.data.Dataset of (uint8 image (H, W, C), int32
label) plus the class names, so `pipeline.make_pipeline` treats them all alike.

Example:

>>> import numpy as np
>>> source = from_arrays(np.zeros((4, 8, 8), "uint8"), np.array([0, 1, 0, 1]), class_names=["a", "b"])
>>> source.num_examples, source.class_names, tuple(next(iter(source.dataset))[0].shape)
(4, ('a', 'b'), (8, 8, 1))
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import tensorflow as tf

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")
ON_CORRUPT = ("skip", "error")


@dataclasses.dataclass
class Source:
    """A labelled image data set before preprocessing.

    Args:
        dataset: tf.data.Dataset. Unbatched (uint8 image (H, W, C), int32 label) pairs.
        class_names: tuple of str. Name of each label index.
        num_examples: int or None. Number of examples when known.
        skipped: int. Files left out because they could not be decoded. Defaults to 0.

    Example:

    >>> ds = tf.data.Dataset.from_tensor_slices((tf.zeros((2, 4, 4, 3), tf.uint8), tf.constant([0, 1])))
    >>> source = Source(ds, ("cat", "dog"), num_examples=2)
    >>> source.num_classes, source.skipped
    (2, 0)
    """

    dataset: tf.data.Dataset
    class_names: tuple
    num_examples: int | None = None
    skipped: int = 0

    @property
    def num_classes(self) -> int:
        """Number of classes."""
        return len(self.class_names)


def from_arrays(images, labels, class_names=None) -> Source:
    """Wraps NumPy images (N, H, W) or (N, H, W, C) and integer labels (N,) as a `Source`.

    Args:
        images: array. uint8 pixels in [0, 255]; a 3-D array is read as grayscale.
        labels: array. Integer class indices.
        class_names: sequence of str or None. Defaults to "0", "1", ... up to the largest label.

    Example:

    >>> source = from_arrays(np.zeros((3, 4, 4), "uint8"), [0, 2, 1])
    >>> source.class_names, source.num_examples, tuple(source.dataset.element_spec[0].shape)
    (('0', '1', '2'), 3, (4, 4, 1))
    """
    images = np.asarray(images)
    labels = np.asarray(labels).reshape(-1)
    if images.ndim == 3:
        images = images[..., None]
    if images.ndim != 4:
        raise ValueError(f"Invalid images with shape={images.shape}. Expected (N, H, W) or (N, H, W, C).")
    if len(images) != len(labels):
        raise ValueError(f"images and labels differ in length: {len(images)} images, {len(labels)} labels.")
    if len(labels) == 0:
        raise ValueError("images is empty: expected at least one example.")
    if class_names is None:
        class_names = [str(i) for i in range(int(labels.max()) + 1)]
    dataset = tf.data.Dataset.from_tensor_slices((images.astype("uint8"), labels.astype("int32")))
    return Source(dataset, tuple(class_names), len(labels))


def from_tfds(name: str, split: str = "train", data_dir=None, download: bool = False) -> Source:
    """Loads split `split` of the tensorflow-datasets data set `name` as a `Source`.

    Args:
        name: str. A tfds name such as "cifar10", "fashion_mnist", "oxford_flowers102".
        split: str. A tfds split string, e.g. "train", "test", "train[:90%]". Defaults to "train".
        data_dir: str or None. Where tfds keeps prepared data. Defaults to tfds' own default.
        download: bool. Let tfds download and prepare data it does not find. Defaults to False,
            so nothing is fetched unless asked for.

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
    if download:
        try:
            builder.download_and_prepare()
        except OSError as error:  # requests' ConnectionError and socket errors are OSErrors
            raise ConnectionError(
                f"Could not download dataset={name!r}: {type(error).__name__}: {str(error)[:300]}. "
                "Expected a network connection; or prepare the data where there is one and pass its data_dir."
            ) from error
    try:
        dataset = builder.as_dataset(split=split, as_supervised=True, shuffle_files=False)
    except AssertionError as error:  # tfds asserts when the data was never prepared
        raise FileNotFoundError(
            f"dataset={name!r} is not prepared in data_dir={data_dir!r}; pass download=True "
            "(--download) or point data_dir at prepared data."
        ) from error
    except ValueError as error:
        raise ValueError(f"Invalid split={split!r} for dataset={name!r}: {error}") from error
    label_feature = builder.info.features["label"]
    class_names = tuple(label_feature.names)
    try:
        num_examples = builder.info.splits[split].num_examples
    except (KeyError, ValueError):
        num_examples = None
    dataset = dataset.map(lambda image, label: (tf.cast(image, tf.uint8), tf.cast(label, tf.int32)))
    return Source(dataset, class_names, num_examples)


def from_folder(directory, on_corrupt: str = "skip", channels: int = 3) -> Source:
    """Reads a folder with one sub-folder of images per class as a `Source`.

    Every file is decoded once up front (and again, lazily, while training), so corrupt files
    are found before training starts: they are skipped and counted (`Source.skipped`) or
    raise, as `on_corrupt` says. Images may differ in size; the pipeline resizes them.

    Args:
        directory: str. Folder whose sub-folders (sorted by name) are the classes.
        on_corrupt: str. "skip" or "error". Defaults to "skip".
        channels: int. 1 or 3 channels to decode to. Defaults to 3.

    Example:

    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> for name in ("cat", "dog"):
    ...     os.makedirs(os.path.join(root, name))
    ...     png = tf.io.encode_png(tf.zeros((5, 6, 3), tf.uint8))
    ...     tf.io.write_file(os.path.join(root, name, "1.png"), png)
    >>> with open(os.path.join(root, "dog", "2.jpg"), "wb") as f:
    ...     _ = f.write(b"not an image")
    >>> source = from_folder(root, channels=1)
    >>> source.class_names, source.num_examples, source.skipped
    (('cat', 'dog'), 2, 1)
    >>> [(tuple(image.shape), int(label)) for image, label in source.dataset]
    [((5, 6, 1), 0), ((5, 6, 1), 1)]
    """
    if on_corrupt not in ON_CORRUPT:
        raise ValueError(f"Invalid on_corrupt={on_corrupt!r}. Expected one of {ON_CORRUPT}.")
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"Image folder not found: directory={directory!r}.")
    try:
        class_names = sorted(e.name for e in os.scandir(directory) if e.is_dir())
    except PermissionError as error:
        raise ValueError(f"Image folder is not readable: directory={directory!r}.") from error
    if not class_names:
        raise ValueError(f"Image folder directory={directory!r} has no class sub-folders.")
    paths, labels = [], []
    for index, class_name in enumerate(class_names):
        class_dir = os.path.join(directory, class_name)
        try:
            names = sorted(os.listdir(class_dir))
        except PermissionError as error:
            raise ValueError(f"Class folder is not readable: {class_dir!r}.") from error
        for file_name in names:
            if file_name.lower().endswith(IMAGE_EXTENSIONS):
                paths.append(os.path.join(class_dir, file_name))
                labels.append(index)
    if not paths:
        raise ValueError(
            f"Image folder directory={directory!r} holds no images ({', '.join(IMAGE_EXTENSIONS)})."
        )
    kept_paths, kept_labels, skipped = [], [], 0
    for path, label in zip(paths, labels):
        try:
            with open(path, "rb") as f:
                tf.io.decode_image(f.read(), channels=channels, expand_animations=False)
        except (tf.errors.InvalidArgumentError, OSError) as error:
            if on_corrupt == "error":
                raise ValueError(f"Corrupt or unreadable image file {path!r}.") from error
            skipped += 1
            continue
        kept_paths.append(path)
        kept_labels.append(label)
    if not kept_paths:
        raise ValueError(f"No readable image in directory={directory!r}: {skipped} files were corrupt.")

    def decode(path, label):
        image = tf.io.decode_image(tf.io.read_file(path), channels=channels, expand_animations=False)
        image.set_shape((None, None, channels))
        return image, label

    dataset = tf.data.Dataset.from_tensor_slices((kept_paths, np.asarray(kept_labels, "int32")))
    dataset = dataset.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
    return Source(dataset, tuple(class_names), len(kept_paths), skipped=skipped)


SAMPLE_NAMES = ("sample", "fashion_mnist_sample")


def load_source(dataset: str = "sample", split: str = "train", data_dir=None, on_corrupt="skip", download=False):
    """Resolves a data set spec of the command line to a `Source`.

    Args:
        dataset: str. "sample" (the Fashion-MNIST sample shipped in the package), a folder
            (class sub-folders, or `split` sub-folders of class sub-folders, or the four
            Fashion-MNIST IDX files), or a tensorflow-datasets name. Defaults to "sample".
        split: str. "train", "test", or a tfds split string. Defaults to "train".
        data_dir: str or None. tfds data_dir. Defaults to None.
        on_corrupt: str. "skip" or "error" for corrupt image files. Defaults to "skip".
        download: bool. Allow tfds to download. Defaults to False.

    Example:

    >>> load_source("sample", "test").num_examples
    2000
    """
    from keras_vit.data import fashion_mnist

    if dataset in SAMPLE_NAMES or (os.path.isdir(dataset) and _has_idx_files(dataset)):
        if dataset in SAMPLE_NAMES:
            train, test = fashion_mnist.load_sample()
        else:
            train, test = fashion_mnist.read_idx_dataset(dataset)
        parts = {"train": train, "test": test}
        if split not in parts:
            raise ValueError(f"Invalid split={split!r} for dataset={dataset!r}. Expected 'train' or 'test'.")
        return from_arrays(*parts[split], class_names=fashion_mnist.CLASS_NAMES)
    if os.path.isdir(dataset):
        split_dir = os.path.join(dataset, split)
        return from_folder(split_dir if os.path.isdir(split_dir) else dataset, on_corrupt=on_corrupt)
    if os.sep in dataset or dataset.startswith("."):
        raise FileNotFoundError(f"Image folder not found: dataset={dataset!r}.")
    return from_tfds(dataset, split=split, data_dir=data_dir, download=download)


def _has_idx_files(directory):
    return os.path.isfile(os.path.join(directory, "train-images-idx3-ubyte.gz"))
