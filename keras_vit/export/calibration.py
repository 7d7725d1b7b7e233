"""Images to calibrate an int8 TFLite export with: a NumPy file, a folder of images or the shipped sample."""

from __future__ import annotations

import os

import numpy as np

from keras_vit.data import image_io

SAMPLE = "fashion-mnist-sample"


def calibration_images(source, shape, *, argument="representative_data"):
    """Returns float32 images (N, *shape) in [0, 255] for int8 calibration, checked against the model's input.

    Args:
        source: str. A .npy file, a .npz file (its `x_train` or first array), a folder of image
            files (each decoded and resized as a SavedModel's `serve_bytes` does), or
            "fashion-mnist-sample" (the shipped sample's training images).
        shape: (int, int, int). The model's input (height, width, channels).
        argument: str. The argument's name in error messages. Defaults to "representative_data".

    Example:

    >>> calibration_images("fashion-mnist-sample", (28, 28, 1)).shape
    (8000, 28, 28, 1)
    """
    shape = tuple(shape)
    if source == SAMPLE:
        from keras_vit.data import fashion_mnist

        images = fashion_mnist.load_sample()[0][0]
    elif os.path.isdir(source):
        images = _decode_folder(source, shape, argument)
    elif source.endswith((".npy", ".npz")):
        images = _load_numpy(source, argument)
    else:
        raise ValueError(
            f"Invalid {argument} {source!r}. Expected a .npy or .npz file, a folder of "
            f"images or {SAMPLE!r}."
        )
    images = np.asarray(images, dtype="float32")
    if images.ndim == 3 and shape[-1] == 1:
        images = images[..., None]
    if images.ndim != 4 or len(images) == 0 or tuple(images.shape[1:]) != shape:
        raise ValueError(
            f"Invalid {argument} {source!r}: got images of shape {tuple(images.shape)}, but the model "
            f"takes (N, {', '.join(map(str, shape))}) with N >= 1."
        )
    return images


def _load_numpy(source, argument):
    if not os.path.isfile(source):
        raise FileNotFoundError(f"Calibration data not found: {argument} {source!r}.")
    try:
        images = np.load(source, allow_pickle=False)
        if not isinstance(images, np.ndarray):  # .npz: its x_train or first array
            with images as archive:
                images = archive["x_train" if "x_train" in archive.files else archive.files[0]]
    except (OSError, ValueError, EOFError, IndexError) as error:
        raise ValueError(f"Invalid {argument} {source!r}: not a readable {source[-4:]} file ({error}).") from None
    return images


def _decode_folder(folder, shape, argument):
    """Every image file of a folder (hidden files skipped) decoded and resized to `shape`; refuses non-images."""
    names = sorted(name for name in os.listdir(folder) if not name.startswith("."))
    if not names:
        raise ValueError(f"Invalid {argument} {folder!r}: the folder holds no image files.")
    paths = [os.path.join(folder, name) for name in names]
    for name, path in zip(names, paths):
        if not os.path.isfile(path):
            raise ValueError(f"Invalid {argument} {folder!r}: {name!r} is not an image file.")
    try:
        return image_io.read_image_files(paths, *shape)
    except image_io.ImageFileError as error:
        name = os.path.basename(error.path)
        raise ValueError(f"Invalid {argument} {folder!r}: {name!r} is not a readable image (it {error.reason}).") from None
