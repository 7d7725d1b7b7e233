"""From an image file to pixels, one way for everything: folders, the CLI, `predict`, calibration, serving.

- `read_size` / `image_size`: (height, width) from a file's header in pure Python, without
  decoding (a folder is listed before training).
- `decode_images`: a (batch,) string tensor of encoded files -> float32 pixels in [0, 255],
  checked, colour-converted and resized; what a SavedModel's `serve_bytes` signature runs.
- `decode_image`: one encoded file -> uint8 pixels at its own size, checked the same way (the
  folder source's tf.data pipeline).
- `read_image_files`: image files on disk -> a NumPy batch, through `decode_images`.

Every decode refuses, before decoding anything, bytes that are no JPEG, PNG, GIF, BMP or WebP
and an image whose header declares more than `MAX_PIXELS` pixels (a decompression bomb is a
small file that claims a huge size). Both header readers take the formats' signatures and size
fields from the tables below.

Example:

>>> import io, struct
>>> png = PNG_SIGNATURE + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", 6, 5)
>>> read_size(io.BytesIO(png + bytes(20)))
(5, 6)
>>> read_size(io.BytesIO(b"not an image")) is None
True
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import struct

import numpy as np
import tensorflow as tf

from keras_vit.backends.tensorflow import require

# 50 megapixels is larger than any camera photo.
MAX_PIXELS = 50_000_000
FORMATS = "JPEG, PNG, GIF, BMP or WebP"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Format codes, in the order of FORMATS; -1 is "unknown".
JPEG, PNG, GIF, BMP, WEBP = range(5)
# The leading bytes that identify each format (WebP: "RIFF", 4 bytes of size, then "WEBP").
SIGNATURES = {JPEG: (b"\xff\xd8\xff",), PNG: (PNG_SIGNATURE,), GIF: (b"GIF87a", b"GIF89a"), BMP: (b"BM",)}
WEBP_SIGNATURE = ((0, b"RIFF"), (8, b"WEBP"))
# Where a header stores (height, width): (offset, bytes, byte order) each. BMP's are signed
# 32-bit, the height negative for rows stored top-down.
SIZE_FIELDS = {
    PNG: ((20, 4, "big"), (16, 4, "big")),
    GIF: ((8, 2, "little"), (6, 2, "little")),
    BMP: ((22, 4, "little"), (18, 4, "little")),
}
# JPEG frame headers (SOF0-SOF15) carry the size; C4, C8 and CC are other segments.
JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# JPEG markers that stand alone, without a length field.
JPEG_STANDALONE = frozenset([0x01, *range(0xD0, 0xD9)])
# ITU-R 601 luma weights as PIL's convert("L") applies them (they sum to exactly 1).
_LUMA = (19595 / 65536, 38470 / 65536, 7471 / 65536)
_HEADER_BYTES = 64  # enough for every size field read below (BMP's end at byte 54)


def format_of(head: bytes) -> int:
    """The format code (JPEG, PNG, GIF, BMP, WEBP) of a file's leading bytes, or -1.

    Example:

    >>> format_of(b"GIF89a..."), format_of(b"hello")
    (2, -1)
    """
    for code, signatures in SIGNATURES.items():
        if head.startswith(signatures):
            return code
    if all(head[start : start + len(tag)] == tag for start, tag in WEBP_SIGNATURE):
        return WEBP
    return -1


def read_size(file) -> tuple[int, int] | None:
    """Returns (height, width) from the header of an open binary image file, or None.

    None means the header is not that of a JPEG, PNG, GIF or BMP image, or is cut short.

    Args:
        file: binary file object positioned at the start of the file.

    Example:

    >>> import io
    >>> read_size(io.BytesIO(b"GIF89a" + bytes([7, 0, 3, 0]) + bytes(10)))
    (3, 7)
    """
    head = file.read(26)
    kind = format_of(head)
    if kind == JPEG:
        file.seek(2)
        return _jpeg_size(file)
    if kind not in SIZE_FIELDS or (kind == PNG and head[12:16] != b"IHDR"):
        return None
    fields = SIZE_FIELDS[kind]
    if len(head) < max(offset + count for offset, count, _ in fields):
        return None
    if kind == BMP and head[14:18] == struct.pack("<I", 12):  # OS/2 BITMAPCOREHEADER: 16-bit sizes
        height, width = _int_at(head, 20, 2, "little"), _int_at(head, 18, 2, "little")
    else:
        height, width = (_int_at(head, *field, signed=kind == BMP) for field in fields)
        height = abs(height)
    if width < 1 or height < 1:
        return None
    return height, width


def image_size(path: str) -> tuple[int, int] | None:
    """Returns (height, width) of the image file at `path` from its header, or None if unreadable.

    Args:
        path: str. Path of a JPEG, PNG, GIF or BMP file.

    Example:

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "x.bmp")
    >>> _ = open(path, "wb").write(b"BM" + bytes(12) + bytes([40, 0, 0, 0, 9, 0, 0, 0, 4, 0, 0, 0]))
    >>> image_size(path)
    (4, 9)
    """
    try:
        with open(path, "rb") as file:
            return read_size(file)
    except OSError:
        return None


# PNG colour types (IHDR byte 25): grey, grey with alpha; every other type is colour (RGB, palette, RGBA).
_PNG_GREY = (0, 4)


def image_channels(path: str) -> int | None:
    """1 (grey) or 3 (colour) as the header of the JPEG or PNG file at `path` states it; None elsewhere or if unreadable.

    Example:

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "x.png")
    >>> _ = open(path, "wb").write(bytes.fromhex("89504e470d0a1a0a") + bytes(4) + b"IHDR" + bytes(8) + bytes([8, 0]))
    >>> image_channels(path)
    1
    """
    try:
        with open(path, "rb") as file:
            head = file.read(26)
            kind = format_of(head)
            if kind == PNG and len(head) == 26 and head[12:16] == b"IHDR":
                return 1 if head[25] in _PNG_GREY else 3
            if kind == JPEG:
                file.seek(2)
                components = _jpeg_frame(file, 6)
                return None if components is None else (1 if components[-1] == 1 else 3)
    except OSError:
        return None
    return None


def _int_at(head, offset, count, order, signed=False):
    return int.from_bytes(head[offset : offset + count], order, signed=signed)


def _jpeg_size(file):
    frame = _jpeg_frame(file, 5)
    if frame is None:
        return None
    _, height, width = struct.unpack(">BHH", frame)
    return (height, width) if height and width else None


def _jpeg_frame(file, count):
    """The first `count` bytes of a JPEG's frame header (precision, height, width, components), or None."""
    while True:
        byte = file.read(1)
        while byte == b"\xff":  # fill bytes before a marker
            marker = file.read(1)
            if marker != b"\xff":
                break
        else:
            return None  # no marker where one must be: not a JPEG
        if not marker:
            return None
        code = marker[0]
        if code in JPEG_STANDALONE:
            continue
        length = file.read(2)
        if len(length) < 2:
            return None
        (length,) = struct.unpack(">H", length)
        if code in JPEG_FRAMES:
            frame = file.read(count)
            return frame if len(frame) == count else None
        if code == 0xD9 or length < 2:  # end of image before any frame
            return None
        file.seek(length - 2, 1)


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
    return _decode_batch(image_bytes, height, width, channels, max_pixels)


def _decode_batch(image_bytes, height, width, channels, max_pixels):
    image_bytes = tf.convert_to_tensor(image_bytes, tf.string)
    if tf.executing_eagerly():  # the same graph a server runs (and faster than op by op)
        return _graph_decoder(height, width, channels, max_pixels)(image_bytes)
    count = tf.size(image_bytes)
    checks = [require(count > 0, "image_bytes is an empty batch; send at least one image.")]
    with tf.control_dependencies(checks):
        indices = tf.range(count)

    def decode_one(index):
        image = _decode_checked(image_bytes[index], index, max_pixels)
        image = _to_channels(tf.cast(image, tf.float32), channels)
        image = tf.image.resize(image, (height, width), method="bilinear", antialias=True)
        image = tf.clip_by_value(image, 0.0, 255.0)  # the antialiasing kernel overshoots by up to 1e-4
        return tf.ensure_shape(image, (height, width, channels))

    return tf.map_fn(decode_one, indices, fn_output_signature=tf.TensorSpec((height, width, channels), tf.float32))


@functools.lru_cache(maxsize=8)
def _graph_decoder(height, width, channels, max_pixels):
    return tf.function(
        lambda image_bytes: _decode_batch(image_bytes, height, width, channels, max_pixels),
        input_signature=[tf.TensorSpec((None,), tf.string)],
    )


def decode_image(data, channels, *, max_pixels=MAX_PIXELS, index=0):
    """Decodes one encoded image (a string tensor) to uint8 (height, width, channels) at its own size.

    Checked as `decode_images` checks (format, declared size, palette BMP); colour converted
    as there. For tf.data pipelines, where each file keeps its size until the batch is resized.

    Args:
        data: tf.Tensor. One encoded JPEG, PNG, GIF, BMP or WebP file, dtype string.
        channels: int. 1 or 3.
        max_pixels: int. Largest width x height accepted. Defaults to `MAX_PIXELS`.
        index: int or scalar tensor. The image's place in its batch, which messages name.
            Defaults to 0.

    Example:

    >>> png = tf.io.encode_png(tf.fill((4, 6, 3), tf.constant(200, tf.uint8)))
    >>> image = decode_image(png, 1)
    >>> tuple(image.shape), image.dtype.name, int(image[0, 0, 0])
    ((4, 6, 1), 'uint8', 200)
    """
    if channels not in (1, 3):
        raise ValueError(f"Invalid channels={channels!r}. Expected 1 or 3.")
    image = _decode_checked(tf.convert_to_tensor(data, tf.string), index, max_pixels)
    if channels == 3:  # exact in uint8: only channels are dropped or repeated
        return _to_channels(image, channels)
    return tf.cast(tf.round(_to_channels(tf.cast(image, tf.float32), channels)), tf.uint8)


def read_image_files(paths, height, width, channels, *, max_pixels=MAX_PIXELS):
    """Reads image files as float32 (N, height, width, channels) pixels in [0, 255], as `decode_images` does.

    Args:
        paths: sequence of str. JPEG, PNG, GIF, BMP or WebP files.
        height: int. Output height.
        width: int. Output width.
        channels: int. 1, 3 or 4 (RGBA: the file's alpha, or 255 where it has none).
        max_pixels: int. Largest width x height accepted. Defaults to `MAX_PIXELS`.

    Raises:
        FileNotFoundError: a path is no file.
        ImageFileError: a file is no readable image; the message names it.

    Example:

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "grey.png")
    >>> tf.io.write_file(path, tf.io.encode_png(tf.fill((4, 6, 1), tf.constant(7, tf.uint8))))
    >>> pixels = read_image_files([path], 2, 3, 3)
    >>> pixels.shape, pixels.dtype.name, pixels[0, 0, 0].round(3).tolist()
    ((1, 2, 3, 3), 'float32', [7.0, 7.0, 7.0])
    """
    if channels not in (1, 3, 4):
        raise ValueError(f"Invalid channels={channels!r}. Expected 1, 3 or 4.")
    data = read_files(paths)
    with naming_files(paths):
        return _decode_batch(tf.constant(data), height, width, channels, max_pixels).numpy()


def read_files(paths):
    """The bytes of each file of `paths`; FileNotFoundError names a path that is no file."""
    data = []
    for path in paths:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Image file not found: {path!r}.")
        with open(path, "rb") as file:
            data.append(file.read())
    return data


@contextlib.contextmanager
def naming_files(paths):
    """Turns the InvalidArgumentError of decoding the files `paths` in order into an ImageFileError naming the file."""
    try:
        yield
    except tf.errors.InvalidArgumentError as error:
        reason = error_text(error)
        found = re.match(r"image_bytes\[(\d+)\] (.*)", reason)
        if found:
            raise ImageFileError(paths[int(found[1])], found[2].rstrip(".")) from None
        # A batch's error may name no file, or all of them (a SavedModel's only "Graph execution error"):
        # each decoded on its own tells which.
        check_decodable(paths, read_files(paths))
        raise ValueError(f"Cannot decode the images {list(paths)!r}: {reason}") from None


def undecodable(paths, data):
    """(path, reason) of each file of `paths` (whose bytes are `data`) that does not decode as an image on its own."""
    bad = []
    for path, item in zip(paths, data):
        try:
            decode_image(tf.constant(item), 3)
        except tf.errors.InvalidArgumentError as error:
            bad.append((path, re.sub(r"^image_bytes\[\d+\] |\s*\[Op:.*$", "", error_text(error)).rstrip(".")))
    return bad


def check_decodable(paths, data):
    """Raises one ValueError naming each file of `paths` (whose bytes are `data`) that does not decode as an image."""
    bad = undecodable(paths, data)
    if len(bad) == 1:
        raise ValueError(f"Invalid image file {bad[0][0]!r}: not a readable image file ({bad[0][1]}).")
    if bad:
        listed = ", ".join(f"{path!r} ({reason})" for path, reason in bad)
        raise ValueError(f"{len(bad)} of the {len(paths)} image files are not readable images: {listed}.")


class ImageFileError(ValueError):
    """A file that is no readable image. Attributes: `path`, `reason` (a clause: "is not a ... file")."""

    def __init__(self, path, reason):
        super().__init__(f"Invalid image file {path!r}: not a readable image file (it {reason}).")
        self.path = path
        self.reason = reason


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


def _decode_checked(data, index, max_pixels):
    """Checks one encoded image's format and header size, then decodes it to uint8 (h, w, c)."""
    padded = tf.strings.substr(tf.strings.join([data, b"\0" * _HEADER_BYTES]), 0, _HEADER_BYTES)
    head = tf.cast(tf.io.decode_raw(padded, tf.uint8), tf.int64)
    kind = _graph_format_of(padded)
    not_empty = require(tf.strings.length(data) > 0, "image_bytes[{}] is an empty string; expected an encoded image.", index)
    known = require(kind >= 0, f"image_bytes[{{}}] is not a {FORMATS} file (unknown leading bytes).", index)
    with tf.control_dependencies([not_empty, known]):
        size = tf.switch_case(
            tf.maximum(kind, 0),
            {
                JPEG: lambda: tf.cast(tf.image.extract_jpeg_shape(data)[:2], tf.int64),
                PNG: lambda: _graph_size(head, PNG),
                GIF: lambda: _graph_size(head, GIF),
                BMP: lambda: _bmp_size(head),
                WEBP: lambda: _webp_size(head, padded),
            },
        )
    pixels = size[0] * size[1]
    sane = require(
        tf.logical_and(tf.reduce_all(size > 0), pixels <= max_pixels),
        f"image_bytes[{{}}] declares {{}} x {{}} pixels; expected at least 1 x 1 and at most {max_pixels} pixels.",
        index, size[1], size[0],
    )
    bits = _field(head, 28, 2, "little")
    palette_bmp = tf.logical_and(tf.equal(kind, BMP), bits <= 8)
    grey = tf.cond(palette_bmp, lambda: _bmp_palette_is_grey(data, head, index), lambda: tf.constant(True))
    decodable = require(
        grey, "image_bytes[{}] is a {}-bit BMP with a colour palette; expected a 24/32-bit or greyscale 8-bit BMP.",
        index, bits,
    )
    with tf.control_dependencies([sane, decodable]):
        # Pillow (transformers' image processors) runs libjpeg's accurate integer DCT; TensorFlow's
        # default is the fast one, up to 5 levels off on CIFAR-10's JPEGs.
        return tf.cond(
            tf.equal(kind, JPEG),
            lambda: tf.io.decode_jpeg(data, channels=0, dct_method="INTEGER_ACCURATE"),
            lambda: tf.io.decode_image(data, channels=0, dtype=tf.uint8, expand_animations=False),
        )


def _graph_format_of(padded):
    """`format_of` in the graph: the format code of a file's leading bytes, -1 when unknown."""
    starts = lambda start, tag: tf.equal(tf.strings.substr(padded, start, len(tag)), tag)
    tests = {code: tf.reduce_any([starts(0, tag) for tag in tags]) for code, tags in SIGNATURES.items()}
    tests[WEBP] = tf.reduce_all([starts(start, tag) for start, tag in WEBP_SIGNATURE])
    kind = tf.constant(-1, tf.int32)
    for code in sorted(tests, reverse=True):
        kind = tf.where(tests[code], code, kind)
    return kind


def _field(head, offset, count, order):
    """An unsigned integer of `count` bytes at `offset` of the header bytes `head` (int64 tensor)."""
    places = range(count) if order == "little" else reversed(range(count))
    return sum(head[offset + i] * (1 << (8 * place)) for i, place in enumerate(places))


def _graph_size(head, kind):
    return tf.stack([_field(head, *field) for field in SIZE_FIELDS[kind]])


def _bmp_size(head):
    """(height, width) of a BMP: signed 32-bit fields, height negative for top-down files."""
    height, width = tf.unstack(_graph_size(head, BMP))
    height = tf.where(height >= 2**31, 2**32 - height, height)
    width = tf.where(width >= 2**31, tf.constant(-1, tf.int64), width)
    return tf.stack([height, width])


def _webp_size(head, padded):
    """(height, width) of a WebP from its first chunk: lossy VP8, lossless VP8L or extended VP8X."""
    chunk = tf.strings.substr(padded, 12, 4)
    lossless = _field(head, 21, 4, "little")
    return tf.case(
        [
            (tf.equal(chunk, b"VP8 "), lambda: tf.stack([_field(head, 28, 2, "little") % 16384, _field(head, 26, 2, "little") % 16384])),
            (tf.equal(chunk, b"VP8L"), lambda: tf.stack([(lossless // 16384) % 16384 + 1, lossless % 16384 + 1])),
            (tf.equal(chunk, b"VP8X"), lambda: tf.stack([_field(head, 27, 3, "little") + 1, _field(head, 24, 3, "little") + 1])),
        ],
        default=lambda: tf.constant([-1, -1], tf.int64),
    )


def _bmp_palette_is_grey(data, head, index):
    """True when a BMP's palette is the grey ramp (TF decodes palette BMPs to their indices)."""
    colors = _field(head, 46, 4, "little")
    colors = tf.where(colors == 0, tf.bitwise.left_shift(tf.constant(1, tf.int64), _field(head, 28, 2, "little")), colors)
    start = 14 + _field(head, 14, 4, "little")
    whole = tf.cast(tf.strings.length(data), tf.int64) >= start + 4 * colors
    readable = require(whole, "image_bytes[{}] is a truncated BMP file (its palette is cut off).", index)
    with tf.control_dependencies([readable]):
        raw = tf.strings.substr(data, tf.cast(start, tf.int32), tf.cast(4 * colors, tf.int32))
    palette = tf.reshape(tf.io.decode_raw(raw, tf.uint8), (-1, 4))
    ramp = tf.cast(tf.range(tf.shape(palette)[0])[:, None], tf.uint8)
    return tf.reduce_all(tf.equal(palette[:, :3], ramp))


def _to_channels(image, channels):
    """Greyscale (1 or 2 channels) or colour (3 or 4) to 1 or 3 channels (alpha dropped) or 4 (RGBA)."""
    has_colour = tf.shape(image)[-1] >= 3
    if channels == 1:
        luma = lambda: tf.tensordot(image[..., :3], tf.constant(_LUMA, image.dtype), axes=1)[..., None]
        return tf.cond(has_colour, luma, lambda: image[..., :1])
    rgb = tf.cond(has_colour, lambda: image[..., :3], lambda: tf.tile(image[..., :1], (1, 1, 3)))
    if channels == 3:
        return rgb
    has_alpha = tf.equal(tf.shape(image)[-1] % 2, 0)  # 2 (grey + alpha) or 4 (RGBA)
    alpha = tf.cond(has_alpha, lambda: image[..., -1:], lambda: tf.fill(tf.shape(image[..., :1]), tf.constant(255, image.dtype)))
    return tf.concat([rgb, alpha], axis=-1)
