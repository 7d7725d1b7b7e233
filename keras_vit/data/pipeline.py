"""The tf.data input pipeline: shuffle -> decode -> channels -> resize/crop -> augment -> batch -> scale.

Scaling is explicit and matches the weights (`keras_vit.configs.SCALINGS`): "symmetric" ([-1, 1])
for the original Google checkpoints, "imagenet" (mean/std) for DeiT-style ones, "unit" ([0, 1])
for models trained from scratch. Labels come out one-hot (float32) so MixUp/CutMix and label
smoothing work the same way for every source.

Example:

>>> import numpy as np
>>> from keras_vit.data.sources import from_arrays
>>> source = from_arrays(np.zeros((10, 28, 28), "uint8"), np.arange(10) % 2)
>>> ds = make_pipeline(source, image_size=32, channels=3, batch_size=4, training=True, augment="light", seed=0)
>>> images, labels = next(iter(ds))
>>> tuple(images.shape), images.dtype.name, tuple(labels.shape)
((4, 32, 32, 3), 'float32', (4, 2))
"""

from __future__ import annotations

import tensorflow as tf

from keras_vit import choices, configs
from keras_vit._validation import check_choice, check_positive_int
from keras_vit.applications import scale_pixels
from keras_vit.data.augment import Augmenter
from keras_vit.data.processor_graph import process_image_tensor


def make_pipeline(
    source,
    *,
    image_size,
    channels: int = 3,
    scaling: str = "unit",
    batch_size: int = 32,
    training: bool = False,
    augment="none",
    num_classes=None,
    shuffle_buffer: int = 10_000,
    seed=None,
    deterministic=None,
    drop_remainder=None,
    crop_fraction=None,
    cache: bool = False,
    repeat: bool = False,
    resize: str = "bilinear",
    processor=None,
    views: int | None = None,
    local_views: int = 0,
    local_size=None,
    local_augment=None,
):
    """Builds a batched, prefetched tf.data pipeline of (images, one-hot labels) from a `Source`.

    Args:
        source: `keras_vit.data.sources.Source`. The images and labels.
        image_size: int or (int, int). Model input height and width.
        channels: int. 1 or 3; grayscale is repeated to RGB (and RGB averaged to gray) as the
            model needs. Defaults to 3.
        scaling: str or None. A key of `keras_vit.configs.SCALINGS`: "unit", "symmetric" or
            "imagenet"; None keeps raw [0, 255] pixels (for models with `preprocessing=`
            inside). Defaults to "unit".
        batch_size: int. Global batch size. Defaults to 32.
        training: bool. Shuffle (the whole set every epoch for sources with keys, see
            `Source.shuffled`) and augment. Defaults to False.
        augment: str, layer, list of layers or None. Preset name (none, light, medium,
            strong) or Keras augmentation layers (keras-cv's too); used when `training`.
            Defaults to "none".
        num_classes: int or None. Width of the one-hot labels. Defaults to the source's.
        shuffle_buffer: int. Shuffle buffer of sources that cannot be listed (tfds).
            Defaults to 10000.
        seed: int or None. Seed of shuffling and augmentation. Defaults to None.
        deterministic: bool or None. Keep element order fixed under parallel maps (slower).
            Defaults to `not training`.
        drop_remainder: bool or None. Drop the last partial batch so every batch has the same
            shape (XLA, TPU). Defaults to `training`.
        crop_fraction: float or None. For evaluation, resize to image_size / crop_fraction then
            center-crop (e.g. 0.875); None resizes straight to image_size. Defaults to None.
        cache: bool. Keep the decoded uint8 images in memory after the first pass (a whole
            folder's worth: for small data sets only). Defaults to False.
        repeat: bool. Repeat forever, whole passes one after another (then give fit the
            batches of one pass as steps_per_epoch). Defaults to False.
        resize: str. How images of another size reach `image_size` (unless an augmentation crop
            resizes them): "bilinear" (resized) or "pad" (centred zero padding, larger images
            centre-cropped; 28 px Fashion-MNIST on a 32 px input as LeNet had it). Defaults to "bilinear".
        processor: dict or None. A checkpoint's own image processor (`keras_vit.image_processor`:
            CLIP's shortest-edge resize and centre crop, SigLIP's PIL resize) that takes each
            image to `image_size` instead of `resize` and `crop_fraction`, exactly as the
            checkpoint's processor does; evaluation only (training augments its own crops).
            Defaults to None.
        views: int or None. Each example becomes this many views, each augmented on its own
            (images (batch, views, H, W, C): self-distillation's input); needs `training`. Defaults to None.
        local_views: int. With `views`, this many more views of each image at `local_size`
            augmented by `local_augment`: the images become {"global": (batch, views, H, W, C),
            "local": (batch, local_views, h, w, C)} (DINO's multi-crop). Defaults to 0.
        local_size: int or (int, int) or None. Side of the local views; needed with them. Defaults to None.
        local_augment: str, `AugmentConfig` or None. The local views' augmentation, which must
            crop (resize); needed with them. Defaults to None.

    Example:

    >>> import numpy as np
    >>> from keras_vit.data.sources import from_arrays
    >>> source = from_arrays(np.full((3, 8, 8, 3), 255, "uint8"), [0, 1, 2])
    >>> batches = list(make_pipeline(source, image_size=4, scaling="symmetric", batch_size=2))
    >>> [tuple(images.shape) for images, _ in batches], float(batches[0][0].numpy().min())
    ([(2, 4, 4, 3), (1, 4, 4, 3)], 1.0)
    >>> batches[0][1].numpy().tolist()
    [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    """
    if isinstance(image_size, int):
        image_size = (image_size, image_size)
    image_size = tuple(int(s) for s in image_size)
    check_choice("channels", channels, (1, 3))
    check_choice("scaling", scaling, tuple(configs.SCALINGS) + (None,))
    check_positive_int("batch_size", batch_size)
    check_choice("resize", resize, choices.RESIZES)
    if processor is not None and training:
        raise ValueError("Invalid processor= with training=True: a checkpoint's image processor resizes evaluation "
                         "images; training images take the augmentation's crops. Pass processor=None to train.")
    num_classes = num_classes or source.num_classes
    drop_remainder = training if drop_remainder is None else drop_remainder
    augmenter = Augmenter(augment if training else "none", image_size, seed=seed)
    if views is not None:
        check_positive_int("views", views)
        if not training:
            raise ValueError(f"Invalid views={views!r} with training=False: views are augmented, for training only.")
        # One augmenter a view, each with its own seeds: ops of one graph given one seed draw alike.
        view_augmenters = [Augmenter(augment, image_size, seed=None if seed is None else seed + 100 * v)
                           for v in range(views)]
    if local_views:
        check_positive_int("local_views", local_views)
        if views is None or local_size is None or local_augment is None:
            raise ValueError(f"Invalid local_views={local_views!r} without views=, local_size= and local_augment=: "
                             "local views come beside the global ones, at their own size and crops.")
        local_size = (local_size, local_size) if isinstance(local_size, int) else tuple(int(s) for s in local_size)
        local_augmenters = [Augmenter(local_augment, local_size, seed=None if seed is None else seed + 100 * v + 50)
                            for v in range(local_views)]
        if not all(a.resizes for a in local_augmenters):
            raise ValueError(f"Invalid local_augment={local_augment!r}: local views are crops; expected an "
                             "augmentation with a crop scale.")
    mean, std = configs.SCALINGS.get(scaling, ((0.0,), (1.0,)))

    def to_float(image, label):
        image = tf.cast(image, tf.float32)
        have = image.shape[-1]
        if have == 1 and channels == 3:
            image = tf.image.grayscale_to_rgb(image)
        elif have == 3 and channels == 1:
            image = tf.image.rgb_to_grayscale(image)
        elif have not in (1, 3):
            image = image[..., :channels]
        return image, label

    def augment_view(image, augmenter):
        if not augmenter.resizes:
            image = _resize(image, augmenter.image_size, None, resize)
        image = augmenter.per_example(image)
        image.set_shape(augmenter.image_size + (channels,))
        return image

    def per_example(image, label):
        if views is not None:
            stacked = tf.stack([augment_view(image, a) for a in view_augmenters])
            if local_views:
                stacked = {"global": stacked, "local": tf.stack([augment_view(image, a) for a in local_augmenters])}
            return stacked, tf.one_hot(label, num_classes, dtype=tf.float32)
        if processor is not None:
            image = process_image_tensor(image, processor, *image_size)
        elif augmenter.resizes:
            image = augmenter.per_example(image)
        else:
            image = _resize(image, image_size, None if training else crop_fraction, resize)
            image = augmenter.per_example(image)
        image.set_shape(image_size + (channels,))
        return image, tf.one_hot(label, num_classes, dtype=tf.float32)

    def per_batch(images, labels):
        if training and views is None:
            images, labels = augmenter.per_batch(images, labels)
        return tf.nest.map_structure(lambda x: scale_pixels(x, mean, std), images), labels

    options = tf.data.Options()
    options.deterministic = (not training) if deterministic is None else deterministic
    # In-memory sources have no files to shard: multi-worker training splits by element.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    # tf.data's autotuning thread made deleting an iterator wait up to ~10 s after the model had
    # kept the cores busy, and `fit` deletes one per validation pass, and one per epoch for an
    # input that does not repeat (benchmarks/iterator_teardown.py). Without it, AUTOTUNE map
    # parallelism is tf.data's default, the core count (at most 16).
    options.autotune.enabled = False
    if cache:
        # The cache holds the first pass in its order, so later epochs are reshuffled from it
        # with a buffer as large as the whole set: still a uniform order.
        dataset = source.dataset.cache()
        if training:
            buffer = source.num_examples or shuffle_buffer
            dataset = dataset.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
    elif training:
        dataset = source.shuffled(seed=seed, buffer_size=shuffle_buffer)
    else:
        dataset = source.dataset
    dataset = dataset.with_options(options)
    steps = None
    if training and drop_remainder and not repeat and source.num_examples and (
        dataset.cardinality() == tf.data.UNKNOWN_CARDINALITY
    ):
        # Files skipped as corrupt leave the epoch's length unknown (Keras then warns that the
        # input ran out of data): epochs of a fixed number of batches, from fresh shuffles.
        steps = source.num_examples // batch_size
        dataset = dataset.repeat()
    dataset = dataset.map(to_float, num_parallel_calls=tf.data.AUTOTUNE)
    dataset = dataset.map(per_example, num_parallel_calls=tf.data.AUTOTUNE)
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder, num_parallel_calls=tf.data.AUTOTUNE)
    dataset = dataset.map(per_batch, num_parallel_calls=tf.data.AUTOTUNE)
    if steps is not None:
        dataset = dataset.take(steps)
    if repeat:
        # After the batches, not before the maps: repeated before them, the parallel maps of
        # training (not deterministic) let an example of the next pass into this one's last batches.
        dataset = dataset.repeat()
    return dataset.prefetch(tf.data.AUTOTUNE)


def _resize(image, size, crop_fraction, how="bilinear"):
    if how == "pad":
        return tf.image.resize_with_crop_or_pad(image, *size)
    if crop_fraction:
        outer = (round(size[0] / crop_fraction), round(size[1] / crop_fraction))
        image = tf.image.resize(image, outer)
        top, left = (outer[0] - size[0]) // 2, (outer[1] - size[1]) // 2
        return image[top: top + size[0], left: left + size[1]]
    static = image.shape[:2]
    if tuple(static) == size:
        return image
    return tf.image.resize(image, size)
