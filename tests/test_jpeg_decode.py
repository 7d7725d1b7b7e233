"""JPEG files decode to Pillow's pixels (issue 52: the image side equals transformers' PIL processors within one level).

transformers' image processors read photos with Pillow, whose libjpeg runs the accurate integer
DCT; TensorFlow's `decode_jpeg` defaults to the fast one, up to 5 levels off on CIFAR-10's JPEGs,
which moved 18 of 5,000 zero-shot predictions of a trained CLIP (benchmarks/zeroshot_head.py).
"""

import io

import numpy as np
from PIL import Image


def _jpeg(seed=0, size=(40, 52)):
    """A photo-like JPEG (smooth shading, an edge, noise; quality 75, 4:2:0 chroma) and Pillow's pixels of it."""
    rng = np.random.default_rng(seed)
    rows, cols = np.mgrid[0 : size[0], 0 : size[1]].astype("float64")
    image = np.stack([90 + 2 * rows, 140 + cols, 220 - 2 * rows], axis=-1)
    image[rows > 0.6 * size[0]] = [60, 120, 40]
    image = np.clip(image + rng.normal(0, 12, image.shape), 0, 255).astype("uint8")
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=75)
    data = buffer.getvalue()
    return data, np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).astype("int64")


def test_jpeg_files_decode_to_pillows_pixels_in_every_path():
    import tensorflow as tf

    from keras_vit.data import image_io

    data, expected = _jpeg()
    # One file at its own size (folders, predict_files, the zero-shot classifier's processor) ...
    one = image_io.decode_image(tf.constant(data), 3).numpy().astype("int64")
    assert np.abs(one - expected).max() <= 1, np.abs(one - expected).max()
    # ... and a batch at the model's size, as the SavedModel's bytes signature decodes it.
    batch = image_io.decode_images(tf.constant([data]), *expected.shape[:2], 3).numpy()[0]
    assert np.abs(batch - expected).max() <= 1, np.abs(batch - expected).max()
