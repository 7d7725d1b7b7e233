"""The run directory of a training run: what the run owns there, and whether a backup may resume.

A run directory may hold the user's own files; the run touches only what it wrote, listed in
`manifest.json`. Its crash backup (`backup/`) carries the configuration's fingerprint: a run
resumes only from a backup of the same configuration, and a new run (`resume=False`) moves an
existing backup and history aside (`backup.old-<time>`, `history.old-<time>.csv`) instead of
deleting anything. One process at a time holds a run directory (`RunLock`): a second run there
is refused, naming the holder's process id.

Example:

>>> import tempfile
>>> folder = tempfile.mkdtemp()
>>> run = RunDirectory(folder)
>>> run.record("history.csv")
>>> json.load(open(os.path.join(folder, MANIFEST)))["written"]
['history.csv']
>>> fingerprint_differences({"num_layers": 6, "seed": 0}, {"num_layers": 2, "seed": 0})
['num_layers: 6 in the backup, 2 now']
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
import warnings

from keras_vit import _atomic
from keras_vit.training import run_state

try:
    import fcntl
except ImportError:  # Windows: no flock; RunLock warns that it cannot hold the folder
    fcntl = None

MANIFEST = "manifest.json"
BACKUP = "backup"
HISTORY = "history.csv"
LOCK = "run.lock"
# How long a refused run waits for the holder to write its process id after taking the lock.
_HOLDER_WAIT_SECONDS = 1.0


def fingerprint_differences(stored: dict, current: dict) -> list:
    """Returns "field: old in the backup, new now" for every field whose value differs."""
    missing = "(not recorded)"
    return [
        f"{field}: {stored.get(field, missing)!r} in the backup, {current.get(field, missing)!r} now"
        for field in sorted(set(stored) | set(current))
        if stored.get(field) != current.get(field)
    ]


class RunDirectory:
    """The folder of one run: its manifest, its backup pointer, and moving old runs aside.

    Args:
        path: str. The run directory (created when first written to).
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        self.backup_dir = os.path.join(self.path, BACKUP)
        self.history_path = os.path.join(self.path, HISTORY)
        self.moved = []  # what `prepare` moved aside, for the run's header

    def backup_state(self):
        """The committed backup's pointer (a dict), or None when there is no backup."""
        return run_state.read(self.backup_dir)

    def prepare(self, fingerprint: dict, resume: bool):
        """Makes the folder ready for a run of `fingerprint`; returns the backup state to resume.

        With `resume`, a backup of another configuration is refused (ValueError naming each
        differing field); without it, an existing backup and history are moved aside.
        Returns None when the run starts from scratch.
        """
        state = self.backup_state()
        if state is not None and resume:
            stored = state.get("fingerprint")
            if stored is None:
                raise ValueError(
                    f"The backup in run_dir={self.path!r} records no configuration (written by an older "
                    "keras_vit), so it cannot be checked; pass --no-resume (resume=False) to start a new "
                    "run (the old backup is moved aside, not deleted)."
                )
            differences = fingerprint_differences(stored, fingerprint)
            if differences:
                raise ValueError(
                    f"Cannot resume from the backup in run_dir={self.path!r}: it was made with another "
                    f"configuration ({'; '.join(differences)}). Run the same configuration to resume, or pass "
                    "--no-resume (resume=False) to start a new run (the old backup is moved aside, not deleted)."
                )
            return state
        if state is not None or os.path.isdir(self.backup_dir):
            self._move_aside(BACKUP, "backup.old-{stamp}")
        if self._history_has_rows():
            # A new run starts its history afresh; the old one stays readable beside it.
            self._move_aside(HISTORY, "history.old-{stamp}.csv")
        return None

    def record(self, *relative_paths):
        """Adds paths (relative to the run directory) to the manifest of what the run wrote."""
        manifest = self._manifest()
        written = manifest.setdefault("written", [])
        added = [p for p in relative_paths if p not in written]
        if added:
            written.extend(added)
            _atomic.write_json(os.path.join(self.path, MANIFEST), manifest)

    def remove_backup(self):
        """Deletes the backup's files that the run wrote, and the backup folder if that empties it."""
        if not os.path.isdir(self.backup_dir):
            return
        manifest = self._manifest()
        prefix = BACKUP + "/"
        owned = [p for p in manifest.get("written", []) if p.startswith(prefix)]
        if prefix + run_state.POINTER in owned:
            run_state.delete(self.backup_dir)
        for relative in owned:
            path = os.path.join(self.path, relative)
            if os.path.isfile(path):
                os.remove(path)
        if not os.listdir(self.backup_dir):
            os.rmdir(self.backup_dir)
        manifest["written"] = [p for p in manifest.get("written", []) if not p.startswith(prefix)]
        _atomic.write_json(os.path.join(self.path, MANIFEST), manifest)

    def _manifest(self):
        path = os.path.join(self.path, MANIFEST)
        if not os.path.isfile(path):
            return {"written": []}
        with open(path) as f:
            return json.load(f)

    def _history_has_rows(self):
        if not os.path.isfile(self.history_path):
            return False
        with open(self.history_path) as f:
            return sum(1 for line in f if line.strip()) > 1

    def _move_aside(self, name, pattern):
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        target = os.path.join(self.path, pattern.format(stamp=stamp))
        suffix = 1
        while os.path.exists(target):
            suffix += 1
            target = os.path.join(self.path, pattern.format(stamp=f"{stamp}-{suffix}"))
        os.rename(os.path.join(self.path, name), target)
        manifest = self._manifest()
        if manifest.get("written"):
            # Moved-aside files are the user's now: the run will never delete them.
            kept = [p for p in manifest["written"] if p != name and not p.startswith(name + "/")]
            if kept != manifest["written"]:
                manifest["written"] = kept
                _atomic.write_json(os.path.join(self.path, MANIFEST), manifest)
        self.moved.append(target)


@dataclasses.dataclass
class RunProgress:
    """Where a run stands in its run directory: state of the run, kept out of its (frozen) plan.

    Attributes:
        directory: `RunDirectory` or None. The run directory; None keeps none.
        state: dict or None. The backup pointer resumed from; None for a fresh start.
        finished: bool. Training had ended (the backup says so, or the budget was spent).
    """

    directory: RunDirectory | None = None
    state: dict | None = None
    finished: bool = False

    @classmethod
    def open(cls, run_dir, fingerprint: dict, resume: bool) -> RunProgress:
        """Readies `run_dir` for a run of `fingerprint` (`RunDirectory.prepare`): the backup to resume, or a fresh start.

        Example:

        >>> import tempfile
        >>> progress = RunProgress.open(tempfile.mkdtemp(), {"seed": 0}, resume=True)
        >>> progress.state, progress.finished, progress.seconds_before
        (None, False, 0.0)
        """
        if not run_dir:
            return cls()
        directory = RunDirectory(run_dir)
        state = directory.prepare(fingerprint, resume)
        return cls(directory, state, bool(state and state.get("finished")))

    @property
    def seconds_before(self) -> float:
        """Training seconds of the processes this run resumes from."""
        return self.state["train_seconds"] if self.state else 0.0


class RunDirectoryInUse(ValueError):
    """Another process holds the run directory (`RunLock`)."""


class RunLock:
    """The hold of one process on a run directory: an exclusive `flock` on its `run.lock`.

    The kernel lets go of a flock when its process ends, however it ends (SIGKILL, a crash, a
    power cut of a container), so a killed run leaves nothing stuck: the next run takes the
    lock at once. The file holds the holder's process id and host, for the message of a run
    refused meanwhile; `release` removes it, and the folders it had to create if they are still
    empty (a run refused before writing anything leaves nothing). Where Python has no `fcntl` (Windows) nothing is
    locked and a RuntimeWarning says so. On a network file system the lock holds only as far as
    that file system honours flock.

    Args:
        path: str. The run directory (created if missing).
        process: int or None. This process's index in a run of several processes, each of which
            holds a lock of its own (`run.process-<i>.lock`); None for a run of one process.
            Defaults to None.
        name: callable or None. How the message spells `run_dir` (`--run-dir` on the command
            line). Defaults to None.

    Example:

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> lock = RunLock(folder)
    >>> RunLock(folder)
    Traceback (most recent call last):
    ...
    keras_vit.training.run_dir.RunDirectoryInUse: run_dir=... is in use by another training run: process ... holds its lock ...
    >>> lock.release()
    >>> RunLock(folder).release()
    """

    def __init__(self, path, process=None, name=None):
        name = name or (lambda field: field)
        self.path = os.path.join(os.fspath(path), LOCK if process is None else f"run.process-{process}.lock")
        self._fd = None
        self._created = []  # the folders this lock made, deepest first
        if fcntl is None:
            warnings.warn(f"This platform has no fcntl: {name('run_dir')}={os.fspath(path)!r} is not locked, so "
                          "nothing stops a second run from writing there too. Start one run per run directory.",
                          RuntimeWarning, stacklevel=2)
            return
        while True:
            self._make_folders()
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise RunDirectoryInUse(
                    f"{name('run_dir')}={os.fspath(path)!r} is in use by another training run: {holder} holds its lock "
                    f"({self.path}). Wait for that run to end (or stop it), or pass another {name('run_dir')}."
                ) from None
            except BaseException:
                os.close(fd)
                raise
            # The holder before this one may have removed the file between our open and our lock:
            # then this lock is on a file nobody else sees, and the folder's file must be opened again.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode())
        self._fd = fd

    def release(self):
        """Removes the lock file and the folders it created that are empty, and lets go of the lock; once."""
        if self._fd is None:
            return
        # Removed while still held: a run waiting on this file then sees it gone and opens a new one.
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass
        os.close(self._fd)
        self._fd = None
        for folder in self._created:
            try:
                os.rmdir(folder)
            except OSError:  # the run wrote there (or another run holds it now): kept
                break

    def _make_folders(self):
        folder = os.path.abspath(os.path.dirname(self.path))
        missing = []
        while not os.path.isdir(folder):
            missing.append(folder)
            folder = os.path.dirname(folder)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self._created = self._created or missing


def _holder(fd):
    """"process <pid>" (and its host when not this one) of the lock file open at `fd`."""
    deadline = time.monotonic() + _HOLDER_WAIT_SECONDS
    while True:
        try:
            record = json.loads(os.pread(fd, 4096, 0) or b"null")
        except ValueError:
            record = None
        if isinstance(record, dict) and "pid" in record:
            host = record.get("host")
            return f"process {record['pid']}" + (f" on host {host}" if host and host != socket.gethostname() else "")
        if time.monotonic() > deadline:  # the holder took the lock but has not written who it is yet
            return "another process"
        time.sleep(0.05)
