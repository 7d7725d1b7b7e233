"""The run directory of a training run: what the run owns there, and whether a backup may resume.

A run directory may hold the user's own files; the run touches only what it wrote, listed in
`manifest.json`. Its crash backup (`backup/`) carries the configuration's fingerprint: a run
resumes only from a backup of the same configuration, and a new run (`resume=False`) moves an
existing backup and history aside (`backup.old-<time>`, `history.old-<time>.csv`) instead of
deleting anything.

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
import time

from keras_vit import _atomic
from keras_vit.training import run_state

MANIFEST = "manifest.json"
BACKUP = "backup"
HISTORY = "history.csv"


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
