"""The one way keras_vit writes files and folders: into a temporary sibling, then one rename.

A reader (or a process restarted after a crash) sees either the old content or the new one,
never a half-written file. Temporary names start with ".tmp-" so they are easy to recognise.

Example:

>>> import json, os, tempfile
>>> folder = tempfile.mkdtemp()
>>> write_json(os.path.join(folder, "state.json"), {"epoch": 3})
>>> with atomic_file(os.path.join(folder, "notes.txt")) as tmp:
...     _ = open(tmp, "w").write("hello")
>>> sorted(os.listdir(folder)), json.load(open(os.path.join(folder, "state.json")))
(['notes.txt', 'state.json'], {'epoch': 3})
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile


@contextlib.contextmanager
def atomic_file(final_path):
    """Yields a temporary path beside `final_path` that replaces it when the block succeeds.

    On any error the temporary file is removed, and so is the parent folder if this call
    created it, so a failure leaves nothing behind. A process killed midway leaves only a
    hidden `.tmp-<name>-<pid>-*` file, which the next write into the same folder removes once
    that process is gone (a run resumed after a kill leaves none behind).

    Args:
        final_path: str or path-like. The file to write.
    """
    final_path = os.path.abspath(os.fspath(final_path))
    parent = os.path.dirname(final_path)
    created_parent = _makedirs(parent)
    remove_stale_temporaries(parent)
    suffix = os.path.splitext(final_path)[1]
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{os.path.basename(final_path)}-{os.getpid()}-", suffix=suffix, dir=parent)
    os.close(fd)
    try:
        yield tmp
        _umask_permissions(tmp, directory=False)
        _fsync(tmp)
        os.replace(tmp, final_path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        _remove_created(created_parent)
        raise


@contextlib.contextmanager
def atomic_directory(final_path, *, overwrite=False):
    """Yields a temporary folder beside `final_path` that is renamed to it when the block succeeds.

    On any error the temporary folder is removed, and so is the parent folder if this call
    created it, so a failure leaves nothing behind. A process killed midway leaves only a
    hidden `.tmp-<name>-<pid>-*` folder, never `final_path`; the next call in the same parent
    folder removes such folders whose process is gone. An existing `final_path` is replaced
    in one atomic exchange where the system supports it (Linux renameat2).

    Args:
        final_path: str or path-like. The folder to write.
        overwrite: bool. Replace an existing `final_path`; else raise FileExistsError.
            Defaults to False.
    """
    final_path = os.path.abspath(os.fspath(final_path))
    parent = os.path.dirname(final_path)
    created_parent = _makedirs(parent)
    remove_stale_temporaries(parent)
    tmp = tempfile.mkdtemp(prefix=f".tmp-{os.path.basename(final_path)}-{os.getpid()}-", dir=parent)
    try:
        yield tmp
        _umask_permissions(tmp, directory=True)
        _move_into_place(tmp, final_path, overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_created(created_parent)
        raise


def _move_into_place(tmp, final_path, overwrite):
    """Renames folder `tmp` to `final_path`, replacing an existing one only when `overwrite`."""
    if not os.path.exists(final_path):
        os.rename(tmp, final_path)
        return
    if not overwrite:
        raise FileExistsError(f"{final_path!r} appeared while writing it; not overwriting it.")
    if _exchange(tmp, final_path):
        shutil.rmtree(tmp, ignore_errors=True)  # it now holds the old version
        return
    # No atomic exchange: move the old version aside first; if killed between the two renames,
    # the next call puts it back (see remove_stale_temporaries).
    trash = tempfile.mkdtemp(prefix=f".old-{os.path.basename(final_path)}-{os.getpid()}-", dir=os.path.dirname(final_path))
    os.rename(final_path, os.path.join(trash, "old"))
    os.rename(tmp, final_path)
    shutil.rmtree(trash, ignore_errors=True)


def _exchange(a, b):
    """Swaps two paths atomically with Linux renameat2(RENAME_EXCHANGE); False where unsupported."""
    import ctypes

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


# `.tmp-<name>-<pid>-<random>` and `.old-<name>-<pid>-<random>`, as atomic_directory names them;
# atomic_file's `.tmp-<name>-<pid>-<random><name's extension>`.
_TEMPORARY = re.compile(r"^\.(?P<kind>tmp|old)-(?P<name>.+)-(?P<pid>\d+)-[a-z0-9_]{8}(?P<extension>(\.[^.]+)?)$")


def remove_stale_temporaries(parent):
    """Removes the temporary folders and files in `parent` left by atomic writes whose process died.

    A `.old-` folder still holding a version that was never replaced (killed between two
    renames) is moved back first. Those of a live process (another export running now) are
    left alone.

    Args:
        parent: str. The folder to clean.

    Returns:
        The list of removed names.
    """
    removed = []
    for entry in sorted(os.listdir(parent)) if os.path.isdir(parent) else []:
        match = _TEMPORARY.match(entry)
        path = os.path.join(parent, entry)
        if not match or _process_alive(int(match["pid"])):
            continue
        if os.path.isfile(path) and not os.path.islink(path):
            if match["kind"] == "tmp" and match["name"].endswith(match["extension"]):
                os.remove(path)
                removed.append(entry)
            continue
        if not os.path.isdir(path) or match["extension"]:
            continue
        old, final = os.path.join(path, "old"), os.path.join(parent, match["name"])
        if match["kind"] == "old" and os.path.isdir(old) and not os.path.exists(final):
            os.rename(old, final)
        shutil.rmtree(path, ignore_errors=True)
        removed.append(entry)
    return removed


def _process_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    return True


def write_bytes(path, chunks) -> None:
    """Writes the byte strings (or buffers) in `chunks`, in order, to `path` atomically."""
    with atomic_file(path) as tmp:
        with open(tmp, "wb") as f:
            for chunk in chunks:
                f.write(chunk)


def write_text(path, text: str) -> None:
    """Writes `text` (UTF-8) to `path` atomically."""
    with atomic_file(path) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(text)


def write_json(path, data) -> None:
    """Writes `data` as indented JSON to `path` atomically."""
    write_text(path, json.dumps(data, indent=1) + "\n")


def _fsync(path):
    # Without it a power cut after the rename can leave an empty file under the final name.
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _umask_permissions(path, directory):
    """Gives a temporary file or folder the permissions a plain open()/mkdir() would have.

    tempfile creates them owner-only (0600/0700); a model server running as another user
    must be able to read the export.
    """
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, (0o777 if directory else 0o666) & ~mask)


def _makedirs(path):
    """Creates `path` and returns the top-most folder that did not exist before (or None)."""
    top = None
    probe = path
    while probe and not os.path.exists(probe):
        top = probe
        probe = os.path.dirname(probe)
    os.makedirs(path, exist_ok=True)
    return top


def _remove_created(top):
    if top is not None:
        shutil.rmtree(top, ignore_errors=True)
