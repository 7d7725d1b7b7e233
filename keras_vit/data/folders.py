"""Image folders: one sub-folder of images per class, listed without decoding, streamed through tf.data.

`from_folder` lists a class folder (hidden entries left out, headers read for their sizes, corrupt
files skipped or refused as `on_corrupt` says) and decodes inside tf.data while training
(`files_source`, which `keras_vit.data.unlabeled` shares). `folder_split` reads a folder's
splits: train/, test/ ... sub-folders, or a flat class folder whose "validation" is held out.

Example:

>>> import tempfile
>>> root = tempfile.mkdtemp()
>>> for name in ("cat", "dog"):
...     os.makedirs(os.path.join(root, name))
...     tf.io.write_file(os.path.join(root, name, "1.png"), tf.io.encode_png(tf.zeros((5, 6, 3), tf.uint8)))
>>> listing = list_folder(root, "skip")
>>> listing.class_names, len(listing.paths), describe_sizes(listing.sizes)
(('cat', 'dog'), 2, '5x6')
"""

from __future__ import annotations

import codecs
import dataclasses
import errno
import gc
import os
import re

import numpy as np
import tensorflow as tf

from keras_vit._validation import check_choice
from keras_vit.data import image_io
from keras_vit.data.source import Source, hold_out

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")
ON_CORRUPT = ("skip", "error")
# A flat class folder has no test images: this fraction of it is held out, never trained on.
FLAT_FOLDER_VALIDATION_SPLIT = 0.1
VALIDATION = "validation"


@dataclasses.dataclass
class Listing:
    """The image files of a class folder, found without decoding them."""

    directory: str
    class_names: tuple
    paths: list
    labels: np.ndarray
    sizes: list  # (height, width) per path, from the file header
    corrupt: list


def visible_entries(directory):
    """Sorted entries of `directory`, without hidden ones (.ipynb_checkpoints, .DS_Store, ...)."""
    try:
        return sorted((e for e in os.scandir(directory) if not e.name.startswith(".")), key=lambda e: e.name)
    except PermissionError as error:
        raise ValueError(f"Image folder is not readable: directory={directory!r}.") from error


def is_kind(entry, kind):
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


def check_not_a_loop(path):
    """A link loop is no missing folder: ValueError naming it (os.path.isdir just says False)."""
    if os.path.islink(path):
        try:
            os.stat(path)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise _unreadable(path, error) from None


def list_folder(directory, on_corrupt) -> Listing:
    check_choice("on_corrupt", on_corrupt, ON_CORRUPT)
    check_not_a_loop(directory)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"Image folder not found: directory={directory!r}.")
    class_names = tuple(e.name for e in visible_entries(directory) if is_kind(e, "dir"))
    if not class_names:
        raise ValueError(f"Image folder directory={directory!r} has no class sub-folders.")
    paths, labels, sizes, corrupt = [], [], [], []
    corrupt_per_class = np.zeros(len(class_names), int)
    for index, class_name in enumerate(class_names):
        for entry in visible_entries(os.path.join(directory, class_name)):
            if not entry.name.lower().endswith(IMAGE_EXTENSIONS) or not is_kind(entry, "file"):
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
    return Listing(directory, class_names, paths, np.asarray(labels, "int32"), sizes, corrupt)


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


def files_source(listing, indices, channels, on_corrupt, description) -> Source:
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


def describe_listing(listing, count):
    # Files, not images: one whose body is broken is found only while decoding, in training.
    return (f"{count:,} files listed of {len(listing.class_names)} classes in {listing.directory} "
            f"({describe_sizes(listing.sizes)})")


def describe_sizes(sizes) -> str:
    """The images' (height, width) in a few words: "32x32", or "3 different sizes".

    >>> describe_sizes([(32, 32), (32, 32)]), describe_sizes([(5, 6), (6, 5)])
    ('32x32', '2 different sizes')
    """
    sizes = set(sizes)
    return "x".join(map(str, next(iter(sizes)))) if len(sizes) == 1 else f"{len(sizes)} different sizes"


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
    listing = list_folder(directory, on_corrupt)
    indices = np.arange(len(listing.paths))
    return files_source(listing, indices, channels, on_corrupt, describe_listing(listing, len(indices)))


def folder_split(dataset, split, on_corrupt, validation_split, seed):
    """`split` of an image folder: a split sub-folder, or the share of train/ (or of a flat class folder) held out or kept."""
    dirs = split_dirs(dataset)
    if not dirs:  # a flat class folder: its "validation" is held out of it
        validation_split = FLAT_FOLDER_VALIDATION_SPLIT if validation_split is None else validation_split
        splits = ("train", VALIDATION)
        root = dataset
    else:
        splits = dirs + ((VALIDATION,) if validation_split and VALIDATION not in dirs else ())
        root = os.path.join(dataset, "train")
    if split in ("train", VALIDATION) and validation_split and (split == "train" or VALIDATION not in dirs):
        listing = list_folder(root, on_corrupt)
        kept, held = hold_out(len(listing.paths), validation_split, seed)
        indices = kept if split == "train" else held
        share = f"{1 - validation_split:.0%}" if split == "train" else f"held-out {validation_split:.0%}"
        description = f"{describe_listing(listing, len(indices))}: {share} (seed {seed})"
        return files_source(listing, indices, 3, on_corrupt, description)
    if split not in splits:
        if split == "test" and not dirs:
            raise ValueError(
                f"Invalid split='test' for dataset={dataset!r}: a folder of class sub-folders has no test "
                f"images; its held-out {validation_split:.0%} is split 'validation' (its splits: train, validation)."
            )
        hint = " Pass a validation_split (--validation-split) to hold out part of train/ instead." if split == "test" else ""
        raise ValueError(
            f"Invalid split={split!r} for dataset={dataset!r}: no such sub-folder. "
            f"Expected one of {', '.join(map(repr, splits))}.{hint}"
        )
    return from_folder(os.path.join(dataset, split) if dirs else dataset, on_corrupt=on_corrupt)


def split_dirs(dataset):
    """The split sub-folders of a folder laid out as train/, test/, ... (empty for a flat one)."""
    if not os.path.isdir(dataset):
        return ()
    names = tuple(e.name for e in visible_entries(dataset) if is_kind(e, "dir"))
    return names if "train" in names else ()
