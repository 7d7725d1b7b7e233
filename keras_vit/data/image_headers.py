"""Image sizes read from file headers (JPEG, PNG, GIF, BMP) in pure Python, without decoding.

Listing a folder reads every file's header (a few dozen bytes; for JPEG, the segments up to the
frame header), so the folder's image size is known before training and a file that is no
image of these formats is found at once.

Example:

>>> import io, struct
>>> png = b"\\x89PNG\\r\\n\\x1a\\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", 6, 5)
>>> read_size(io.BytesIO(png + bytes(20)))
(5, 6)
>>> read_size(io.BytesIO(b"not an image")) is None
True
"""

from __future__ import annotations

import struct

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# JPEG frame headers (SOF0-SOF15) carry the size; C4, C8 and CC are other segments.
JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# JPEG markers that stand alone, without a length field.
JPEG_STANDALONE = frozenset([0x01, *range(0xD0, 0xD9)])


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
    if head.startswith(PNG_SIGNATURE) and head[12:16] == b"IHDR" and len(head) >= 24:
        width, height = struct.unpack(">II", head[16:24])
    elif head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        width, height = struct.unpack("<HH", head[6:10])
    elif head.startswith(b"BM") and len(head) >= 26:
        (dib_size,) = struct.unpack("<I", head[14:18])
        if dib_size == 12:  # OS/2 BITMAPCOREHEADER: 16-bit sizes
            width, height = struct.unpack("<HH", head[18:22])
        else:
            width, height = struct.unpack("<ii", head[18:26])
            height = abs(height)  # negative height: rows stored top-down
    elif head.startswith(b"\xff\xd8"):
        file.seek(2)
        size = _jpeg_size(file)
        if size is None:
            return None
        height, width = size
    else:
        return None
    if width < 1 or height < 1:
        return None
    return int(height), int(width)


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


def _jpeg_size(file):
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
            frame = file.read(5)
            if len(frame) < 5:
                return None
            _, height, width = struct.unpack(">BHH", frame)
            return height, width
        if code == 0xD9 or length < 2:  # end of image before any frame
            return None
        file.seek(length - 2, 1)
