"""Matplotlib figures of the inspection arrays, saved as PNG files.

matplotlib is optional (`pip install "keras_vit[plot]"`). Figures are drawn on the Agg canvas
through `matplotlib.figure.Figure`, so no GUI backend is needed and pyplot's global state (and
a notebook's backend) is left alone. Each function writes the PNG atomically and returns its path.

Example:

>>> import os, tempfile
>>> import numpy as np
>>> path = plot_mean_attention_distance(np.ones((2, 3)), os.path.join(tempfile.mkdtemp(), "distance.png"))
>>> os.path.getsize(path) > 0
True
"""

from __future__ import annotations

import math
import os

import numpy as np

from keras_vit._atomic import atomic_file


def _figure(width, height):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(
            "keras_vit.inspect.plots needs matplotlib, an optional dependency: "
            'pip install "keras_vit[plot]" (or pip install matplotlib).'
        ) from error
    figure = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(figure)
    return figure


def _save(figure, path):
    """Writes `figure` to `path` through a temporary file, so a failure leaves no partial PNG."""
    path = os.fspath(path)
    if not path.lower().endswith(".png"):
        raise ValueError(f"Invalid path={path!r}: expected a file name ending in .png.")
    with atomic_file(path) as temporary:
        figure.savefig(temporary, format="png")
    return path


def _display_image(image):
    """Scales an image (H, W, C) or (H, W) to [0, 1] for imshow, squeezing one channel."""
    image = np.asarray(image, dtype="float32")
    if image.ndim == 3 and image.shape[-1] == 1:
        image = image[..., 0]
    low, high = float(image.min()), float(image.max())
    return (image - low) / (high - low) if high > low else np.zeros_like(image)


def _tile_grid(count, max_cols):
    cols = min(count, max_cols)
    return math.ceil(count / cols), cols


def plot_attention_rollout(images, maps, path, titles=None, alpha=0.5, max_cols=6, label="attention rollout"):
    """Draws each image above its attention-rollout overlay (paper Fig. 6) and saves a PNG.

    Args:
        images: array (B, H, W, C). The images, any value range.
        maps: array (B, H, W). Rollout maps in [0, 1] at image size, from `rollout_maps`.
        path: str. PNG file to write.
        titles: list of str or None. One caption per image. Defaults to None.
        alpha: float. Opacity of the heat map over the image. Defaults to 0.5.
        max_cols: int. Images per row. Defaults to 6.
        label: str. What the overlays show, beside the first one (e.g. "probe attention" for
            `probe_maps`). Defaults to "attention rollout".

    Returns:
        `path`.

    Example:

    >>> import tempfile
    >>> from matplotlib.image import imread
    >>> path = os.path.join(tempfile.mkdtemp(), "rollout.png")
    >>> images, maps = np.zeros((2, 8, 8, 1)), np.ones((2, 8, 8))
    >>> path == plot_attention_rollout(images, maps, path, titles=["a", "b"])
    True
    >>> imread(path).shape  # two columns of an image above its overlay, 100 pixels per inch
    (400, 400, 4)
    """
    images, maps = np.asarray(images), np.asarray(maps)
    if images.shape[0] != maps.shape[0] or images.shape[1:3] != maps.shape[1:3]:
        raise ValueError(
            f"images of shape {images.shape} and maps of shape {maps.shape} must share batch and size."
        )
    count = images.shape[0]
    blocks, cols = _tile_grid(count, max_cols)
    figure = _figure(1.9 * cols + 0.2, 3.9 * blocks + 0.1)
    for index in range(count):
        block, col = divmod(index, cols)
        image = _display_image(images[index])
        cmap = "gray" if image.ndim == 2 else None
        top = figure.add_subplot(2 * blocks, cols, 2 * block * cols + col + 1)
        top.imshow(image, cmap=cmap)
        top.set_title(titles[index] if titles else f"image {index}", fontsize=9)
        bottom = figure.add_subplot(2 * blocks, cols, (2 * block + 1) * cols + col + 1)
        bottom.imshow(image, cmap=cmap)
        bottom.imshow(maps[index], cmap="inferno", alpha=alpha, vmin=0, vmax=1)
        if col == 0:
            top.set_ylabel("input", fontsize=9)
            bottom.set_ylabel(label, fontsize=9)
        for axis in (top, bottom):
            axis.set_xticks([])
            axis.set_yticks([])
    figure.tight_layout()
    return _save(figure, path)


def plot_mean_attention_distance(distances, path, image_size=None, uniform=None):
    """Plots the mean attention distance of every head against depth (paper Fig. 7 right).

    Args:
        distances: array (layers, heads). From `attention_distances`, in pixels.
        path: str. PNG file to write.
        image_size: int or None. Image side in pixels, for the axis limit. Defaults to None.
        uniform: float or None. Distance under uniform attention, drawn as a dashed reference
            line. Defaults to None.

    Returns:
        `path`.

    Example:

    >>> import tempfile
    >>> from matplotlib.image import imread
    >>> distances = np.array([[4.0, 9.0], [10.0, 12.0]])  # 2 layers, 2 heads
    >>> path = os.path.join(tempfile.mkdtemp(), "distance.png")
    >>> path = plot_mean_attention_distance(distances, path, image_size=32, uniform=11.0)
    >>> imread(path).shape
    (320, 400, 4)
    """
    distances = np.asarray(distances)
    if distances.ndim != 2:
        raise ValueError(f"Invalid distances of shape {distances.shape}: expected (layers, heads).")
    layers, heads = distances.shape
    figure = _figure(4.0, 3.2)
    axis = figure.add_subplot(1, 1, 1)
    for head in range(heads):
        axis.scatter(np.arange(layers), distances[:, head], s=14, label=f"head {head}")
    axis.plot(np.arange(layers), distances.mean(axis=1), color="black", linewidth=1, label="mean")
    if uniform is not None:
        axis.axhline(uniform, color="gray", linestyle="--", linewidth=1, label="uniform attention")
    axis.set_xlabel("network depth (layer)")
    axis.set_ylabel("mean attention distance (pixels)")
    axis.set_xticks(np.arange(layers))
    axis.set_ylim(0, image_size if image_size else max(float(distances.max()) * 1.1, 1e-6))
    if heads <= 8:
        axis.legend(fontsize=7)
    figure.tight_layout()
    return _save(figure, path)


def plot_position_embedding_similarity(similarity, path):
    """Draws the similarity map of every patch's position embedding, on the grid (Fig. 7 centre).

    Args:
        similarity: array (rows, cols, rows, cols). From `position_embedding_similarity`.
        path: str. PNG file to write.

    Returns:
        `path`.

    Example:

    >>> import tempfile
    >>> from matplotlib.image import imread
    >>> similarity = np.eye(4).reshape(2, 2, 2, 2)  # each patch similar to itself only
    >>> path = plot_position_embedding_similarity(similarity, os.path.join(tempfile.mkdtemp(), "s.png"))
    >>> imread(path).shape
    (210, 290, 4)
    """
    similarity = np.asarray(similarity)
    if similarity.ndim != 4:
        raise ValueError(f"Invalid similarity of shape {similarity.shape}: expected (rows, cols, rows, cols).")
    rows, cols = similarity.shape[:2]
    side = min(7.0, 0.55 * max(rows, cols) + 1.0)
    figure = _figure(side + 0.8, side * rows / cols)
    grid = figure.add_gridspec(rows, cols, wspace=0.05, hspace=0.05, left=0.08, right=0.86, top=0.93, bottom=0.1)
    image = None
    for i in range(rows):
        for j in range(cols):
            axis = figure.add_subplot(grid[i, j])
            image = axis.imshow(similarity[i, j], cmap="viridis", vmin=-1, vmax=1)
            axis.set_xticks([])
            axis.set_yticks([])
            if j == 0:
                axis.set_ylabel(str(i + 1), fontsize=7)
            if i == rows - 1:
                axis.set_xlabel(str(j + 1), fontsize=7)
    figure.suptitle("position embedding similarity", fontsize=10)
    figure.supxlabel("input patch column", fontsize=9, x=0.47, y=0.01)
    figure.supylabel("input patch row", fontsize=9, x=0.01)
    colorbar_axis = figure.add_axes([0.89, 0.2, 0.02, 0.6])
    figure.colorbar(image, cax=colorbar_axis, label="cosine similarity")
    return _save(figure, path)


def plot_patch_embedding_filters(filters, path, max_cols=7):
    """Draws the principal components of the patch-embedding filters as tiles (Fig. 7 left).

    Args:
        filters: array (k, P, P, C). From `patch_embedding_filters`.
        path: str. PNG file to write.
        max_cols: int. Tiles per row. Defaults to 7, as in the paper.

    Returns:
        `path`.

    Example:

    >>> import tempfile
    >>> from matplotlib.image import imread
    >>> filters = np.random.default_rng(0).normal(size=(9, 4, 4, 3))
    >>> path = os.path.join(tempfile.mkdtemp(), "filters.png")
    >>> path = plot_patch_embedding_filters(filters, path, max_cols=5)
    >>> imread(path).shape  # 2 rows of 5 tiles, an inch each
    (250, 520, 4)
    """
    filters = np.asarray(filters)
    if filters.ndim != 4:
        raise ValueError(f"Invalid filters of shape {filters.shape}: expected (k, P, P, C).")
    rows, cols = _tile_grid(filters.shape[0], max_cols)
    figure = _figure(1.0 * cols + 0.2, 1.0 * rows + 0.5)
    for index, tile in enumerate(filters):
        axis = figure.add_subplot(rows, cols, index + 1)
        image = _display_image(tile if tile.shape[-1] in (1, 3) else tile.mean(axis=-1))
        axis.imshow(image, cmap="gray" if image.ndim == 2 else None, interpolation="nearest")
        axis.set_xticks([])
        axis.set_yticks([])
    figure.suptitle("embedding filters (principal components)", fontsize=9)
    figure.tight_layout()
    return _save(figure, path)


def plot_mae_reconstructions(images, masked, reconstructions, path):
    """Draws one row per image: the original, what the encoder saw (hidden patches grey), the reconstruction; a PNG.

    What `keras-vit pretrain` writes at its end (MAE paper Fig. 2).

    Args:
        images: array (B, H, W, C). The originals, pixels in [0, 255].
        masked: array (B, H, W, C). The originals with the hidden patches blanked.
        reconstructions: array (B, H, W, C). The visible patches and the predicted hidden ones.
        path: str. PNG file to write.

    Returns:
        `path`.

    Example:

    >>> import tempfile
    >>> from matplotlib.image import imread
    >>> path = os.path.join(tempfile.mkdtemp(), "mae.png")
    >>> images = np.zeros((2, 8, 8, 3))
    >>> imread(plot_mae_reconstructions(images, images, images, path)).shape
    (360, 540, 4)
    """
    rows = np.asarray(images).shape[0]
    figure = _figure(5.4, 1.8 * rows)
    for row, triple in enumerate(zip(images, masked, reconstructions)):
        for col, (image, title) in enumerate(zip(triple, ("original", "masked", "reconstruction"))):
            axes = figure.add_subplot(rows, 3, 3 * row + col + 1)
            image = np.clip(np.asarray(image, "float32"), 0, 255) / 255.0
            axes.imshow(image[..., 0] if image.shape[-1] == 1 else image, cmap="gray", vmin=0, vmax=1)
            axes.set_xticks([])
            axes.set_yticks([])
            if row == 0:
                axes.set_title(title, fontsize=9)
    figure.tight_layout()
    return _save(figure, path)
