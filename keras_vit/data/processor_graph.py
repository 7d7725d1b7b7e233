"""A checkpoint's image processor in a TensorFlow graph: encoded files -> the model's pixels, as the processor makes them.

`decode_processed_images` is what a SavedModel's `serve_bytes` signature runs for a model that
keeps its checkpoint's processor (`vit_config["image_processor"]`), and what
`keras_vit.export.load_predictor(...).predict_files` runs for such a `.keras` model: each file
is decoded and checked as `keras_vit.data.image_io.decode_image` does, then resized and
centre-cropped by `keras_vit.image_processor.resize_crop`, the same arithmetic as for NumPy
images (PIL's filters, fixed-point coefficients and rounding).

Example:

>>> import tensorflow as tf
>>> from keras_vit.image_processor import processor_record
>>> clip = processor_record("shortest_edge", 8, [8, 8], "bicubic", "floor", "x")
>>> png = tf.io.encode_png(tf.fill((10, 20, 3), tf.constant(90, tf.uint8)))
>>> pixels = decode_processed_images(tf.stack([png]), clip, 8, 8, 3)
>>> tuple(pixels.shape), float(pixels[0, 0, 0, 0])
((1, 8, 8, 3), 90.0)
"""

from __future__ import annotations

import json
import types

import tensorflow as tf
import tensorflow.experimental.numpy as tnp

from keras_vit.backends.tensorflow import require
from keras_vit.data.image_io import MAX_PIXELS, decode_image
from keras_vit.image_processor import resize_crop


# The array functions `keras_vit.image_processor` uses, in TensorFlow's NumPy API; `arange` of a tensor's length,
# `cond` for its branch.
TF_OPS = types.SimpleNamespace(
    **{name: getattr(tnp, name) for name in ("asarray", "minimum", "maximum", "floor", "ceil", "where", "abs",
                                             "sin", "cos", "sum", "clip", "einsum")},
    # tnp.round calls .astype, which a graph tensor has only under numpy behaviour (tf.data, tf.function);
    # tf.round rounds half to even, as np.round does.
    round=lambda x: tf.round(tf.convert_to_tensor(x)),
    arange=lambda size, dtype: tf.cast(tf.range(tf.cast(size, tf.int32)), dtype),
    cond=tf.cond,  # Pillow's pass order, decided by each image's size
)


def decode_processed_images(image_bytes, processor, height, width, channels, *, max_pixels=MAX_PIXELS):
    """Decodes a (batch,) string tensor of encoded images and applies `processor`: float32 (batch, height, width, channels).

    Args:
        image_bytes: tf.Tensor. Encoded JPEG, PNG, GIF, BMP or WebP files, dtype string, shape (batch,).
        processor: dict. A processor of `keras_vit.image_processor`.
        height: int. The model's image height.
        width: int. The model's image width.
        channels: int. 1 or 3.
        max_pixels: int. Largest width x height accepted. Defaults to `MAX_PIXELS`.
    """
    if tf.executing_eagerly():
        return _graph(json.dumps(processor, sort_keys=True), height, width, channels, max_pixels)(
            tf.convert_to_tensor(image_bytes, tf.string))
    image_bytes = tf.convert_to_tensor(image_bytes, tf.string)
    count = tf.size(image_bytes)
    with tf.control_dependencies([require(count > 0, "image_bytes is an empty batch; send at least one image.")]):
        indices = tf.range(count)

    def one(index):
        image = decode_image(image_bytes[index], channels, max_pixels=max_pixels, index=index)
        return process_image_tensor(image, processor, height, width)

    return tf.map_fn(one, indices, fn_output_signature=tf.TensorSpec((height, width, channels), tf.float32))


def process_image_tensor(image, processor, height, width):
    """One decoded image tensor (h, w, channels) of [0, 255] values -> float32 (height, width, channels) by `processor`.

    Float values are rounded to uint8 levels first, as `keras_vit.image_processor.process_image`
    rounds them: the processors resize 8-bit images.

    Example:

    >>> from keras_vit.image_processor import processor_record
    >>> squash = processor_record("squash", [2, 2], None, "bilinear", "floor", "x")
    >>> process_image_tensor(tf.fill((4, 6, 3), 200.0), squash, 2, 2).numpy()[0, 0].tolist()
    [200.0, 200.0, 200.0]
    """
    size = tf.cast(tf.shape(image), tf.float64)
    levels = tf.round(tf.cast(image, tf.float64))
    pixels = resize_crop(levels, size[0], size[1], processor, (height, width), xp=TF_OPS)
    return tf.ensure_shape(tf.cast(pixels, tf.float32), (height, width, image.shape[-1]))


_GRAPHS = {}


def _graph(key, height, width, channels, max_pixels):
    """The tf.function of one processor and size, made once (a new trace per call would be slow)."""
    signature = (key, height, width, channels, max_pixels)
    if signature not in _GRAPHS:
        processor = json.loads(key)
        _GRAPHS[signature] = tf.function(
            lambda data: decode_processed_images(data, processor, height, width, channels, max_pixels=max_pixels),
            input_signature=[tf.TensorSpec((None,), tf.string)])
    return _GRAPHS[signature]
