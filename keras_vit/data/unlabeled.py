"""Images without labels: a folder of images, flat or in sub-folders whose names are ignored, as a `Source`.

What pre-training reads (`keras-vit pretrain --dataset DIR`): every image directly in the folder
and in its sub-folders (class folders, their labels unused), listed and streamed as
`keras_vit.data.folders.from_folder` does (hidden entries left out, corrupt files skipped or
refused by `on_corrupt`, decoding inside tf.data). Its images decode to the channels their
headers state; a folder mixing grey and colour images is refused unless `channels` says which.

Example:

>>> import os, tempfile
>>> import tensorflow as tf
>>> root = tempfile.mkdtemp()
>>> for name in ("a.png", "b.png"):
...     tf.io.write_file(os.path.join(root, name), tf.io.encode_png(tf.zeros((4, 4, 3), tf.uint8)))
>>> source = from_unlabeled_folder(root)
>>> source.num_examples, source.class_names, tuple(source.dataset.element_spec[0].shape)
(2, ('images',), (4, 4, 3))
"""

from __future__ import annotations

import os

import numpy as np

from keras_vit._validation import check_choice
from keras_vit.data import folders, image_io

# The one "class" of unlabeled images (a Source has class names; pre-training reads none).
UNLABELED = ("images",)


def from_unlabeled_folder(directory, on_corrupt="skip", channels=None, name="dataset"):
    """Every image in `directory` and its sub-folders (one level down), as a `Source` whose labels are all 0.

    Args:
        directory: str. The folder.
        on_corrupt: str. "skip" or "error" for files whose header is no image. Defaults to "skip".
        channels: int or None. 1 or 3 to decode to; None: what the JPEG and PNG headers state (1 when every
            image is grey, else 3), a mix of grey and colour refused. Defaults to None.
        name: str. How messages name the folder's argument (`--dataset`). Defaults to "dataset".
    """
    check_choice("on_corrupt", on_corrupt, folders.ON_CORRUPT)
    if channels is not None:
        check_choice("channels", channels, (1, 3))
    folders.check_not_a_loop(directory)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"Image folder not found: {name}={directory!r}.")
    paths, sizes, corrupt = [], [], []
    for entry in _image_entries(directory):
        size = image_io.image_size(entry.path)
        if size is None:
            if on_corrupt == "error":
                raise ValueError(f"Corrupt or unreadable image file {entry.path!r} (on_corrupt='error').")
            corrupt.append(entry.path)
            continue
        paths.append(entry.path)
        sizes.append(size)
    if not paths:
        found = f" ({len(corrupt)} corrupt)" if corrupt else ""
        raise ValueError(f"Invalid {name}={directory!r}: it holds no readable image{found} "
                         f"({', '.join(folders.IMAGE_EXTENSIONS)}), directly or in its sub-folders.")
    if channels is None:
        channels = _stated_channels(paths, directory, name)
    listing = folders.Listing(directory, UNLABELED, paths, np.zeros(len(paths), "int32"), sizes, corrupt)
    description = (f"{len(paths):,} unlabeled images in {directory} ({folders.describe_sizes(sizes)}, "
                   f"{'grey' if channels == 1 else 'colour'})")
    return folders.files_source(listing, np.arange(len(paths)), channels, on_corrupt, description)


def _image_entries(directory):
    """The image files of `directory`, then those of each sub-folder, sorted by name."""
    entries = folders.visible_entries(directory)
    files = [e for e in entries if folders.is_kind(e, "file")]
    for folder in (e for e in entries if folders.is_kind(e, "dir")):
        files += [e for e in folders.visible_entries(folder.path) if folders.is_kind(e, "file")]
    return [e for e in files if e.name.lower().endswith(folders.IMAGE_EXTENSIONS)]


def _stated_channels(paths, directory, name):
    """1 when every header that states it says grey, else 3; a mix refused, naming an example of each."""
    stated = {}
    for path in paths:
        stated.setdefault(image_io.image_channels(path), []).append(path)
    grey, colour = stated.get(1, []), stated.get(3, [])
    if grey and colour:
        raise ValueError(
            f"Invalid {name}={directory!r}: it mixes {len(grey):,} grey images (e.g. {grey[0]!r}) and {len(colour):,} "
            f"colour images (e.g. {colour[0]!r}). Pass channels (--channels 3 to read all as colour, --channels 1 "
            "as grey).")
    return 1 if grey and not stated.get(None) else 3
