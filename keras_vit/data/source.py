"""`Source`: a labelled image data set before preprocessing, and the simplest one, NumPy arrays.

Every way of reading images (`keras_vit.data.sources`: tensorflow-datasets names, image folders,
arrays, the shipped sample) gives a `Source`: an unbatched tf.data.Dataset of (uint8 image
(H, W, C), int32 label) plus the class names, so `pipeline.make_pipeline` treats them all alike.
Sources that can be listed (arrays, image folders) also give one cheap key per example, so
training shuffles the whole set every epoch before anything is decoded (`Source.shuffled`).

Example:

>>> source = from_arrays(np.zeros((4, 8, 8), "uint8"), np.array([0, 1, 0, 1]), class_names=["a", "b"])
>>> source.num_examples, source.class_names, tuple(next(iter(source.dataset))[0].shape)
(4, ('a', 'b'), (8, 8, 1))
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import tensorflow as tf

from keras_vit._validation import check_fraction


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
