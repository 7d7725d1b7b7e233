"""The one way keras_vit opens a user's `.keras` file: a file Keras cannot read is named in one line.

Keras reports a file that is there but no zip archive (cut off, or another format) as "File not
found", which would send the user looking for a path that exists.

Example:

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "cut.keras")
>>> _ = open(path, "wb").write(b"PK not really")
>>> load(path, "MODEL")
Traceback (most recent call last):
...
ValueError: Invalid MODEL='...cut.keras': not a readable .keras file (no zip archive: cut off or another format?).
"""

from __future__ import annotations

import zipfile


def load(path, argument="path", compile=True):
    """The model in the `.keras` file `path`; ValueError naming `argument` and `path` where Keras cannot read it.

    Args:
        path: str. An existing `.keras` file.
        argument: str. How the caller's user named the file (`MODEL`, `spec`). Defaults to "path".
        compile: bool. As `keras.saving.load_model` takes it. Defaults to True.
    """
    import keras

    try:
        return keras.saving.load_model(path, compile=compile)
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        reason = ((str(error).strip().splitlines() or [type(error).__name__])[0] if zipfile.is_zipfile(path)
                  else "no zip archive: cut off or another format?")
        raise ValueError(f"Invalid {argument}={path!r}: not a readable .keras file ({reason}).") from None
