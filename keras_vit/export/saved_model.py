"""SavedModel export in the TF Serving layout: base_dir/<version>/ with two serving signatures."""

from __future__ import annotations

import functools
import os
import re

import numpy as np
import tensorflow as tf

from keras_vit._validation import check_positive_int
from keras_vit.export import _common, _tensorflow_process

DEFAULT_TOP_K = 5
SIGNATURES = ("serving_default", "serve_bytes")
# Serving refuses images with more pixels than this before decoding them (a decompression bomb
# is a small file that claims a huge size); 50 megapixels is larger than any camera photo.
MAX_PIXELS = 50_000_000
FORMATS = "JPEG, PNG, GIF, BMP or WebP"
# ITU-R 601 luma weights as PIL's convert("L") applies them (they sum to exactly 1).
_LUMA = (19595 / 65536, 38470 / 65536, 7471 / 65536)
_HEADER_BYTES = 64  # enough for every size field read below (BMP's end at byte 54)


def saved_model(
    model,
    base_dir,
    version=None,
    *,
    class_names=None,
    scaling=None,
    top_k=DEFAULT_TOP_K,
    overwrite=False,
    jit_compile=False,
    max_pixels=MAX_PIXELS,
):
    """Exports a classifier for TF Serving as `base_dir/<version>/`, written atomically.

    The SavedModel has two signatures, both returning `probabilities` (batch, classes),
    `top_k_indices` (batch, k) int32, `top_k_probabilities` (batch, k) and, when class names
    are known, `top_k_labels` (batch, k) strings:

    - `serving_default`: input `images`, float32 (batch, height, width, channels) pixels in
      [0, 255], any batch size >= 1.
    - `serve_bytes`: input `image_bytes`, a (batch,) string tensor of encoded JPEG, PNG, GIF
      (first frame), BMP or WebP files of any size, greyscale, colour or with alpha; decoded,
      converted to the model's channels, resized bilinearly (antialiased) and scaled in the
      graph (see `decode_images`).

    A bad request fails with INVALID_ARGUMENT and a message naming the problem: an empty
    batch, images of the wrong shape, an empty string, bytes that are not an image, or an
    image whose header declares more than `max_pixels` pixels (refused before decoding).
    The model's variables are stored once, in float32, and the graph computes in float32 also
    for a model trained under mixed precision (see `keras_vit.export`).

    The version is written to a hidden temporary folder inside `base_dir` and renamed, so TF
    Serving (which only loads folders named by integers) never sees a half-written version;
    temporary folders left by a killed export are removed by the next export to `base_dir`.
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
        jit_compile: bool. Compile the model part of both signatures with XLA: on CPU about
            1.5x faster than without (benchmarks/RESULTS.md), but a CPU TF Serving runs it only
            when started with `--xla_cpu_compilation_enabled=true` (off by default there, an
            experimental flag), so a portable export leaves it off. Defaults to False.
        max_pixels: int. Largest width x height `serve_bytes` accepts. Defaults to
            `MAX_PIXELS` (50 million).

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
    check_positive_int("top_k", top_k)
    check_positive_int("max_pixels", max_pixels)
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

    if _tensorflow_process.needed():
        return _tensorflow_process.call(
            "saved_model", model, base_dir, version, class_names=names, scaling=scaling, top_k=top_k,
            overwrite=overwrite, jit_compile=jit_compile, max_pixels=max_pixels,
        )
    model = _common.float32_model(model)
    module, signatures = _serving_module(model, (height, width, channels), mean_std, min(top_k, classes), names,
                             jit_compile=jit_compile, max_pixels=max_pixels)
    with _common.atomic_directory(target, overwrite=overwrite) as tmp:
        tf.saved_model.save(module, tmp, signatures=signatures)
        if names is not None:
            extra = os.path.join(tmp, "assets.extra")
            os.makedirs(extra, exist_ok=True)
            _common.write_labels(os.path.join(extra, _common.LABELS_FILENAME), names)
    return target


def decode_images(image_bytes, height, width, channels, *, max_pixels=MAX_PIXELS):
    """Decodes a (batch,) string tensor of encoded images to float32 pixels in [0, 255].

    The result has shape (batch, height, width, channels). JPEG, PNG, GIF (first frame), BMP
    and WebP of any size are accepted, greyscale, colour or with alpha (dropped): colour turns
    grey by ITU-R 601 luma for a 1-channel model, grey is repeated for a 3-channel one, and
    every image is resized (bilinear, antialiased) to height x width. This is what the
    `serve_bytes` signature runs, eagerly or in a graph.

    Bad input fails with InvalidArgumentError naming the problem and the image's index: an
    empty batch, an empty string, bytes that are not one of the formats above or do not
    decode, and an image whose header declares more than `max_pixels` pixels (refused before
    anything is decoded or allocated). The limit is per frame: TensorFlow decodes every frame of
    an animated GIF before the first one is kept.

    Args:
        image_bytes: tf.Tensor. Encoded image files, dtype string, shape (batch,).
        height: int. Output height.
        width: int. Output width.
        channels: int. 1 or 3 channels to decode to.
        max_pixels: int. Largest width x height accepted. Defaults to `MAX_PIXELS` (50 million).

    Example:

    >>> white = tf.io.encode_png(tf.fill((4, 6, 3), tf.constant(255, tf.uint8)))
    >>> images = decode_images(tf.stack([white, white]), 8, 8, 1)
    >>> tuple(images.shape), images.dtype.name, round(float(tf.reduce_min(images)), 3)
    ((2, 8, 8, 1), 'float32', 255.0)
    """
    if channels not in (1, 3):
        raise ValueError(f"Invalid channels={channels!r}. Expected 1 or 3.")
    image_bytes = tf.convert_to_tensor(image_bytes, tf.string)
    if tf.executing_eagerly():  # the same graph a server runs (and faster than op by op)
        return _graph_decoder(height, width, channels, max_pixels)(image_bytes)
    count = tf.size(image_bytes)
    checks = [_require(count > 0, "image_bytes is an empty batch; send at least one image.")]
    with tf.control_dependencies(checks):
        indices = tf.range(count)

    def decode_one(index):
        data = image_bytes[index]
        image = _decode_checked(data, index, max_pixels)
        image = _to_channels(tf.cast(image, tf.float32), channels)
        image = tf.image.resize(image, (height, width), method="bilinear", antialias=True)
        return tf.ensure_shape(image, (height, width, channels))

    return tf.map_fn(decode_one, indices, fn_output_signature=tf.TensorSpec((height, width, channels), tf.float32))


@functools.lru_cache(maxsize=8)
def _graph_decoder(height, width, channels, max_pixels):
    return tf.function(
        lambda image_bytes: decode_images(image_bytes, height, width, channels, max_pixels=max_pixels),
        input_signature=[tf.TensorSpec((None,), tf.string)],
    )


def _decode_checked(data, index, max_pixels):
    """Checks one encoded image's format and header size, then decodes it to uint8 (h, w, c)."""
    padded = tf.strings.substr(tf.strings.join([data, b"\0" * _HEADER_BYTES]), 0, _HEADER_BYTES)
    head = tf.cast(tf.io.decode_raw(padded, tf.uint8), tf.int64)
    kind = _format_of(padded)
    not_empty = _require(tf.strings.length(data) > 0, "image_bytes[{}] is an empty string; expected an encoded image.", index)
    known = _require(kind >= 0, f"image_bytes[{{}}] is not a {FORMATS} file (unknown leading bytes).", index)
    with tf.control_dependencies([not_empty, known]):
        size = tf.switch_case(
            tf.maximum(kind, 0),
            [
                lambda: tf.cast(tf.image.extract_jpeg_shape(data)[:2], tf.int64),
                lambda: tf.stack([_big_endian(head, 20, 4), _big_endian(head, 16, 4)]),
                lambda: tf.stack([_little_endian(head, 8, 2), _little_endian(head, 6, 2)]),
                lambda: _bmp_size(head),
                lambda: _webp_size(head, padded),
            ],
        )
    pixels = size[0] * size[1]
    sane = _require(
        tf.logical_and(tf.reduce_all(size > 0), pixels <= max_pixels),
        f"image_bytes[{{}}] declares {{}} x {{}} pixels; expected at least 1 x 1 and at most {max_pixels} pixels.",
        index, size[1], size[0],
    )
    bits = _little_endian(head, 28, 2)
    palette_bmp = tf.logical_and(tf.equal(kind, 3), bits <= 8)
    grey = tf.cond(palette_bmp, lambda: _bmp_palette_is_grey(data, head, index), lambda: tf.constant(True))
    decodable = _require(
        grey, "image_bytes[{}] is a {}-bit BMP with a colour palette; expected a 24/32-bit or greyscale 8-bit BMP.",
        index, bits,
    )
    with tf.control_dependencies([sane, decodable]):
        return tf.io.decode_image(data, channels=0, dtype=tf.uint8, expand_animations=False)


def _require(condition, template, *values):
    """An assertion whose InvalidArgumentError reads `template` filled with `values` ({} each)."""
    return tf.debugging.Assert(condition, [tf.strings.format(template, values) if values else template])


def error_text(error):
    """The one-line reason of an InvalidArgumentError raised by `decode_images` or a signature.

    Example:

    >>> try:
    ...     decode_images(tf.constant([b"hello"]), 8, 8, 3)
    ... except tf.errors.InvalidArgumentError as error:
    ...     print(error_text(error))
    image_bytes[0] is not a JPEG, PNG, GIF, BMP or WebP file (unknown leading bytes).
    """
    for pattern in (r"assertion failed: \[(.*)\]$", r"Summarized data: b'(.*)'$"):
        found = re.search(pattern, error.message, re.M)
        if found:
            return found.group(1)
    return re.sub(r"\{\{function_node [^}]*\}\}\s*", "", error.message.strip().splitlines()[0])


def _format_of(padded):
    """0 JPEG, 1 PNG, 2 GIF, 3 BMP, 4 WebP, -1 unknown, from a file's leading bytes."""
    prefix = lambda n: tf.strings.substr(padded, 0, n)
    tests = [
        tf.equal(prefix(3), b"\xff\xd8\xff"),
        tf.equal(prefix(8), b"\x89PNG\r\n\x1a\n"),
        tf.logical_or(tf.equal(prefix(6), b"GIF87a"), tf.equal(prefix(6), b"GIF89a")),
        tf.equal(prefix(2), b"BM"),
        tf.logical_and(tf.equal(prefix(4), b"RIFF"), tf.equal(tf.strings.substr(padded, 8, 4), b"WEBP")),
    ]
    kind = tf.constant(-1, tf.int32)
    for code in reversed(range(len(tests))):
        kind = tf.where(tests[code], code, kind)
    return kind


def _little_endian(head, start, count):
    return sum(head[start + i] * (1 << (8 * i)) for i in range(count))


def _big_endian(head, start, count):
    return _little_endian(tf.reverse(head[start : start + count], [0]), 0, count)


def _bmp_size(head):
    """(height, width) of a BMP: signed 32-bit fields, height negative for top-down files."""
    width, height = _little_endian(head, 18, 4), _little_endian(head, 22, 4)
    height = tf.where(height >= 2**31, 2**32 - height, height)
    width = tf.where(width >= 2**31, tf.constant(-1, tf.int64), width)
    return tf.stack([height, width])


def _webp_size(head, padded):
    """(height, width) of a WebP from its first chunk: lossy VP8, lossless VP8L or extended VP8X."""
    chunk = tf.strings.substr(padded, 12, 4)
    lossless = _little_endian(head, 21, 4)
    return tf.case(
        [
            (tf.equal(chunk, b"VP8 "), lambda: tf.stack([_little_endian(head, 28, 2) % 16384, _little_endian(head, 26, 2) % 16384])),
            (tf.equal(chunk, b"VP8L"), lambda: tf.stack([(lossless // 16384) % 16384 + 1, lossless % 16384 + 1])),
            (tf.equal(chunk, b"VP8X"), lambda: tf.stack([_little_endian(head, 27, 3) + 1, _little_endian(head, 24, 3) + 1])),
        ],
        default=lambda: tf.constant([-1, -1], tf.int64),
    )


def _bmp_palette_is_grey(data, head, index):
    """True when a BMP's palette is the grey ramp (TF decodes palette BMPs to their indices)."""
    colors = _little_endian(head, 46, 4)
    colors = tf.where(colors == 0, tf.bitwise.left_shift(tf.constant(1, tf.int64), _little_endian(head, 28, 2)), colors)
    start = 14 + _little_endian(head, 14, 4)
    whole = tf.cast(tf.strings.length(data), tf.int64) >= start + 4 * colors
    readable = _require(whole, "image_bytes[{}] is a truncated BMP file (its palette is cut off).", index)
    with tf.control_dependencies([readable]):
        raw = tf.strings.substr(data, tf.cast(start, tf.int32), tf.cast(4 * colors, tf.int32))
    palette = tf.reshape(tf.io.decode_raw(raw, tf.uint8), (-1, 4))
    ramp = tf.cast(tf.range(tf.shape(palette)[0])[:, None], tf.uint8)
    return tf.reduce_all(tf.equal(palette[:, :3], ramp))


def _to_channels(image, channels):
    """Greyscale (1 or 2 channels, alpha dropped) or colour (3 or 4) to `channels` channels."""
    has_colour = tf.shape(image)[-1] >= 3
    if channels == 1:
        luma = lambda: tf.tensordot(image[..., :3], tf.constant(_LUMA), axes=1)[..., None]
        return tf.cond(has_colour, luma, lambda: image[..., :1])
    return tf.cond(has_colour, lambda: image[..., :3], lambda: tf.tile(image[..., :1], (1, 1, 3)))


def _serving_module(model, image_shape, mean_std, k, names, *, jit_compile, max_pixels):
    """A tf.Module holding each model variable once, and the signature functions by name."""
    height, width, channels = image_shape
    from_probabilities = _common.outputs_probabilities(model)
    labels = None if names is None else tf.constant(names)
    mean, std = (None, None) if mean_std is None else mean_std

    # Scaling, the model and softmax: the part XLA can compile (no strings, fixed shapes).
    @tf.function(jit_compile=jit_compile, autograph=False)
    def probabilities_of(images):
        x = images
        if mean is not None:
            x = (x - tf.constant(mean)) / tf.constant(std)
        outputs = tf.cast(model(x, training=False), tf.float32)
        return outputs if from_probabilities else tf.nn.softmax(outputs, axis=-1)

    def outputs(images):
        probabilities = probabilities_of(images)
        top = tf.math.top_k(probabilities, k=k)
        result = {
            "probabilities": probabilities,
            "top_k_indices": tf.cast(top.indices, tf.int32),
            "top_k_probabilities": top.values,
        }
        if labels is not None:
            result["top_k_labels"] = tf.gather(labels, top.indices)
        return result

    expected = f"(batch, {height}, {width}, {channels})".replace("None", "any")

    @tf.function(input_signature=[tf.TensorSpec((None, height, width, channels), tf.float32, name="images")])
    def serving_default(images):
        # TF Serving feeds tensors without checking them against the signature's shape.
        shape = tf.concat([tf.shape(images), [0, 0, 0, 0]], 0)  # padded: safe to index at any rank
        fits = tf.logical_and(tf.equal(tf.rank(images), 4), shape[0] > 0)
        for axis, size in enumerate((height, width, channels), start=1):
            if size is not None:
                fits = tf.logical_and(fits, tf.equal(shape[axis], size))
        check = _require(
            fits, f"images must be float32 pixels of shape {expected} with batch >= 1; got shape {{}}.", tf.shape(images)
        )
        with tf.control_dependencies([check]):
            return outputs(tf.identity(images))

    module = tf.Module()
    # The model's variables themselves (not Keras' wrappers), so the checkpoint stores each once.
    module.model_variables = [variable.value for variable in model.variables]
    signatures = {"serving_default": serving_default}
    # serve_bytes must know the size to resize to; a model with a free image size gets only the
    # pixel signature.
    if height is not None and width is not None:

        @tf.function(input_signature=[tf.TensorSpec((None,), tf.string, name="image_bytes")])
        def serve_bytes(image_bytes):
            return outputs(decode_images(image_bytes, height, width, channels, max_pixels=max_pixels))

        signatures["serve_bytes"] = serve_bytes
    return module, signatures


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
