"""Where images come from: tensorflow-datasets names, folders of class sub-folders, NumPy arrays.

Every source gives a `Source`: an unbatched tf.data.Dataset of (uint8 image (H, W, C), int32
label) plus the class names, so `pipeline.make_pipeline` treats them all alike. Sources that
can be listed (arrays, image folders) also give one cheap key per example, so training shuffles
the whole set every epoch before anything is decoded (`Source.shuffled`).

Example:

>>> import numpy as np
>>> source = from_arrays(np.zeros((4, 8, 8), "uint8"), np.array([0, 1, 0, 1]), class_names=["a", "b"])
>>> source.num_examples, source.class_names, tuple(next(iter(source.dataset))[0].shape)
(4, ('a', 'b'), (8, 8, 1))
"""

from __future__ import annotations

import codecs
import dataclasses
import errno
import gc
import os
import re
import socket
from typing import Callable

import numpy as np
import tensorflow as tf

from keras_vit._validation import check_choice, check_fraction
from keras_vit.data import image_io

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")
ON_CORRUPT = ("skip", "error")
# A flat class folder has no test images: this fraction of it is held out, never trained on.
FLAT_FOLDER_VALIDATION_SPLIT = 0.1
VALIDATION = "validation"


@dataclasses.dataclass
class Source:
    """A labelled image data set before preprocessing.

    Args:
        dataset: tf.data.Dataset. Unbatched (uint8 image (H, W, C), int32 label) pairs, in a
            fixed order.
        class_names: tuple of str. Name of each label index.
        num_examples: int or None. Number of examples when known.
        skipped: int. Files left out while listing because they are no readable image.
            Defaults to 0.
        image_size: (int, int) or None. (height, width) shared by every image; None when they
            differ or it is unknown. Defaults to None.
        keys: tf.data.Dataset or None. One cheap key per example (an index), in the order of
            `dataset`; None for sources that cannot be listed. Defaults to None.
        decode: callable or None. Maps a dataset of keys to the dataset of examples. Defaults
            to None.
        reorder: callable or None. `reorder(seed)` gives the examples with their files read in a
            fresh order every iteration (tfds' shuffle_files), for sources without keys.
            Defaults to None.
        files: tuple of str. The image files, one per key, for folder sources. Defaults to ().
        corrupt: tuple of str. Files found unreadable while listing. Defaults to ().
        description: str. Where the examples come from, for logs. Defaults to "".

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
    image_size: tuple | None = None
    keys: tf.data.Dataset | None = None
    decode: Callable | None = None
    reorder: Callable | None = None
    files: tuple = ()
    corrupt: tuple = ()
    description: str = ""
    # Per file: 1 once its decoding started, 2 once it succeeded (folder sources that skip).
    _progress: tf.Variable | None = dataclasses.field(default=None, repr=False)

    @property
    def num_classes(self) -> int:
        """Number of classes."""
        return len(self.class_names)

    def shuffled(self, seed=None, buffer_size: int = 10_000) -> tf.data.Dataset:
        """The examples in a fresh uniformly random order every iteration (every epoch).

        Listable sources shuffle their keys over the whole set before decoding, so a
        class-sorted folder gives batches of every class from the first step. Other sources
        (tfds) read their files in a fresh order and shuffle within a buffer.

        Args:
            seed: int or None. Seed of the order. Defaults to None.
            buffer_size: int. Shuffle buffer for sources without keys. Defaults to 10000.

        Example:

        >>> source = from_arrays(np.zeros((6, 2, 2), "uint8"), [0, 0, 0, 1, 1, 1])
        >>> sorted(int(label) for _, label in source.shuffled(seed=1))
        [0, 0, 0, 1, 1, 1]
        """
        if self.keys is not None and self.num_examples:
            keys = self.keys.shuffle(self.num_examples, seed=seed, reshuffle_each_iteration=True)
            return self.decode(keys)
        dataset = self.reorder(seed) if self.reorder is not None else self.dataset
        return dataset.shuffle(buffer_size, seed=seed, reshuffle_each_iteration=True)

    def count(self) -> int:
        """The number of examples: `num_examples`, or counted by one pass over the data (and then kept there).

        Example:

        >>> source = from_arrays(np.zeros((3, 2, 2), "uint8"), [0, 1, 0])
        >>> dataclasses.replace(source, num_examples=None).count()
        3
        """
        if self.num_examples is None:
            self.num_examples = int(self.dataset.reduce(0, lambda n, _: n + 1))
        return self.num_examples

    def take(self, count: int | None) -> Source:
        """The first `count` examples (all of them for None or a count past the end).

        Example:

        >>> source = from_arrays(np.zeros((6, 2, 2), "uint8"), [0, 1, 2, 0, 1, 2])
        >>> small = source.take(4)
        >>> small.num_examples, len(list(small.shuffled(seed=0))), small.description
        (4, 4, 'the first 4 of 6 in-memory images')
        """
        if count is None or (self.num_examples is not None and count >= self.num_examples):
            return self
        return dataclasses.replace(
            self,
            dataset=self.dataset.take(count),
            num_examples=count,
            keys=None if self.keys is None else self.keys.take(count),
            reorder=None,  # a fresh file order would take other examples every epoch
            files=self.files[:count],
            description=f"the first {count:,} of {self.description}" if self.description else "",
        )

    def corrupt_files(self) -> tuple:
        """Files left out as corrupt: those found while listing, and those whose decoding
        failed in the pipeline (complete after one full pass over the data).

        Example:

        >>> source = from_arrays(np.zeros((2, 2, 2), "uint8"), [0, 1])
        >>> source.corrupt_files()
        ()
        """
        return tuple(self.corrupt) + self._failed_in_pipeline()

    def num_used(self) -> int | None:
        """Examples actually used: `num_examples` less the files whose decoding failed in the
        pipeline (after one full pass; before it, the files listed).

        Example:

        >>> from_arrays(np.zeros((3, 2, 2), "uint8"), [0, 1, 0]).num_used()
        3
        """
        if self.num_examples is None:
            return None
        return self.num_examples - len(self._failed_in_pipeline())

    def _failed_in_pipeline(self) -> tuple:
        if self._progress is None or not self.files:
            return ()
        progress = self._progress.numpy()[: len(self.files)]
        return tuple(self.files[i] for i in np.flatnonzero(progress == 1))


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
    pixels = tf.constant(images.astype("uint8"))
    targets = tf.constant(labels.astype("int32"))

    def decode(keys):  # the key is the row: shuffling indices leaves the arrays in place
        return keys.map(lambda i: (tf.gather(pixels, i), tf.gather(targets, i)), num_parallel_calls=tf.data.AUTOTUNE)

    keys = tf.data.Dataset.range(len(labels))
    return Source(
        decode(keys), tuple(class_names), len(labels), image_size=tuple(images.shape[1:3]), keys=keys,
        decode=decode, description=f"{len(labels):,} in-memory images",
    )


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


@dataclasses.dataclass
class _Listing:
    """The image files of a class folder, found without decoding them."""

    directory: str
    class_names: tuple
    paths: list
    labels: np.ndarray
    sizes: list  # (height, width) per path, from the file header
    corrupt: list


def _visible_entries(directory):
    """Sorted entries of `directory`, without hidden ones (.ipynb_checkpoints, .DS_Store, ...)."""
    try:
        return sorted((e for e in os.scandir(directory) if not e.name.startswith(".")), key=lambda e: e.name)
    except PermissionError as error:
        raise ValueError(f"Image folder is not readable: directory={directory!r}.") from error


def _is(entry, kind):
    """Whether `entry` is (or links to) a folder (`kind` "dir") or a file ("file"); ValueError naming a link loop."""
    try:
        return entry.is_dir() if kind == "dir" else entry.is_file()
    except OSError as error:
        raise _unreadable(entry.path, error) from None


def _unreadable(path, error):
    if error.errno == errno.ELOOP:
        return ValueError(
            f"Symbolic link loop in an image folder: {path!r} leads back to itself. Remove the link or point it "
            "at a folder or an image."
        )
    return ValueError(f"Cannot read {path!r} in an image folder: {error.strerror}.")


def _check_not_a_loop(path):
    """A link loop is no missing folder: ValueError naming it (os.path.isdir just says False)."""
    if os.path.islink(path):
        try:
            os.stat(path)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise _unreadable(path, error) from None


def _list_folder(directory, on_corrupt) -> _Listing:
    check_choice("on_corrupt", on_corrupt, ON_CORRUPT)
    _check_not_a_loop(directory)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"Image folder not found: directory={directory!r}.")
    class_names = tuple(e.name for e in _visible_entries(directory) if _is(e, "dir"))
    if not class_names:
        raise ValueError(f"Image folder directory={directory!r} has no class sub-folders.")
    paths, labels, sizes, corrupt = [], [], [], []
    corrupt_per_class = np.zeros(len(class_names), int)
    for index, class_name in enumerate(class_names):
        for entry in _visible_entries(os.path.join(directory, class_name)):
            if not entry.name.lower().endswith(IMAGE_EXTENSIONS) or not _is(entry, "file"):
                continue
            size = image_io.image_size(entry.path)
            if size is None:
                if on_corrupt == "error":
                    raise ValueError(f"Corrupt or unreadable image file {entry.path!r} (on_corrupt='error').")
                corrupt.append(entry.path)
                corrupt_per_class[index] += 1
                continue
            paths.append(entry.path)
            labels.append(index)
            sizes.append(size)
    if not paths and not corrupt:
        raise ValueError(
            f"Image folder directory={directory!r} holds no images ({', '.join(IMAGE_EXTENSIONS)})."
        )
    if not paths:
        raise ValueError(f"No readable image in directory={directory!r}: {_files(len(corrupt))} corrupt.")
    if len(class_names) == 1:
        raise ValueError(
            f"Image folder directory={directory!r} has one class sub-folder, {class_names[0]!r}: a classifier "
            "needs at least 2 classes (one sub-folder of images per class)."
        )
    counts = np.bincount(labels, minlength=len(class_names))
    empty = [
        repr(name) + (f" ({_files(corrupt_per_class[i])} corrupt)" if corrupt_per_class[i] else "")
        for i, name in enumerate(class_names) if counts[i] == 0
    ]
    if empty:
        raise ValueError(
            f"Class sub-folder{'s' if len(empty) > 1 else ''} {', '.join(empty)} of directory={directory!r} "
            f"{'hold' if len(empty) > 1 else 'holds'} no readable image: every class needs examples. Add images "
            "or remove the folder."
        )
    return _Listing(directory, class_names, paths, np.asarray(labels, "int32"), sizes, corrupt)


def _files(count):
    return f"{count} file{'' if count == 1 else 's'} {'was' if count == 1 else 'were'}"


# What a folder pipeline raises, inside tf.data, for a file it cannot decode under on_corrupt="error".
_CORRUPT = ("Corrupt image file '", "' (on_corrupt='error'): it does not decode")
# As tf.debugging.Assert prints it: C-escaped (quotes as \\', other bytes as octal).
_CORRUPT_FOUND = re.compile(r"Corrupt image file \\'(.*)\\' \(on_corrupt=\\'error\\'\): it does not decode")


def naming_corrupt_files(function, *args, **kwargs):
    """`function(*args, **kwargs)`, where a pipeline's undecodable file (on_corrupt="error") raises one ValueError naming it.

    tf.data reports the file as an InvalidArgumentError holding the whole iterator stack, with
    its name deep inside. Before the ValueError is raised, the failed pipeline is closed: its
    iterator, held by that error's frames, is collected here, so its threads stop now and not
    while the interpreter shuts down (where they made the process hang).

    Example:

    >>> def fails():
    ...     raise tf.errors.InvalidArgumentError(None, None, "[" + "/d/cat/cut.jpg".join(_CORRUPT).replace("'", "\\\\'") + "]")
    >>> naming_corrupt_files(fails)
    Traceback (most recent call last):
    ...
    ValueError: Corrupt image file '/d/cat/cut.jpg' (on_corrupt='error'): it does not decode. Remove or replace it, or pass on_corrupt='skip' (--on-corrupt skip) to leave such files out.
    """
    try:
        return function(*args, **kwargs)
    except tf.errors.InvalidArgumentError as error:
        found = _CORRUPT_FOUND.search(error.message or "")
        if found is None:
            raise
        path = codecs.escape_decode(found.group(1).encode())[0].decode("utf-8", "replace")
    # Outside the except block: nothing refers to the error any more, only cycles through its frames.
    gc.collect()
    raise ValueError(
        f"Corrupt image file {path!r} (on_corrupt='error'): it does not decode. Remove or replace it, or "
        "pass on_corrupt='skip' (--on-corrupt skip) to leave such files out."
    )


def classes_in_turn(indices, labels):
    """`indices` reordered to take every class in turn: the first file of each class, then the second, ...

    A folder lists its files class by class; in this order the first N of them
    (`Source.take`, `--max-train-examples`, `--max-test-examples`) hold every class.

    Example:

    >>> classes_in_turn(np.arange(6), np.array([0, 0, 0, 1, 1, 2])).tolist()
    [0, 3, 5, 1, 4, 2]
    """
    indices = np.asarray(indices)
    classes = np.asarray(labels)[indices]
    rank = np.zeros(len(indices), np.int64)
    for label in np.unique(classes):
        where = classes == label
        rank[where] = np.arange(int(where.sum()))
    return indices[np.lexsort((classes, rank))]


def _files_source(listing, indices, channels, on_corrupt, description) -> Source:
    """A streaming `Source` of the files `indices` of `listing` (classes in turn): decoded inside tf.data."""
    indices = classes_in_turn(indices, listing.labels)
    paths = [listing.paths[i] for i in indices]
    sizes = {listing.sizes[i] for i in indices}
    image_size = next(iter(sizes)) if len(sizes) == 1 else None
    files = tf.constant(paths)
    targets = tf.constant(listing.labels[indices])
    progress = tf.Variable(tf.zeros([len(paths)], tf.int32), trainable=False) if on_corrupt == "skip" else None
    # on_corrupt="error": the key decoded at each position of the stream, to name a file that failed.
    # All in the graph: a Python function in tf.data made the process hang or abort at exit after
    # the error (its threads waited for the interpreter that was shutting down).
    order = tf.Variable(tf.fill([len(paths)], tf.constant(-1, tf.int64)), trainable=False) if on_corrupt == "error" else None
    shape = (image_size or (None, None)) + (channels,)

    def load(index):
        started = [progress.scatter_max(tf.IndexedSlices(tf.ones([1], tf.int32), index[None]))] if progress is not None else []
        with tf.control_dependencies(started):
            data = tf.io.read_file(files[index])
        image = tf.ensure_shape(image_io.decode_image(data, channels), shape)  # a lying header is corrupt too
        if progress is not None:
            with tf.control_dependencies([image]):
                done = progress.scatter_max(tf.IndexedSlices(tf.fill([1], 2), index[None]))
            with tf.control_dependencies([done]):
                image = tf.identity(image)
        return image, targets[index]

    def load_at(position, index):
        noted = order.scatter_update(tf.IndexedSlices(index[None], position[None]))
        with tf.control_dependencies([noted]):
            image, label = load(tf.identity(index))
        return image, label, position

    def named_failure(expected, element):
        """Passes `element` on when it is the one expected next; else the file at the expected position failed."""
        image, label, position = element
        last = len(paths) - 1  # the end marker's position is one past the last
        path = files[tf.clip_by_value(order[tf.minimum(expected, last)], 0, last)]
        message = tf.strings.join([_CORRUPT[0], path, _CORRUPT[1]])
        check = tf.debugging.Assert(tf.equal(position, expected), [message])
        with tf.control_dependencies([check]):
            return position + 1, (tf.identity(image), label, position)

    def decode(keys):
        if on_corrupt == "skip":
            # A file whose body is broken fails here: skipped, and found by Source.corrupt_files().
            return keys.map(load, num_parallel_calls=tf.data.AUTOTUNE).ignore_errors()
        # A failed file drops out in order; the next element (or the end marker) finds the gap and names it.
        count = int(keys.cardinality())
        dataset = keys.enumerate().map(load_at, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).ignore_errors()
        end = tf.data.Dataset.from_tensors(
            (tf.zeros([d or 1 for d in shape], tf.uint8), tf.constant(0, targets.dtype), tf.constant(count, tf.int64)))
        dataset = dataset.concatenate(end).scan(tf.constant(0, tf.int64), named_failure)
        return dataset.filter(lambda image, label, position: position < count).map(lambda image, label, _: (image, label))

    keys = tf.data.Dataset.range(len(paths))
    return Source(
        decode(keys), listing.class_names, len(paths), skipped=len(listing.corrupt), image_size=image_size,
        keys=keys, decode=decode, files=tuple(paths), corrupt=tuple(listing.corrupt), description=description,
        _progress=progress,
    )


def _describe(listing, count):
    sizes = set(listing.sizes)
    shape = "x".join(map(str, next(iter(sizes)))) if len(sizes) == 1 else f"{len(sizes)} different sizes"
    # Files, not images: one whose body is broken is found only while decoding, in training.
    return f"{count:,} files listed of {len(listing.class_names)} classes in {listing.directory} ({shape})"


def from_folder(directory, on_corrupt: str = "skip", channels: int = 3) -> Source:
    """Reads a folder with one sub-folder of images per class as a streaming `Source`.

    Files are listed (hidden entries such as `.ipynb_checkpoints/` left out) and their headers
    read for their size; decoding happens inside tf.data, while training. A file whose header
    is no image is skipped and counted (`Source.skipped`), or raises with its name, as
    `on_corrupt` says; a file that fails to decode later is skipped in the pipeline and listed
    by `Source.corrupt_files()` (or stops the pipeline with an error naming it, with
    on_corrupt="error"). Images may differ in size; the pipeline resizes them. A folder of one
    class, a class sub-folder without a readable image and a symbolic link loop are refused
    with a ValueError naming them.

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
    >>> source.class_names, source.num_examples, source.skipped, source.image_size
    (('cat', 'dog'), 2, 1, (5, 6))
    >>> [(tuple(image.shape), int(label)) for image, label in source.dataset]
    [((5, 6, 1), 0), ((5, 6, 1), 1)]
    """
    check_choice("channels", channels, (1, 3))
    listing = _list_folder(directory, on_corrupt)
    indices = np.arange(len(listing.paths))
    return _files_source(listing, indices, channels, on_corrupt, _describe(listing, len(indices)))


def hold_out(count: int, fraction: float, seed: int = 0):
    """Splits indices 0..count-1 into (train, validation) at random, deterministically by seed.

    Args:
        count: int. Number of examples.
        fraction: float. Share held out for validation, in (0, 1).
        seed: int. Seed of the split. Defaults to 0.

    Example:

    >>> train, validation = hold_out(10, 0.2, seed=0)
    >>> len(train), len(validation), sorted(np.concatenate([train, validation]).tolist()) == list(range(10))
    (8, 2, True)
    """
    check_fraction("validation_split", fraction)
    held = max(1, round(count * fraction))
    if held >= count:
        raise ValueError(f"validation_split={fraction} of {count} examples leaves none to train on.")
    order = np.random.default_rng(seed).permutation(count)
    return np.sort(order[held:]), np.sort(order[:held])


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
    _check_not_a_loop(dataset)
    if dataset in SAMPLE_NAMES or (os.path.isdir(dataset) and _has_idx_files(dataset)):
        return _arrays_split(dataset, split, validation_split, seed)
    if os.path.isdir(dataset):
        return _folder_split(dataset, split, on_corrupt, validation_split, seed)
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
        split_dirs = _split_dirs(dataset)
        if not (split_dirs and test_split not in split_dirs and validation_split):
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


def _folder_split(dataset, split, on_corrupt, validation_split, seed):
    split_dirs = _split_dirs(dataset)
    if not split_dirs:  # a flat class folder: its "validation" is held out of it
        validation_split = FLAT_FOLDER_VALIDATION_SPLIT if validation_split is None else validation_split
        splits = ("train", VALIDATION)
        root = dataset
    else:
        splits = split_dirs + ((VALIDATION,) if validation_split and VALIDATION not in split_dirs else ())
        root = os.path.join(dataset, "train")
    if split in ("train", VALIDATION) and validation_split and (split == "train" or VALIDATION not in split_dirs):
        listing = _list_folder(root, on_corrupt)
        kept, held = hold_out(len(listing.paths), validation_split, seed)
        indices = kept if split == "train" else held
        share = f"{1 - validation_split:.0%}" if split == "train" else f"held-out {validation_split:.0%}"
        description = f"{_describe(listing, len(indices))}: {share} (seed {seed})"
        return _files_source(listing, indices, 3, on_corrupt, description)
    if split not in splits:
        if split == "test" and not split_dirs:
            raise ValueError(
                f"Invalid split='test' for dataset={dataset!r}: a folder of class sub-folders has no test "
                f"images; its held-out {validation_split:.0%} is split 'validation' (its splits: train, validation)."
            )
        hint = " Pass a validation_split (--validation-split) to hold out part of train/ instead." if split == "test" else ""
        raise ValueError(
            f"Invalid split={split!r} for dataset={dataset!r}: no such sub-folder. "
            f"Expected one of {', '.join(map(repr, splits))}.{hint}"
        )
    return from_folder(os.path.join(dataset, split) if split_dirs else dataset, on_corrupt=on_corrupt)


def _split_dirs(dataset):
    """The split sub-folders of a folder laid out as train/, test/, ... (empty for a flat one)."""
    if not os.path.isdir(dataset):
        return ()
    names = tuple(e.name for e in _visible_entries(dataset) if _is(e, "dir"))
    return names if "train" in names else ()


def _is_flat_folder(dataset):
    return (
        dataset not in SAMPLE_NAMES and os.path.isdir(dataset) and not _has_idx_files(dataset)
        and not _split_dirs(dataset)
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


def _has_idx_files(directory):
    return os.path.isfile(os.path.join(directory, "train-images-idx3-ubyte.gz"))
