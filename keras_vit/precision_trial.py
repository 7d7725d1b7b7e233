"""`precision="auto"` by measurement, where `keras_vit.machine`'s table cannot know: a short timed trial.

On a CPU with native bfloat16 instructions (`keras_vit.machine.native_bfloat16`: avx512_bf16 or
amx_bf16) whether mixed_bfloat16 beats float32 depends on the CPU, the Keras backend and the
model, and moves with the code: on a 2-core AMD Zen 4 (avx512_bf16, no AMX) TensorFlow trained the
default model 1.33x faster in float32 + XLA in issue 54's table and 1.22x faster in mixed_bfloat16
on 2026-12-06; on a 2-core AMX Xeon it tied while ViT-Ti/4 ran 1.3-1.4x faster in bfloat16
(benchmarks/RESULTS.md section 4). There `choose` times the candidates on the run's own model
and batch, random data: every candidate is built and warmed up (one step: tracing, compilation),
then timed steps alternate between them (A B, then B A) until `rounds` rounds or the time cap,
whichever comes first; images/s come from each candidate's median step. mixed_bfloat16 wins only
when it is at least `MARGIN` faster than float32 (a tie keeps the exact one). A run with a time
budget weighs the candidates by the images each trains in it after its first step and, where the
run validates, its first validation call at each batch shape (XLA compiles both, and the budget
pays for them: `pick`). The answer is cached per machine and model shape (`cache_file`), with each
candidate's speed and first calls, so the next run does not measure again.

A training trial runs in a child process (`python -m keras_vit.training.precision_child`, which
compiles each candidate with the run's recipe's optimizer, as the run does): the run's random
state, global dtype policy and memory stay as they were, a failing trial cannot take the run down,
and the parent stops it at `seconds` + `START_SECONDS` whatever happens. An inference trial (a
`.keras` model to predict with) times the loaded model's own float32 and bfloat16 copies in process.

Candidates, per Keras backend (XLA as `keras_vit.backends` defaults it for each precision, unless
the run gives `jit_compile`): TensorFlow float32 + XLA and mixed_bfloat16 without XLA; PyTorch
float32 and mixed_bfloat16 (eager); JAX float32 and mixed_bfloat16 under jit.

`KERAS_VIT_PRECISION_TRIAL` sets the cap in seconds (default `DEFAULT_SECONDS`); 0 turns trials
off, and the table answers. `KERAS_VIT_CACHE` names the cache folder (else `$XDG_CACHE_HOME/keras_vit`,
else `~/.cache/keras_vit`).

Imports no Keras, nor `keras_vit.machine`, which calls it: the training trial loads Keras in its child.

Example (timings injected, so it does not depend on this machine's speed):

>>> import tempfile
>>> from keras_vit.machine import Machine
>>> from keras_vit.precision_workloads import training_workload
>>> zen4 = Machine(cpu_flags=frozenset({"avx512f", "avx512_bf16"}), cpu_name="AMD EPYC 9R14")
>>> def measure(workload, policies, seconds):  # what a trial returns: seconds per timed step
...     return [{"policy": "float32", "label": "float32", "seconds": [0.20, 0.21, 0.20]},
...             {"policy": "mixed_bfloat16", "label": "mixed_bfloat16", "seconds": [0.10, 0.11, 0.10]}]
>>> workload = training_workload({"patch_size": 7, "hidden_size": 128, "num_layers": 6, "num_heads": 4,
...                               "mlp_dim": 256}, image_size=28, channels=1, batch_size=256)
>>> cache = os.path.join(tempfile.mkdtemp(), "precision.json")
>>> choose(zen4, "torch", workload, ("float32", "the table's"), measure=measure, seconds=30, cache=cache)
('mixed_bfloat16', 'measured on this avx512_bf16 CPU: mixed_bfloat16 2560 img/s, float32 1280 img/s; 3 timed steps each of width 128, 6 layers, 16 tokens, batch 256')
>>> print(choose(zen4, "torch", workload, ("float32", "the table's"), measure=None, seconds=30, cache=cache)[1])
measured on this avx512_bf16 CPU on ..., cached: mixed_bfloat16 2560 img/s, float32 1280 img/s; 3 timed steps each of width 128, 6 layers, 16 tokens, batch 256
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings

from keras_vit.precision_workloads import describe

ENV = "KERAS_VIT_PRECISION_TRIAL"
CACHE_ENV = "KERAS_VIT_CACHE"
# The trial's own steps (warm-ups included) stop at this many seconds. Each candidate's first step
# (TensorFlow's tracing, XLA's compilation) is most of it: on a 2-core AMX Xeon 16 and 15 s for the
# default model, 28 and 27 s for ViT-Ti/4, so a 30 s cap timed neither and `auto` fell back to the
# table, which ran ViT-Ti/4 at 0.7x its bfloat16 speed (benchmarks/RESULTS.md section 18). Paid once
# per machine and model shape: the answer is cached.
DEFAULT_SECONDS = 90.0
# What starting the child (Python, Keras, the backend) may take on top of the cap before it is stopped.
START_SECONDS = 60.0
ROUNDS = 3  # timed steps per candidate, at most
# mixed_bfloat16 must beat float32 by this share to be picked: a tie keeps float32, the exact one.
MARGIN = 0.05
POLICIES = ("float32", "mixed_bfloat16")
CACHE_FILENAME = "precision.json"
MEASURED = "measured on"  # how the why of a trial's answer begins, fresh or cached
CACHE_VERSION = 1
# The module a training trial's child runs (started by name: it is training code, above this module).
CHILD = "keras_vit.training.precision_child"


class TrialError(RuntimeError):
    """A trial that could not time its candidates (the child failed or ran past its limit)."""


def trial_seconds(environ=None) -> float:
    """The trial's time cap in seconds from `KERAS_VIT_PRECISION_TRIAL` (default `DEFAULT_SECONDS`); 0: off.

    >>> trial_seconds({}), trial_seconds({ENV: "0"}), trial_seconds({ENV: "12.5"})
    (90.0, 0.0, 12.5)
    >>> trial_seconds({ENV: "fast"})
    Traceback (most recent call last):
    ...
    ValueError: Invalid KERAS_VIT_PRECISION_TRIAL='fast'. Expected the trial's time cap in seconds, a number >= 0 (0: no trial, the table answers).
    """
    value = (os.environ if environ is None else environ).get(ENV, "").strip()
    if not value:
        return DEFAULT_SECONDS
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0 or seconds == float("inf"):
        raise ValueError(f"Invalid {ENV}={value!r}. Expected the trial's time cap in seconds, a number >= 0 "
                         "(0: no trial, the table answers).")
    return seconds


def time_alternating(steps: dict, seconds: float, *, rounds: int = ROUNDS, warmup: int = 1, once=None,
                     clock=time.perf_counter, report=None) -> dict:
    """Seconds per timed call of each of `steps`, after `warmup` calls each, alternating, within `seconds`.

    Round r calls the steps in order (r even) or reversed (r odd), so load that comes and goes
    falls on all alike. A round starts only while the cap leaves room for it (the last round's
    time); a warm-up only within the cap. A candidate left with no timed call makes the trial
    inconclusive.

    Args:
        steps: dict of name -> callable. One step of each candidate.
        seconds: float. The time cap, warm-ups included.
        rounds: int. Timed calls per candidate, at most. Defaults to `ROUNDS`.
        warmup: int. Untimed calls per candidate first (tracing, compilation). Defaults to 1.
        once: dict or None. name -> callable, called once right after that candidate's warm-ups
            (within the cap) and reported on its own: a training trial's first validation call,
            whose compilation a budgeted run pays too. Defaults to None.
        clock: callable. Seconds, monotonic. Defaults to `time.perf_counter`.
        report: callable or None. Called with (name, seconds, kind) after each call: kind
            "warmup" for a warm-up (its seconds include tracing and compiling), "once" for
            `once`'s call, None for a timed step. Defaults to None.

    >>> ticks = iter(range(100))
    >>> time_alternating({"a": lambda: None, "b": lambda: None}, 100, clock=lambda: next(ticks))
    {'a': [1, 1, 1], 'b': [1, 1, 1]}
    """
    start = clock()
    for name, step in steps.items():
        warmed = 0
        for _ in range(warmup):
            if clock() - start > seconds:
                break
            t0 = clock()
            step()
            warmed += 1
            if report is not None:
                report(name, clock() - t0, "warmup")
        if once and name in once and warmed == warmup and clock() - start <= seconds:
            t0 = clock()
            once[name]()
            if report is not None:
                report(name, clock() - t0, "once")
    timed = {name: [] for name in steps}
    names = list(steps)
    last_round = 0.0
    for round_ in range(rounds):
        if clock() - start + last_round > seconds:
            break
        began = clock()
        for name in (names if round_ % 2 == 0 else names[::-1]):
            t0 = clock()
            steps[name]()
            timed[name].append(clock() - t0)
            if report is not None:
                report(name, timed[name][-1], None)
        last_round = clock() - began
    return timed


def decide(results: list, batch_size: int, margin: float = MARGIN):
    """(policy, figures) from a trial's `results` by speed alone; None when a candidate has no timed step.

    A budgeted run weighs the same candidates with their first steps (`pick`'s `budget_seconds`).

    Args:
        results: list of dict. Per candidate: "policy", "label" (for the header), "seconds"
            (one per timed step) and, where timed, "warmup" (the first step's seconds).
        batch_size: int. Images per step.
        margin: float. How much faster than float32 another candidate must be. Defaults to `MARGIN`.

    Returns:
        (the fastest candidate's policy, or float32 within `margin` of it; "label N img/s, ...", the chosen first).

    >>> results = [{"policy": "float32", "label": "float32 + XLA", "seconds": [1.0, 1.1]},
    ...            {"policy": "mixed_bfloat16", "label": "mixed_bfloat16", "seconds": [1.0, 1.02]}]
    >>> decide(results, 100)  # 4% faster: within the margin
    ('float32', 'float32 + XLA 95 img/s, mixed_bfloat16 99 img/s')
    >>> decide(results, 100, margin=0.0)[0]
    'mixed_bfloat16'
    """
    if not results or any(not result["seconds"] for result in results):
        return None
    return pick(candidates_of(results, batch_size), margin)


def candidates_of(results: list, batch_size: int) -> list:
    """A trial's `results` as cached: [{"policy", "label", "img_s", "first_step_s", "first_validation_s"}].

    A first call's seconds are None where the trial did not reach it.

    >>> candidates_of([{"policy": "float32", "label": "float32", "seconds": [0.5, 0.4, 0.6], "warmup": [12.0],
    ...                 "validation": [1.5]}], 100)
    [{'policy': 'float32', 'label': 'float32', 'img_s': 200.0, 'first_step_s': 12.0, 'first_validation_s': 1.5}]
    """
    return [{"policy": result["policy"], "label": result["label"],
             "img_s": batch_size / statistics.median(result["seconds"]),
             "first_step_s": sum(result["warmup"]) if result.get("warmup") else None,
             "first_validation_s": sum(result["validation"]) if result.get("validation") else None}
            for result in results]


def validation_shapes(examples: int | None, batch_size: int, whole_batches: bool = False) -> int:
    """How many batch shapes a run's validation passes compile: a whole batch, a last partial one; 0 without validation.

    Args:
        examples: int or None. The validation images; None or 0: the run does not validate.
        batch_size: int. Images per batch.
        whole_batches: bool. Whether the partial last batch is dropped. Defaults to False.

    >>> [validation_shapes(examples, 256) for examples in (None, 600, 512, 100)]
    [0, 2, 1, 1]
    """
    if not examples:
        return 0
    return int(examples >= batch_size) + int(examples % batch_size != 0 and not whole_batches)


def pick(candidates: list, margin: float = MARGIN, budget_seconds: float | None = None, validation_shapes: int = 0):
    """(policy, figures) from `candidates_of`'s list: the most images per second, or within `budget_seconds`.

    Within a budget a candidate trains img/s x (budget - its first calls) images: its first
    training step, and its first validation call once per batch shape the run's validation
    compiles (`validation_shapes`; the trial times one, and XLA's compilation takes about as long
    at another batch: benchmarks/RESULTS.md section 4). The budget's weighing applies only where
    every candidate's first calls were timed. float32 stays unless another candidate is at least
    `margin` ahead (a tie keeps the exact one), and where no candidate has time left after its
    first calls.

    >>> xla = {"policy": "float32", "label": "float32 + XLA", "img_s": 1100.0, "first_step_s": 30.0,
    ...        "first_validation_s": 5.0}
    >>> eager = {"policy": "mixed_bfloat16", "label": "mixed_bfloat16", "img_s": 1000.0, "first_step_s": 3.0,
    ...          "first_validation_s": 0.5}
    >>> pick([xla, eager])
    ('float32', 'float32 + XLA 1100 img/s, mixed_bfloat16 1000 img/s')
    >>> pick([xla, eager], budget_seconds=120)  # 1000 x 117 s against 1100 x 90 s
    ('mixed_bfloat16', "mixed_bfloat16 1000 img/s after a first step of 3 s, float32 + XLA 1100 img/s after 30 s; weighed over the run's budget of 120 s, which the first step spends from")
    >>> pick([xla, eager], budget_seconds=120, validation_shapes=2)[1]  # 1000 x 116 s against 1100 x 80 s
    "mixed_bfloat16 1000 img/s after first calls of 4 s, float32 + XLA 1100 img/s after 40 s; weighed over the run's budget of 120 s, which the first training step and a first validation call at each of 2 batch shapes spend from"
    """
    speed = {candidate["policy"]: candidate["img_s"] for candidate in candidates}
    first = {candidate["policy"]: first_calls(candidate, validation_shapes) for candidate in candidates}
    weigh = budget_seconds is not None and all(value is not None for value in first.values())
    score = {policy: speed[policy] * max(budget_seconds - first[policy], 0.0) if weigh else speed[policy]
             for policy in speed}
    best = max(score, key=score.get)
    if best != "float32" and "float32" in score and (score[best] < score["float32"] * (1 + margin) or not score[best]):
        best = "float32"
    ordered = sorted(candidates, key=lambda candidate: (candidate["policy"] != best, -score[candidate["policy"]]))
    what = "a first step of " if not validation_shapes else "first calls of "
    figures = ", ".join(
        f"{candidate['label']} {speed[candidate['policy']]:.0f} img/s"
        + (f" after {what if i == 0 else ''}{first[candidate['policy']]:.0f} s" if weigh else "")
        for i, candidate in enumerate(ordered))
    if weigh:
        figures += f"; weighed over the run's budget of {budget_seconds:g} s, which " + (
            "the first step spends from" if not validation_shapes else
            "the first training step and the first validation call spend from" if validation_shapes == 1 else
            f"the first training step and a first validation call at each of {validation_shapes} batch shapes "
            "spend from")
    return best, figures


def first_calls(candidate: dict, validation_shapes: int):
    """A candidate's seconds of first calls that a budget pays: its first step, and its first validation call per
    batch shape; None where the trial did not time one of them.

    >>> first_calls({"first_step_s": 30.0, "first_validation_s": 5.0}, 2), first_calls({"first_step_s": 30.0}, 0)
    (40.0, 30.0)
    """
    step = candidate["first_step_s"]
    if not validation_shapes:
        return step
    validation = candidate.get("first_validation_s")
    return None if step is None or validation is None else step + validation_shapes * validation


def cache_file(environ=None) -> str:
    """The cache of trial answers: `KERAS_VIT_CACHE`, else `$XDG_CACHE_HOME/keras_vit`, else ~/.cache/keras_vit.

    >>> cache_file({CACHE_ENV: "/tmp/kv"}), cache_file({"XDG_CACHE_HOME": "/c", "HOME": "/h"})
    ('/tmp/kv/precision.json', '/c/keras_vit/precision.json')
    """
    environ = os.environ if environ is None else environ
    folder = environ.get(CACHE_ENV)
    if not folder:
        base = environ.get("XDG_CACHE_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".cache")
        folder = os.path.join(base, "keras_vit")
    return os.path.join(folder, CACHE_FILENAME)


def cache_key(machine, backend: str, workload: dict) -> tuple[str, dict]:
    """(digest, facts) naming a trial's answer: the CPU (model name, flags, cores), the backend, the
    versions of Keras, TensorFlow and the backend's library, and the workload."""
    from importlib import metadata

    def version(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    libraries = {"tensorflow": ("tensorflow",), "jax": ("jax", "jaxlib"), "torch": ("torch",)}.get(backend, ())
    facts = {
        "cpu": machine.cpu_name, "cores": os.cpu_count(),
        "flags": hashlib.sha256(" ".join(sorted(machine.cpu_flags)).encode()).hexdigest()[:16],
        "backend": backend, "versions": {name: version(name) for name in ("keras", "tensorflow", *libraries)},
        "python": platform.python_version(), "workload": workload,
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:32], facts


def read_cache(path: str) -> dict:
    """The cached answers in `path` by digest; {} where there is none, or, with a warning, where it is corrupt."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (FileNotFoundError, NotADirectoryError):  # none yet; a folder that cannot be is warned about on writing
        return {}
    except (OSError, ValueError) as error:
        warnings.warn(f"Ignoring the precision trial cache {path!r}: {type(error).__name__}: {error}. "
                      "The trial measures again and rewrites it.", stacklevel=2)
        return {}
    entries = data.get("entries") if isinstance(data, dict) and data.get("version") == CACHE_VERSION else None
    if not isinstance(entries, dict):
        warnings.warn(f"Ignoring the precision trial cache {path!r}: not a version {CACHE_VERSION} cache "
                      "({'version': 1, 'entries': {...}}). The trial measures again and rewrites it.", stacklevel=2)
        return {}
    valid = {digest: entry for digest, entry in entries.items() if _valid_entry(entry)}
    if len(valid) < len(entries):
        warnings.warn(f"Ignoring {len(entries) - len(valid)} corrupt entries of the precision trial cache {path!r}: "
                      "their trials measure again.", stacklevel=2)
    return valid


def _valid_entry(entry) -> bool:
    return (isinstance(entry, dict) and entry.get("precision") in (None, *POLICIES)
            and isinstance(entry.get("figures"), str) and isinstance(entry.get("measured"), str)
            and _is_number(entry.get("seconds")) and _valid_candidates(entry))


def _valid_candidates(entry) -> bool:
    """Whether `entry`'s candidates (written since the budget's weighing; older entries have none) can be weighed."""
    if "candidates" not in entry:
        return True
    candidates = entry["candidates"]
    return (isinstance(candidates, list) and bool(candidates) and isinstance(entry.get("steps"), int)
            and all(isinstance(c, dict) and c.get("policy") in POLICIES and isinstance(c.get("label"), str)
                    and _is_number(c.get("img_s")) and _optional_number(c.get("first_step_s"))
                    and _optional_number(c.get("first_validation_s")) for c in candidates))


def _optional_number(value) -> bool:
    return value is None or _is_number(value)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def write_cache(path: str, digest: str, entry: dict) -> None:
    """Adds `entry` under `digest` to the cache in `path`, atomically; warns (never raises) where it cannot."""
    from keras_vit import _atomic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a corrupt file was warned about when it was read
        entries = read_cache(path)
    entries[digest] = entry
    try:
        _atomic.write_json(path, {"version": CACHE_VERSION, "entries": entries})
    except OSError as error:
        warnings.warn(f"Could not cache the precision trial's answer in {path!r}: {error}. "
                      f"The next run measures again (set {CACHE_ENV} to a writable folder).", stacklevel=2)


def choose(machine, backend: str, workload: dict, table: tuple, *, measure=None, seconds=None, cache=None,
           budget_seconds=None, validation_shapes=0):
    """(policy, why) for `workload` on `machine`: cached, else measured, else `table` with why not.

    A trial that ran out of time is cached too (the table answers; a trial of the same model
    would cost as much again), until the cap is raised; one that failed is not. The cache keeps
    each candidate's speed and first calls, so a run with another budget is weighed from them
    without a trial; a budgeted run measures again where its cached answer lacks a figure it
    weighs (an entry written before validation calls were timed).

    Args:
        machine: `keras_vit.machine.Machine`. A CPU with native bfloat16 (the caller's check).
        backend: str. The Keras backend's name.
        workload: dict. `training_workload`'s, or an inference workload ("mode": "predict").
        table: (str, str). The table's (policy, why), the answer where the trial cannot give one.
        measure: callable or None. (workload, policies, seconds) -> results (see `decide`);
            None: `measure_training` in a child process. Defaults to None.
        seconds: float or None. The cap; None: `trial_seconds()`; 0: no trial. Defaults to None.
        cache: str or None. The cache file; None: `cache_file()`. Defaults to None.
        budget_seconds: float or None. The run's time budget, over which the candidates are
            weighed with their first calls (`pick`); None: by speed alone. Defaults to None.
        validation_shapes: int. The batch shapes the run's validation compiles, within the
            budget (`validation_shapes`). Defaults to 0.
    """
    seconds = trial_seconds() if seconds is None else seconds
    if seconds == 0:
        return table[0], f"{table[1]}; no precision trial: {ENV}=0"
    cache = cache_file() if cache is None else cache
    digest, facts = cache_key(machine, backend, workload)
    # No parentheses: the header shows the why inside a pair of them.
    where = f"this {'/'.join(machine.bfloat16_flags)} CPU"
    cached = read_cache(cache).get(digest)
    if cached is not None and cached["precision"] is not None and budget_seconds is not None and \
            not _weighable(cached, validation_shapes):
        cached = None
    if cached is not None and cached["precision"] is not None:
        if budget_seconds is not None:
            policy, figures = pick(cached["candidates"], budget_seconds=budget_seconds,
                                   validation_shapes=validation_shapes)
            return policy, f"{MEASURED} {where} on {cached['measured']}, cached: {_figures(figures, cached['steps'], workload)}"
        return cached["precision"], f"{MEASURED} {where} on {cached['measured']}, cached: {cached['figures']}"
    if cached is not None and cached["seconds"] >= seconds:
        return table[0], (f"{table[1]}; the precision trial on {cached['measured']} timed too little in its "
                          f"{cached['seconds']:g} s; cached, a larger {ENV} measures again")
    try:
        results = (measure or measure_training)(workload, POLICIES, seconds)
    except Exception as error:  # noqa: BLE001  (the table answers instead; the header says why)
        return table[0], f"{table[1]}; the precision trial failed: {type(error).__name__}: {_first_line(error)}"
    today = time.strftime("%Y-%m-%d", time.gmtime())
    decision = decide(results, workload["batch_size"])
    if decision is None:
        write_cache(cache, digest, {"precision": None, "figures": "", "seconds": seconds, "key": facts, "measured": today})
        return table[0], (f"{table[1]}; the precision trial's {seconds:g} s ran out before every candidate "
                          f"was timed{_warmups(results)}; a larger {ENV} measures again")
    policy, figures = decision
    steps = min(len(result["seconds"]) for result in results)
    candidates = candidates_of(results, workload["batch_size"])  # the cache's form of what decide weighed
    write_cache(cache, digest, {"precision": policy, "figures": _figures(figures, steps, workload), "seconds": seconds,
                                "key": facts, "measured": today, "candidates": candidates, "steps": steps})
    if budget_seconds is not None:
        policy, figures = pick(candidates, budget_seconds=budget_seconds, validation_shapes=validation_shapes)
    return policy, f"{MEASURED} {where}: {_figures(figures, steps, workload)}"


def _weighable(entry: dict, validation_shapes: int) -> bool:
    """Whether a cached answer keeps the figures a budget weighs: the candidates (since the budget's weighing)
    and, for a run that validates, their first validation calls (the key exists, even if not reached)."""
    candidates = entry.get("candidates")
    return bool(candidates) and (not validation_shapes or all("first_validation_s" in c for c in candidates))


def _figures(figures: str, steps: int, workload: dict) -> str:
    """A decision's figures with what was timed: "...; 3 timed steps each of width 128, ..."."""
    return f"{figures}; {steps} timed step{'s' if steps > 1 else ''} each of {describe(workload)}"


def _warmups(results) -> str:
    """", warm-up steps: float32 + XLA 41 s, mixed_bfloat16 not reached" from a trial's results, where it gave them."""
    if not any("warmup" in result for result in results):
        return ""
    return ", warm-up steps: " + ", ".join(
        f"{result['label']} {sum(result['warmup']):.0f} s" if result.get("warmup") else f"{result['label']} not reached"
        for result in results)


def _first_line(error) -> str:
    return (str(error).strip().splitlines() or [""])[0][:300]


def measure_training(workload: dict, policies, seconds: float, backend: str | None = None) -> list:
    """Times `policies` training `workload` in a child process on `backend` (None: KERAS_BACKEND's).

    The child prints a line per candidate (its label), per warm-up, per first validation call and
    per timed step; the parent reads what came before a failure or its limit (`seconds` +
    `START_SECONDS`), so a slow trial still counts the steps it timed. Each result also lists its
    warm-ups' seconds ("warmup") and its first validation call's ("validation").
    """
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
    if backend is not None:
        env["KERAS_BACKEND"] = backend
    job = json.dumps({"workload": workload, "policies": list(policies), "seconds": seconds})
    command = [sys.executable, "-m", CHILD, job]
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=seconds + START_SECONDS)
        out, err, failed = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as stopped:
        out, err, failed = _text(stopped.stdout), "", None
    labels = {}
    timed, warmups, validations = ({policy: [] for policy in policies} for _ in range(3))
    for line in out.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("policy") in timed:
            if "label" in record:
                labels[record["policy"]] = record["label"]
            if "seconds" in record:
                kept = warmups if record.get("warmup") else validations if record.get("validation") else timed
                kept[record["policy"]].append(float(record["seconds"]))
    if failed:
        lines = [line for line in err.splitlines() if line.strip()]
        raise TrialError(f"the trial's process exited with status {failed}: {lines[-1] if lines else 'no message'}")
    return [{"policy": policy, "label": labels.get(policy, policy), "seconds": timed[policy], "warmup": warmups[policy],
             "validation": validations[policy]} for policy in policies]


def _text(output) -> str:
    if output is None:
        return ""
    return output.decode(errors="replace") if isinstance(output, bytes) else output
