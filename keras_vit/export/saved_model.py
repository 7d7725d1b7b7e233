"""SavedModel export in the TF Serving layout: base_dir/<version>/ with two serving signatures."""

from __future__ import annotations

import os

import keras
import numpy as np
import tensorflow as tf

from keras_vit.export import _common

DEFAULT_TOP_K = 5
SIGNATURES = ("serving_default", "serve_bytes")


def saved_model(
    model,
    base_dir,
    version=None,
    *,
    class_names=None,
    scaling=None,
    top_k=DEFAULT_TOP_K,
    overwrite=False,
):
    """Exports a classifier for TF Serving as `base_dir/<version>/`, written atomically.

    The SavedModel has two signatures, both returning `probabilities` (batch, classes),
    `top_k_indices` (batch, k) int32, `top_k_probabilities` (batch, k) and, when class names
    are known, `top_k_labels` (batch, k) strings:

    - `serving_default`: input `images`, float32 (batch, height, width, channels) pixels in
      [0, 255], any batch size.
    - `serve_bytes`: input `image_bytes`, a (batch,) string tensor of encoded JPEG/PNG/BMP/GIF
      files; decoded, resized bilinearly (antialiased) to the model's size and scaled in the
      graph. A string that is not an image fails that request with InvalidArgument.

    The version is written to a hidden temporary folder inside `base_dir` and renamed, so TF
    Serving (which only loads folders named by integers) never sees a half-written version.
    Inputs and outputs are float32 even for a mixed-precision model.

    Args:
        model: keras.Model. A built classifier with one image input and a (batch, classes)
            output (logits or softmax).
        base_dir: str. The model's folder for TF Serving (`--model_base_path`).
        version: int or None. Version folder to write. Defaults to one more than the largest
            existing version, or 1.
        class_names: sequence of str or None. One name per class, for `top_k_labels`.
            Defaults to None (no labels output).
        scaling: None, str or (mean, std). How [0, 255] pixels map to the model's inputs when
            the model has no `preprocessing` layer: "unit", "symmetric", "imagenet" (see
            `keras_vit.configs.SCALINGS`), a (mean, std) pair on the 0..255 scale, or "none"
            (the model takes raw pixels). Must be None for a model built with
            `preprocessing=`. Defaults to None.
        top_k: int. Number of best classes in the top-k outputs (capped at the number of
            classes). Defaults to 5.
        overwrite: bool. Replace an existing version folder. Defaults to False.

    Returns:
        The path of the written version folder.

    Example:

    >>> import os, tempfile, keras_vit
    >>> model = keras_vit.ViT("tiny", num_classes=3, preprocessing="unit")
    >>> path = saved_model(model, tempfile.mkdtemp(), class_names=["a", "b", "c"])
    >>> os.path.basename(path)
    '1'
    """
    height, width, channels = _common.input_spec(model, what="export to SavedModel")
    classes = _common.num_classes(model, what="export to SavedModel")
    names = _common.check_class_names(class_names, classes)
    mean_std = _common.resolve_scaling(model, scaling, channels)
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
        raise ValueError(f"Invalid top_k={top_k!r}. Expected an integer >= 1.")
    if not isinstance(base_dir, (str, os.PathLike)) or not os.fspath(base_dir):
        raise ValueError(f"Invalid base_dir={base_dir!r}. Expected a folder path.")
    base_dir = os.path.abspath(os.fspath(base_dir))
    if os.path.exists(base_dir) and not os.path.isdir(base_dir):
        raise ValueError(f"Invalid base_dir={base_dir!r}: it exists and is not a folder.")
    version = _resolve_version(base_dir, version)
    target = os.path.join(base_dir, str(version))
    if os.path.exists(target) and not overwrite:
        raise FileExistsError(
            f"Version folder {target!r} already exists; pass another version=, version=None for "
            "the next one, or overwrite=True (--overwrite) to replace it."
        )

    forward = _serving_forward(model, mean_std, min(top_k, classes), names)
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        "serving_default",
        lambda images: forward(images),
        input_signature=[tf.TensorSpec((None, height, width, channels), tf.float32, name="images")],
    )
    # serve_bytes must know the size to resize to; a model with a free image size gets only the
    # pixel signature.
    if height is not None and width is not None:
        archive.add_endpoint(
            "serve_bytes",
            lambda image_bytes: forward(decode_images(image_bytes, height, width, channels)),
            input_signature=[tf.TensorSpec((None,), tf.string, name="image_bytes")],
        )
    with _common.atomic_directory(target, overwrite=overwrite) as tmp:
        archive.write_out(tmp, verbose=False)
        if names is not None:
            extra = os.path.join(tmp, "assets.extra")
            os.makedirs(extra, exist_ok=True)
            _common.write_labels(os.path.join(extra, _common.LABELS_FILENAME), names)
    return target


def decode_images(image_bytes, height, width, channels):
    """Decodes a (batch,) string tensor of encoded images to float32 pixels in [0, 255].

    The result has shape (batch, height, width, channels). JPEG, PNG, BMP and GIF (first
    frame) are accepted; images of another size are resized (bilinear, antialiased). This is
    what the `serve_bytes` signature runs.

    Args:
        image_bytes: tf.Tensor. Encoded image files, dtype string, shape (batch,).
        height: int. Output height.
        width: int. Output width.
        channels: int. 1 or 3 channels to decode to.

    Example:

    >>> white = tf.io.encode_png(tf.fill((4, 6, 3), tf.constant(255, tf.uint8)))
    >>> images = decode_images(tf.stack([white, white]), 8, 8, 1)
    >>> tuple(images.shape), images.dtype.name, round(float(tf.reduce_min(images)), 3)
    ((2, 8, 8, 1), 'float32', 255.0)
    """

    def decode_one(data):
        image = tf.io.decode_image(data, channels=channels, dtype=tf.uint8, expand_animations=False)
        image = tf.cast(image, tf.float32)
        if image.shape[0] == height and image.shape[1] == width:
            return image
        same_size = tf.logical_and(tf.shape(image)[0] == height, tf.shape(image)[1] == width)
        return tf.cond(
            same_size,
            lambda: tf.ensure_shape(image, (height, width, channels)),
            lambda: tf.image.resize(image, (height, width), method="bilinear", antialias=True),
        )

    return tf.map_fn(
        decode_one,
        image_bytes,
        fn_output_signature=tf.TensorSpec((height, width, channels), tf.float32),
    )


def _serving_forward(model, mean_std, k, names):
    """The graph both signatures share: scaling, the model in inference mode, softmax, top-k."""
    from_probabilities = _common.outputs_probabilities(model)
    labels = None if names is None else tf.constant(names)
    mean, std = (None, None) if mean_std is None else mean_std

    def forward(images):
        x = tf.cast(images, tf.float32)
        if mean is not None:
            x = (x - tf.constant(mean)) / tf.constant(std)
        outputs = tf.cast(model(x, training=False), tf.float32)
        probabilities = outputs if from_probabilities else tf.nn.softmax(outputs, axis=-1)
        top = tf.math.top_k(probabilities, k=k)
        result = {
            "probabilities": probabilities,
            "top_k_indices": tf.cast(top.indices, tf.int32),
            "top_k_probabilities": top.values,
        }
        if labels is not None:
            result["top_k_labels"] = tf.gather(labels, top.indices)
        return result

    return forward


def _resolve_version(base_dir, version):
    if version is None:
        existing = []
        if os.path.isdir(base_dir):
            existing = [int(name) for name in os.listdir(base_dir) if name.isdigit()]
        return max(existing, default=0) + 1
    if isinstance(version, str) and version.isdigit():
        version = int(version)
    if not isinstance(version, (int, np.integer)) or isinstance(version, bool) or version < 1:
        raise ValueError(f"Invalid version={version!r}. Expected an integer >= 1 (TF Serving version folder).")
    return int(version)
