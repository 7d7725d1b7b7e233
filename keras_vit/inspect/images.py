"""The images to inspect a model on: the size it takes, image files or the shipped sample, scaled as it expects.

Example:

>>> import keras_vit
>>> model = keras_vit.ViT("tiny", num_classes=3)
>>> (size, channels) = input_size(model)
>>> pixels, titles = sample_images(size, channels)
>>> pixels.shape, titles[0], float(model_inputs(model, pixels).max()) <= 1.0
((4, 32, 32, 3), 'T-shirt/top', True)
"""

from __future__ import annotations

import keras
import numpy as np

from keras_vit.applications import preprocess_input
from keras_vit.choices import INSPECT_SCALES as SCALES
from keras_vit.data import image_io
from keras_vit.inspect.attention import iter_layers, patch_encoder
from keras_vit.naflex import is_naflex


def input_size(model, image_size=None):
    """Returns ((height, width), channels) that images must have for `model`.

    Args:
        model: keras.Model. A ViT with one image input.
        image_size: (int, int) or None. Size to use when the model accepts any size; must
            match the model's own otherwise. Defaults to None (the model's built grid).
    """
    if is_naflex(model):
        raise ValueError(
            f"Cannot inspect NaFlex model {model.name!r} (naflex=True: patch sequences, each image at its own grid): "
            "the figures are drawn on images of one size. Rebuild it on images with keras_vit.ViT(weights=..., "
            "naflex=False, image_size=N) and save that."
        )
    shape = tuple(model.inputs[0].shape)
    if len(shape) != 4:
        raise ValueError(f"Invalid model: expected an image input (batch, height, width, channels), got {shape}.")
    channels = shape[3]
    if channels not in (1, 3, 4):
        raise ValueError(f"Invalid model: its input has {channels} channels; image files give 1, 3 or 4.")
    if shape[1] is not None and shape[2] is not None:
        if image_size is not None and tuple(image_size) != shape[1:3]:
            raise ValueError(
                f"Invalid image_size={tuple(image_size)} (--image-size): the model takes {shape[1]}x{shape[2]} images only."
            )
        return (shape[1], shape[2]), channels
    if image_size is not None:
        if min(image_size) < 1:
            raise ValueError(f"Invalid image_size={tuple(image_size)} (--image-size): expected two positive integers.")
        return tuple(image_size), channels
    encoder = patch_encoder(model)
    grid = getattr(encoder, "grid_size", None)
    if grid is None or encoder.patch_size == 1:
        raise ValueError("The model accepts any image size; pass image_size=(HEIGHT, WIDTH) (--image-size HEIGHT WIDTH).")
    return (grid[0] * encoder.patch_size, grid[1] * encoder.patch_size), channels


def load_images(paths, size, channels):
    """Image files as float32 (N, height, width, channels) pixels in [0, 255] (see `image_io.read_image_files`)."""
    return image_io.read_image_files(paths, *size, channels)


def sample_images(size, channels):
    """Four test images of the shipped Fashion-MNIST sample resized to `size`, and their class names."""
    from keras_vit.data import fashion_mnist

    _, (images, labels) = fashion_mnist.load_sample()
    picks = [int(np.flatnonzero(labels == label)[0]) for label in (0, 1, 7, 9)]
    pixels = images[picks].astype("float32")[..., None]
    pixels = keras.ops.convert_to_numpy(keras.ops.image.resize(pixels, size, interpolation="bilinear"))
    pixels = np.clip(pixels, 0.0, 255.0)  # bilinear resizing can overshoot by a rounding error
    pixels = np.repeat(pixels, channels, axis=-1) if channels != 1 else pixels
    if channels == 4:
        pixels[..., 3] = 255.0
    return pixels, [fashion_mnist.CLASS_NAMES[int(labels[i])] for i in picks]


def model_inputs(model, pixels, scale="auto"):
    """`pixels` in [0, 255] scaled as `model` expects: `scale` is one of `SCALES`."""
    if scale not in SCALES:
        raise ValueError(f"Invalid scale={scale!r}. Expected one of {list(SCALES)}.")
    if scale == "auto":
        scale = "raw" if any(layer.name == "preprocessing" for layer in iter_layers(model)) else "unit"
    return pixels if scale == "raw" else preprocess_input(pixels, mode=scale)
