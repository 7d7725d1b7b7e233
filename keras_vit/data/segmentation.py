"""Segmentation data: a set made from small item images placed on a canvas, and a check of masks against images.

Example:

>>> from keras_vit.data.fashion_mnist import load_sample
>>> (x, y), _ = load_sample()
>>> images, masks = canvas_segmentation_set(x, y, count=4, canvas_size=32, item_size=14, max_items=3)
>>> images.shape, masks.shape, int(masks.max()) <= 10
((4, 32, 32), (4, 32, 32), True)
>>> check_masks(images, masks, num_classes=11)
"""

from __future__ import annotations

import numpy as np

from keras_vit._validation import check_positive_int, check_seed


def canvas_segmentation_set(items, labels, count, canvas_size=64, item_size=None, max_items=4, seed=0):
    """Images of 1 to `max_items` items at random places on a black canvas, and their per-pixel masks.

    Each canvas draws its items (with replacement) from `items`, resizes them to `item_size`
    (nearest neighbour) and pastes them at random positions, each fully inside the canvas; a
    later item covers an earlier one where its own pixels are non-zero. The mask is 0 (the
    background) where no item's pixel is non-zero and the item's label + 1 where one is, so a
    set made from Fashion-MNIST's 10 classes has 11.

    Args:
        items: array (N, h, w) uint8. Greyscale item images on a zero background (Fashion-MNIST's).
        labels: array (N,) int. Each item's class, from 0.
        count: int. Canvases to make.
        canvas_size: int. Canvas height and width in pixels. Defaults to 64.
        item_size: int or None. Side items are resized to; None keeps their size. At most
            `canvas_size`. Defaults to None.
        max_items: int. Most items per canvas; each canvas has 1 to `max_items`, uniformly.
            Defaults to 4.
        seed: int. Seeds the choice of items, their count and their places. Defaults to 0.

    Returns:
        (images, masks): uint8 arrays (count, canvas_size, canvas_size). Repeat the images on a
        last axis of 3 for models that take RGB (`np.repeat(images[..., None], 3, -1)`).

    Example:

    >>> items = np.full((2, 2, 2), 255, "uint8")
    >>> images, masks = canvas_segmentation_set(items, np.array([0, 4]), count=1, canvas_size=4, max_items=1)
    >>> int((images > 0).sum()), sorted(np.unique(masks).tolist()) in ([0, 1], [0, 5])
    (4, True)
    """
    items, labels = np.asarray(items), np.asarray(labels)
    if items.ndim != 3 or items.shape[0] == 0:
        raise ValueError(f"Invalid items of shape {items.shape}: expected greyscale images (N, h, w), N >= 1.")
    if labels.shape != items.shape[:1] or not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0:
        raise ValueError(f"Invalid labels of shape {labels.shape} and dtype {labels.dtype}: expected one class "
                         f"index >= 0 per item, shape ({items.shape[0]},).")
    check_positive_int("count", count)
    check_positive_int("canvas_size", canvas_size)
    check_positive_int("max_items", max_items)
    check_seed("seed", seed)
    if item_size is not None:
        check_positive_int("item_size", item_size)
    sides = items.shape[1:] if item_size is None else (item_size, item_size)
    if max(sides) > canvas_size:
        raise ValueError(f"Invalid item_size={item_size!r}: items of {sides[0]}x{sides[1]} px do not fit on a "
                         f"canvas_size={canvas_size} canvas; expected item_size <= canvas_size.")
    if item_size is not None:
        rows = np.arange(item_size) * items.shape[1] // item_size
        cols = np.arange(item_size) * items.shape[2] // item_size
        items = items[:, rows][:, :, cols]
    rng = np.random.default_rng(seed)
    images = np.zeros((count, canvas_size, canvas_size), np.uint8)
    masks = np.zeros((count, canvas_size, canvas_size), np.uint8)
    for image, mask in zip(images, masks):
        for index in rng.integers(0, len(items), rng.integers(1, max_items + 1)):
            top = rng.integers(0, canvas_size - sides[0] + 1)
            left = rng.integers(0, canvas_size - sides[1] + 1)
            where = (slice(top, top + sides[0]), slice(left, left + sides[1]))
            on = items[index] > 0
            image[where][on] = items[index][on]
            mask[where][on] = labels[index] + 1
    return images, masks


def check_masks(images, masks, num_classes, ignore_index=None):
    """Refuses segmentation masks that do not fit the images or the classes, naming what was expected.

    Args:
        images: array (N, H, W) or (N, H, W, C). The images the masks label.
        masks: array (N, H, W) of integers. One class index per pixel.
        num_classes: int. Classes the model predicts; mask values are 0 to num_classes - 1.
        ignore_index: int or None. A value also allowed in masks, for unlabelled pixels.
            Defaults to None.

    Example:

    >>> check_masks(np.zeros((2, 8, 8, 3)), np.ones((2, 8, 8), "uint8"), num_classes=2)
    >>> check_masks(np.zeros((2, 8, 8, 3)), np.full((2, 8, 8), 2), num_classes=2)
    Traceback (most recent call last):
    ...
    ValueError: Invalid masks: values [2] outside the classes 0 to 1 of num_classes=2.
    """
    images, masks = np.asarray(images), np.asarray(masks)
    check_positive_int("num_classes", num_classes)
    if images.ndim not in (3, 4):
        raise ValueError(f"Invalid images of shape {images.shape}: expected (N, H, W) or (N, H, W, C).")
    if masks.shape != images.shape[:3]:
        raise ValueError(f"Invalid masks of shape {masks.shape}: expected one class index per pixel of the images, "
                         f"shape {images.shape[:3]} (N, H, W) for images of shape {images.shape}.")
    if not np.issubdtype(masks.dtype, np.integer):
        raise ValueError(f"Invalid masks of dtype {masks.dtype}: expected integer class indices.")
    values = np.unique(masks)
    outside = (values < 0) | (values >= num_classes)
    if ignore_index is not None:
        outside &= values != ignore_index
    bad = values[outside]
    if bad.size:
        allowed = f"the classes 0 to {num_classes - 1} of num_classes={num_classes}"
        if ignore_index is not None:
            allowed += f" or ignore_index={ignore_index}"
        shown = bad[:10].tolist()
        raise ValueError(f"Invalid masks: values {shown}{' ...' if bad.size > 10 else ''} outside {allowed}.")
