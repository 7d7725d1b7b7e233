"""The crash backup's pointer, `backup/backup.json`: which epoch a run has committed, read, written and deleted here only.

The pointer names the weights file of the last finished epoch and records the optimizer
steps, the training seconds summed over every process that worked on the run, whether
training finished, the SavedModel version an export reserved, and the run's configuration
fingerprint. It is replaced with one atomic rename (`keras_vit._atomic`), so a backup is
either the old one or the new one; and deleted before the weights it names.

Example:

>>> import tempfile
>>> backup_dir = os.path.join(tempfile.mkdtemp(), "backup")
>>> read(backup_dir) is None
True
>>> commit(backup_dir, {"epoch": 2, "weights": "epoch-00002.weights.h5"})
>>> read(backup_dir)["epoch"]
2
>>> delete(backup_dir); read(backup_dir) is None
True
"""

from __future__ import annotations

import json
import os

from keras_vit import _atomic

POINTER = "backup.json"


def path(backup_dir) -> str:
    """The pointer file of the backup in `backup_dir`."""
    return os.path.join(backup_dir, POINTER)


def read(backup_dir) -> dict | None:
    """The committed pointer (a dict), or None when `backup_dir` holds no backup."""
    if not os.path.isfile(path(backup_dir)):
        return None
    with open(path(backup_dir)) as f:
        return json.load(f)


def commit(backup_dir, state: dict) -> None:
    """Replaces the pointer with `state` atomically (creating `backup_dir` if missing)."""
    _atomic.write_json(path(backup_dir), state)


def delete(backup_dir) -> None:
    """Removes the pointer, if any: first, so no pointer is ever left naming a deleted weights file."""
    if os.path.isfile(path(backup_dir)):
        os.remove(path(backup_dir))
