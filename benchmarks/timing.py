"""The one timing engine: an epoch of n training steps (Keras `fit` or a plain loop), and the figures
every training benchmark reports from a first and a warm epoch; median/range and best-of helpers.

An epoch runner is `run(n) -> Epoch`. `keras_epochs(model, data)` runs one `model.fit` epoch of n
steps with `StepClock` timing each step (Keras hands callbacks materialised logs, so a step has
finished at its end); `loop_epochs(step)` calls a Python step function n times (timm, or JAX's
jitted step on a GPU, ended by `sync`). `train_figures(run, batch, short, long)` runs a first
epoch (tracing, compilation), optionally a warm short one, then a warm long one, and returns
images/s from the median single step of the long epoch.

    >>> run = loop_epochs(lambda: None)
    >>> figures = train_figures(run, batch=8, short=1, long=3, warm_short=True)
    >>> figures["steps"], figures["first_steps"], figures["images_per_s"] > 0
    (3, 1, True)
    >>> median_range([3, 1, 2])
    (2, 1, 3)
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time


def median_range(values):
    """(median, min, max) of `values`."""
    values = list(values)
    return statistics.median(values), min(values), max(values)


def fmt_range(values, digits=1, scale=1.0):
    """'median (min-max)' of `values` times `scale`, with `digits` decimals."""
    m, lo, hi = median_range(v * scale for v in values)
    return f"{m:.{digits}f} ({lo:.{digits}f}-{hi:.{digits}f})"


def best_time(run, repeats=3):
    """The shortest wall time in seconds of `repeats` calls of `run`, after one call to warm up."""
    run()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def cpu_seconds():
    """This process's user + system CPU time."""
    return sum(os.times()[:2])


@dataclasses.dataclass
class Epoch:
    """One timed epoch: its wall, each step's seconds (empty where steps run asynchronously), the
    process's CPU seconds, the last loss (None where not known)."""

    wall_s: float
    step_s: list
    cpu_s: float
    loss: float | None = None


def step_clock(fit_seconds=None, progress=False):
    """A Keras callback timing each training step, each epoch, and the seconds inside training
    steps and validation batches of each epoch; it stops `fit` after the step that passes
    `fit_seconds` (a compiler that recompiles every step would otherwise run for hours), and with
    `progress` prints `STEP seconds` lines (a worker that times out still tells its steps)."""
    import keras

    class StepClock(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.step_s, self.epochs = [], []

        def on_train_begin(self, logs=None):
            self.fit_start = time.perf_counter()

        def on_epoch_begin(self, epoch, logs=None):
            self.epochs.append({"start": time.perf_counter(), "inside": 0.0, "steps": 0})

        def _begin(self, batch, logs=None):
            self.batch_start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            now = time.perf_counter()
            self.step_s.append(now - self.batch_start)
            if self.epochs:
                self.epochs[-1]["inside"] += now - self.batch_start
                self.epochs[-1]["steps"] += 1
            if progress:
                print(f"STEP {now - self.batch_start:.3f}", flush=True)
            if fit_seconds is not None and now - self.fit_start > fit_seconds:
                self.model.stop_training = True

        def on_test_batch_end(self, batch, logs=None):
            if self.epochs:
                self.epochs[-1]["inside"] += time.perf_counter() - self.batch_start

        on_train_batch_begin = on_test_batch_begin = _begin

        def on_epoch_end(self, epoch, logs=None):
            self.epochs[-1]["wall"] = time.perf_counter() - self.epochs[-1]["start"]

    return StepClock()


def keras_epochs(model, data, fit_seconds=None, progress=False):
    """run(n) -> Epoch: one `model.fit` epoch of n steps. `data(n)` gives fit's data arguments
    (a dict), or `data` is a repeating dataset passed with steps_per_epoch=n."""

    def run(n):
        clock = step_clock(fit_seconds, progress)
        kwargs = data(n) if callable(data) else {"x": data, "steps_per_epoch": n}
        start, cpu = time.perf_counter(), cpu_seconds()
        history = model.fit(**kwargs, epochs=1, verbose=0, callbacks=[clock])
        loss = history.history.get("loss", [None])[-1]
        return Epoch(time.perf_counter() - start, clock.step_s, cpu_seconds() - cpu, loss)

    return run


def loop_epochs(step, sync=None, time_steps=True):
    """run(n) -> Epoch: `step()` called n times; `sync()` (if given) ends the epoch, and with
    `time_steps=False` steps are not timed one by one (asynchronous device steps)."""

    def run(n):
        times = []
        start, cpu = time.perf_counter(), cpu_seconds()
        for _ in range(n):
            step_start = time.perf_counter()
            step()
            if time_steps:
                times.append(time.perf_counter() - step_start)
        if sync:
            sync()
        return Epoch(time.perf_counter() - start, times, cpu_seconds() - cpu)

    return run


def train_figures(run, batch, short, long, warm_short=False):
    """Training figures from a first epoch of `short` steps, a warm one of `short` (`warm_short`),
    and a warm one of `long` steps.

    images/s = batch / the median single step of the long epoch (p10-p90 its spread); first-fit
    overhead = the first epoch's wall less its steps at that median (tracing, compilation); fit
    overhead = the long epoch's wall less its steps; with `warm_short`, step_s_by_difference =
    (long wall - warm short wall) / (long - short), which swings when the load changes between
    the two epochs.
    """
    first = run(short)
    warm = run(short) if warm_short else None
    last = run(long)
    median = statistics.median(last.step_s)
    deciles = statistics.quantiles(last.step_s, n=10, method="inclusive") if len(last.step_s) > 1 else [median] * 9
    figures = {
        "step_s": median, "images_per_s": batch / median, "step_p10_s": deciles[0], "step_p90_s": deciles[-1],
        "steps": len(last.step_s), "first_steps": len(first.step_s), "first_fit_s": first.wall_s,
        "first_fit_overhead_s": first.wall_s - len(first.step_s) * median,
        "fit_overhead_s": last.wall_s - sum(last.step_s), "cores_used": round(last.cpu_s / last.wall_s, 2),
    }
    if warm is not None and long > short:
        figures["step_s_by_difference"] = (last.wall_s - warm.wall_s) / (long - short)
    if last.loss is not None:
        import math

        figures["loss_finite"] = bool(math.isfinite(last.loss))
    return figures
