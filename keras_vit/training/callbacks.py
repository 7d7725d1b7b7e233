"""Callbacks that make runs survive a crash and respect a time budget.

Keras' BackupAndRestore writes the weights and then the epoch number to two fixed files, so a
process killed in between (or during the weights write) leaves a backup that is torn or claims
the wrong epoch. `AtomicBackupAndRestore` writes each backup to a new file, then commits it with
one atomic rename of a small JSON pointer (`keras_vit.training.run_state`): a backup is either
the old one or the new one. It is a plain callback: resuming is `restore` before `fit` and
`fit(initial_epoch=...)`, both public Keras APIs.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import math
import os
import time
import warnings

import keras

from keras_vit import _atomic
from keras_vit._validation import check_number_in
from keras_vit.training import recipes, run_state
from keras_vit.training.run_dir import RunDirectory


class AtomicBackupAndRestore(keras.callbacks.Callback):
    """Backs up the weights and optimizer state at epoch ends, committed atomically.

    The pointer (`backup.json`, see `keras_vit.training.run_state`) names the weights of the
    last finished epoch and records the optimizer steps, the training seconds summed over every
    process that worked on the run, whether training finished, and `metadata` (the run's
    configuration fingerprint). To resume, call `restore(model)` before `fit` and pass
    `initial_epoch=backup.restored_epoch`; a fit that would start over an existing backup
    without restoring it is refused.

    With `min_seconds`, an epoch end backs up only once that many seconds have passed since the
    last backup (or the fit's start), and the last finished epoch is backed up when training
    ends: a kill loses at most `min_seconds` and an epoch of training.

    Args:
        backup_dir: str. Folder of the backup.
        delete_checkpoint: bool. Delete the backup's files when training ends normally.
            Defaults to True.
        metadata: dict or None. Extra fields stored in the pointer. Defaults to None.
        on_write: callable or None. Called with the path of every file the backup writes (a
            run's manifest of its files). Defaults to None.
        min_seconds: float. Least seconds between two backups at epoch ends; 0 backs up every
            epoch. Defaults to 0.

    Example:

    >>> import tempfile, numpy as np
    >>> backup_dir = os.path.join(tempfile.mkdtemp(), "backup")
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", "mse")
    >>> x, y = np.zeros((4, 2)), np.zeros((4, 1))
    >>> backup = AtomicBackupAndRestore(backup_dir, delete_checkpoint=False)
    >>> _ = model.fit(x, y, epochs=2, verbose=0, callbacks=[backup])
    >>> sorted(os.listdir(backup_dir))  # the pointer names the weights of the last finished epoch
    ['backup.json', 'epoch-00002.weights.h5']
    >>> backup = AtomicBackupAndRestore(backup_dir)
    >>> backup.restore(model)["epoch"]
    2
    >>> history = model.fit(x, y, epochs=3, initial_epoch=backup.restored_epoch, verbose=0, callbacks=[backup])
    >>> history.epoch, os.path.exists(backup_dir)  # resumed after the 2 backed-up epochs, then cleaned up
    ([2], False)
    """

    POINTER = run_state.POINTER

    def __init__(self, backup_dir, delete_checkpoint=True, metadata=None, on_write=None, min_seconds=0.0):
        super().__init__()
        check_number_in("min_seconds", min_seconds, 0, math.inf)
        self.backup_dir = backup_dir
        self.min_seconds = float(min_seconds)
        self.delete_checkpoint = delete_checkpoint
        self.metadata = dict(metadata or {})
        self.on_write = on_write
        self.state = None  # the pointer this run restored or last committed
        self.restored_epoch = 0
        self.epoch = None  # the epoch in progress
        self._fit_start = time.perf_counter()
        self._seconds_before = 0.0  # training time of the processes before this one
        self._last_backup = self._fit_start
        self._unsaved_epoch = None  # a finished epoch whose backup `min_seconds` put off

    def read_state(self):
        """The committed pointer (a dict), or None when there is no backup."""
        return run_state.read(self.backup_dir)

    def restore(self, model):
        """Loads the backup's weights (and optimizer state) into `model`; returns the pointer or None."""
        state = self.read_state()
        if state is None:
            return None
        if model.optimizer is not None:
            recipes.build_optimizer_variables(model)
        model.load_weights(os.path.join(self.backup_dir, state["weights"]))
        self.state = state
        self.restored_epoch = state["epoch"]
        self._seconds_before = state.get("train_seconds", 0.0)
        return state

    def commit(self, **fields):
        """Rewrites the pointer atomically with `fields` updated (e.g. finished=True)."""
        self.state = dict(self.state or self.read_state() or {}, **fields)
        run_state.commit(self.backup_dir, self.state)
        if self.on_write is not None:
            self.on_write(run_state.path(self.backup_dir))

    def train_seconds(self):
        """Training seconds of the whole run so far, including the processes it resumed from."""
        return self._seconds_before + time.perf_counter() - self._fit_start

    def on_train_begin(self, logs=None):
        self._fit_start = self._last_backup = time.perf_counter()
        self._unsaved_epoch = None
        stored = self.read_state() if self.state is None else None
        if stored is not None:
            raise ValueError(
                f"backup_dir={self.backup_dir!r} holds a backup of epoch {stored['epoch']}: call restore(model) "
                "and fit(initial_epoch=backup.restored_epoch) to resume from it, or remove it to start over."
            )

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        self._unsaved_epoch = epoch
        if time.perf_counter() - self._last_backup >= self.min_seconds:
            self._back_up(epoch)

    def _back_up(self, epoch):
        os.makedirs(self.backup_dir, exist_ok=True)
        previous = (self.state or {}).get("weights")
        name = f"epoch-{epoch + 1:05d}.weights.h5"
        if self.on_write is not None:  # recorded first: a crash mid-write leaves no unlisted file
            self.on_write(os.path.join(self.backup_dir, name))
        self.model.save_weights(os.path.join(self.backup_dir, name), overwrite=True)
        iterations = self.model.optimizer.iterations if self.model.optimizer is not None else 0
        self.commit(
            **self.metadata, epoch=epoch + 1, weights=name, finished=False,
            steps=int(keras.ops.convert_to_numpy(iterations)), train_seconds=round(self.train_seconds(), 1),
        )
        if previous and previous != name and os.path.exists(os.path.join(self.backup_dir, previous)):
            os.remove(os.path.join(self.backup_dir, previous))
        self._last_backup = time.perf_counter()
        self._unsaved_epoch = None

    def on_train_end(self, logs=None):
        if self._unsaved_epoch is not None:  # the commit point of the last epoch, before the run's own
            self._back_up(self._unsaved_epoch)
        if not self.delete_checkpoint or self.state is None:
            return
        run_state.delete(self.backup_dir)
        weights = os.path.join(self.backup_dir, self.state["weights"])
        if os.path.exists(weights):
            os.remove(weights)
        if not os.listdir(self.backup_dir):
            os.rmdir(self.backup_dir)


class AtomicModelCheckpoint(keras.callbacks.Callback):
    """Saves the whole model (.keras) through a temporary file and a rename, often and at the end.

    At an epoch end once `min_seconds` have passed since its last save, and when training ends
    (a last epoch not saved yet). What a killed run resumes from is the crash backup
    (`AtomicBackupAndRestore`); this file is the latest model to load while a run
    goes on, at most `min_seconds` and an epoch old.

    Args:
        filepath: str. Path of the .keras file.
        min_seconds: float. Least seconds between two saves at epoch ends; 0 saves every epoch.
            Defaults to 0.

    Example:

    >>> import tempfile, numpy as np
    >>> path = os.path.join(tempfile.mkdtemp(), "checkpoints", "last.keras")
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", "mse")
    >>> _ = model.fit(np.zeros((4, 2)), np.zeros((4, 1)), verbose=0, callbacks=[AtomicModelCheckpoint(path)])
    >>> os.listdir(os.path.dirname(path)), keras.saving.load_model(path).count_params()
    (['last.keras'], 3)
    """

    def __init__(self, filepath, min_seconds=0.0):
        super().__init__()
        check_number_in("min_seconds", min_seconds, 0, math.inf)
        self.filepath = filepath
        self.min_seconds = float(min_seconds)
        self._last_save = time.perf_counter()
        self._unsaved = False

    def on_train_begin(self, logs=None):
        self._last_save = time.perf_counter()
        self._unsaved = False

    def on_epoch_end(self, epoch, logs=None):
        self._unsaved = True
        if time.perf_counter() - self._last_save >= self.min_seconds:
            self._save()

    def on_train_end(self, logs=None):
        if self._unsaved:
            self._save()

    def _save(self):
        save_model_atomic(self.model, self.filepath)
        self._last_save = time.perf_counter()
        self._unsaved = False


def save_model_atomic(model, filepath) -> None:
    """`model.save(filepath)` that never leaves a half-written file at `filepath`.

    The model is saved to a temporary file in the same folder (created if missing), then
    renamed over `filepath` (`keras_vit._atomic.atomic_file`).

    Args:
        model: keras.Model. The model to save.
        filepath: str. Destination, a `.keras` file.

    Example:

    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "models", "m.keras")
    >>> save_model_atomic(keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]), path)
    >>> os.listdir(os.path.dirname(path))
    ['m.keras']
    """
    with _atomic.atomic_file(filepath) as tmp:
        model.save(tmp)


class TimeBudget(keras.callbacks.Callback):
    """Stops training when a wall-clock budget is spent, and fits the cosine schedule to it.

    It plans, from the pace of the current epoch, how many more steps fit in the remaining
    budget: after each epoch, and after the first epoch also every tenth of an epoch (the pace
    of a shared machine changes). For a `keras_vit.training.recipes.WarmupCosine` schedule it
    shortens the cosine so the learning rate reaches its end at the last planned step, and
    training stops there (the last epoch may be partial, so no budget is left unused). Without
    such a schedule training simply runs until the budget is spent. Either way it stops at the
    first batch past the budget. A validation pass (`fit(validation_data=...)`) runs at every
    epoch end, the last partial one included: its time, measured at the last epoch end, is kept
    out of the steps' share of the budget, so the run with its validation ends on time.

    Args:
        seconds: float. The training budget (compilation included).
        steps_per_epoch: int. Steps in one epoch.
        schedule: `WarmupCosine` or None. The schedule to fit to the budget. Defaults to None.

    Example:

    >>> import numpy as np
    >>> from keras_vit.training.recipes import WarmupCosine
    >>> schedule = WarmupCosine(0.1, total_steps=20)
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile(keras.optimizers.SGD(schedule), "mse")
    >>> budget = TimeBudget(seconds=0.0, steps_per_epoch=4, schedule=schedule)  # spent at once
    >>> x, y = np.zeros((8, 2)), np.zeros((8, 1))
    >>> history = model.fit(x, y, batch_size=2, epochs=5, verbose=0, callbacks=[budget])
    >>> len(history.epoch), budget.steps_done, budget.epochs_done, schedule.get_config()["total_steps"]
    (1, 1, 0, 1.0)
    """

    def __init__(self, seconds, steps_per_epoch, schedule=None):
        super().__init__()
        self.seconds = float(seconds)
        self.steps_per_epoch = int(steps_per_epoch)
        self.schedule = schedule
        self.epochs_done = 0
        self.steps_done = 0
        self.planned_steps = None
        self.elapsed = 0.0
        self.eval_seconds = 0.0  # the last epoch end's validation pass, reserved in every plan
        self._fits_schedule = hasattr(schedule, "set_total_steps")
        self._replan_every = max(self.steps_per_epoch // 10, 1)

    def on_train_begin(self, logs=None):
        self.start = time.perf_counter()
        self.epoch_start = self.start
        self.last_batch_end = self.start
        self._step_offset = None

    def on_epoch_begin(self, epoch, logs=None):
        if self._step_offset is None:
            # The schedule counts optimizer steps, which a run resumed from a backup starts past
            # 0; read here, after every callback's on_train_begin (the backup restores there).
            iterations = getattr(getattr(self.model, "optimizer", None), "iterations", None)
            self._step_offset = int(keras.ops.convert_to_numpy(iterations)) if iterations is not None else 0
        self.epoch_start = time.perf_counter()
        self.epoch_steps = 0
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        self.steps_done += 1
        self.epoch_steps += 1
        now = time.perf_counter()
        self.last_batch_end = now
        if now - self.start + self.eval_seconds >= self.seconds:
            self.model.stop_training = True
        elif self._fits_schedule and self.planned_steps is not None and self.steps_done >= self.planned_steps:
            self.model.stop_training = True
        elif self.steps_done > self.steps_per_epoch and self.epoch_steps % self._replan_every == 0:
            self._plan(now)

    def on_epoch_end(self, epoch, logs=None):
        now = time.perf_counter()
        self.elapsed = now - self.start
        self.eval_seconds = now - self.last_batch_end
        if self.epoch_steps >= self.steps_per_epoch:
            self.epochs_done += 1
        if self.model.stop_training:
            self._set_plan(self.steps_done)
        elif self._plan(now, at_epoch_end=True) == 0:
            self.model.stop_training = True

    def _plan(self, now, at_epoch_end=False):
        """Plans the steps that fit in the remaining budget at this epoch's pace; returns how many."""
        # The current epoch's pace, not the average: the first epoch includes compilation.
        step_seconds = max((self.last_batch_end - self.epoch_start) / max(self.epoch_steps, 1), 1e-9)
        remaining = max(self.seconds - (now - self.start), 0.0)
        position = 0 if at_epoch_end else self.epoch_steps
        # Epoch ends still to come in this fit (the current one's too, mid-epoch): each runs a
        # validation pass; later epochs than fit's `epochs` never happen, so none is reserved.
        ends_left = self.params.get("epochs", 1) - self.epoch - (1 if at_epoch_end else 0)

        def seconds_for(steps):
            ends = min(math.ceil((position + steps) / self.steps_per_epoch), max(ends_left, 0))
            return steps * step_seconds + ends * self.eval_seconds

        # The most steps whose time, validation passes included, fits: seconds_for only grows.
        low, high = 0, int(remaining / step_seconds)
        while low < high:
            middle = (low + high + 1) // 2
            low, high = (middle, high) if seconds_for(middle) <= remaining else (low, middle - 1)
        self._set_plan(self.steps_done + low)
        return low

    def _set_plan(self, steps):
        self.planned_steps = steps
        if self._fits_schedule:
            self.schedule.set_total_steps(self._step_offset + steps)

    def on_train_end(self, logs=None):
        self.elapsed = time.perf_counter() - self.start


class DecideMidway(keras.callbacks.Callback):
    """At the first epoch end past `fraction` of the training's steps, decides whether to go on.

    `decide(steps)` is called once, with the model as training left it, and returns (a record
    of what it weighed, kept as `record`; whether to go on): no stops training; yes goes on with
    `switch` set to True, which a pipeline reads to change its data (`--adapt
    auto` gives its held-out images back to the fine-tuning). The steps are the optimizer's,
    a resumed run's included, against the fewer of the schedule's `total_steps` (which
    `TimeBudget` fits to a budget) and `total_steps` (fit's epochs, which may end it first).

    Args:
        decide: callable. `decide(steps)` returns (record, go on?).
        switch: tf.Variable of dtype bool. Set True once `decide()` says go on.
        fraction: float. In (0, 1]. Defaults to 0.5.
        schedule: `keras_vit.training.recipes.WarmupCosine` or None. Where the total steps are read.
            Defaults to None.
        total_steps: int or None. The steps of fit's epochs. Defaults to None.

    Example:

    >>> import numpy as np, tensorflow as tf
    >>> switch = tf.Variable(False)
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", "mse")
    >>> midway = DecideMidway(lambda steps: ({"steps": steps}, True), switch, fraction=0.5, total_steps=4)
    >>> history = model.fit(np.zeros((4, 2)), np.zeros((4, 1)), batch_size=2, epochs=2, verbose=0, callbacks=[midway])
    >>> midway.decided_at_step, midway.record, bool(switch.numpy())
    (2, {'steps': 2}, True)
    """

    def __init__(self, decide, switch, fraction=0.5, schedule=None, total_steps=None):
        super().__init__()
        check_number_in("fraction", fraction, 0, 1, include_low=False)
        if schedule is None and total_steps is None:
            raise ValueError("DecideMidway needs schedule= (a WarmupCosine) or total_steps=.")
        self.decide = decide
        self.switch = switch
        self.fraction = float(fraction)
        self.schedule = schedule
        self.total_steps = total_steps
        self.decided_at_step = None
        self.record = None
        self.went_on = None

    def on_epoch_end(self, epoch, logs=None):
        if self.decided_at_step is not None or self.model.stop_training:
            return  # decided, or the budget ends here anyway: decided after training as without this
        steps = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        total = min(self.schedule.get_config()["total_steps"] if self.schedule is not None else math.inf,
                    self.total_steps if self.total_steps is not None else math.inf)
        if steps < self.fraction * total:
            return
        self.decided_at_step = steps
        self.record, went_on = self.decide(steps)
        self.went_on = bool(went_on)
        if self.went_on:
            self.switch.assign(True)
        else:
            self.model.stop_training = True


class ResumableCSVLogger(keras.callbacks.CSVLogger):
    """CSVLogger (append) that, on resume, drops rows of epochs the backup does not hold.

    It reads the epoch from the backup pointer itself, so it can run before the backup
    callback: each epoch's row is written before the backup commits that epoch, and a crash in
    between only repeats a row that this trimming removes.

    Args:
        filename: str. Path of the CSV file.
        backup_dir: str. Folder of the `AtomicBackupAndRestore` backup.
    """

    def __init__(self, filename, backup_dir):
        super().__init__(filename, append=True)
        self.backup_dir = backup_dir

    def on_train_begin(self, logs=None):
        pointer = run_state.read(self.backup_dir)
        initial_epoch = pointer["epoch"] if pointer else 0
        if os.path.exists(self.filename):
            with open(self.filename, newline="") as f:
                rows = list(csv.reader(f))
            if rows:
                kept = [rows[0]] + [r for r in rows[1:] if r and int(r[0]) < initial_epoch]
                text = io.StringIO()
                csv.writer(text).writerows(kept)
                _atomic.write_text(self.filename, text.getvalue())
        super().on_train_begin(logs)


# A run directory's `checkpoints/last.keras` is saved at an epoch end at most this often (and at
# the end): saved every epoch, it took 0.19 s of a 1.1 s epoch of a small-data fine-tuning on 2
# cores (benchmarks/RESULTS.md section 17, "Epochs without their edges").
CHECKPOINT_SECONDS = 60.0
# The crash backup likewise, for the 0.16 s it took of such an epoch: a kill loses at most this and
# an epoch, where a run of short epochs rarely lives long enough to mind.
BACKUP_SECONDS = 30.0


def make_callbacks(run_dir, fingerprint=None, backup_seconds=None):
    """CSV history, last-model checkpoint, TensorBoard and the crash backup in `run_dir`.

    The backup comes last: it is the commit point of an epoch, after everything else of that
    epoch is on disk. Each file or folder is listed in the run's manifest before it is written.

    Args:
        run_dir: str or None. The run folder; None gives no callbacks.
        fingerprint: dict or None. The configuration, stored with each backup. Defaults to None.
        backup_seconds: float or None. Least seconds between two backups (0: every epoch).
            Defaults to None, `BACKUP_SECONDS`.

    Example:

    >>> import tempfile
    >>> callbacks = make_callbacks(os.path.join(tempfile.mkdtemp(), "run"))
    >>> [type(callback).__name__ for callback in callbacks]
    ['ResumableCSVLogger', 'AtomicModelCheckpoint', 'TensorBoard', 'AtomicBackupAndRestore']
    >>> make_callbacks(None)
    []
    """
    if run_dir is None:
        return []
    run = RunDirectory(run_dir)
    os.makedirs(run_dir, exist_ok=True)
    run.record("history.csv", "checkpoints/last.keras", "tensorboard/")
    callbacks = [
        ResumableCSVLogger(run.history_path, run.backup_dir),
        AtomicModelCheckpoint(os.path.join(run_dir, "checkpoints", "last.keras"), min_seconds=CHECKPOINT_SECONDS),
    ]
    if importlib.util.find_spec("tensorboard") is not None:
        callbacks.append(keras.callbacks.TensorBoard(os.path.join(run_dir, "tensorboard")))
    else:  # a dependency of keras_vit, but installs made with --no-deps may lack it
        warnings.warn("tensorboard is not installed: no TensorBoard logs (pip install tensorboard).", stacklevel=2)

    def on_write(path):
        run.record(os.path.relpath(path, run_dir).replace(os.sep, "/"))

    callbacks.append(AtomicBackupAndRestore(
        run.backup_dir, delete_checkpoint=False, metadata={"fingerprint": fingerprint}, on_write=on_write,
        min_seconds=BACKUP_SECONDS if backup_seconds is None else backup_seconds,
    ))
    return callbacks
