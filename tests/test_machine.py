"""Every machine-dependent default, each branch forced: the rules, then `keras-vit train` end to end.

CI runs on one kind of machine; users on all kinds. `keras_vit.machine.detect` is replaced by a
`Machine` of the branch under test, so a CPU without bfloat16 instructions also runs what a
GPU, a TPU or an AVX-512 BF16 CPU would pick, exports included.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import stat
import subprocess

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import backends, cli, export, machine, precision_trial, precision_workloads, train_options
from keras_vit.machine import Machine
from keras_vit.training import distribute

GIB = 2**30
AVX2 = frozenset({"avx", "avx2", "fma"})
AVX512_BF16 = frozenset({"avx2", "avx512f", "avx512_bf16"})
AMX = frozenset({"avx512f", "amx_tile", "amx_bf16"})


def _cpuinfo(tmp_path, flags):
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nmodel name\t: Fake CPU\nflags\t\t: fpu sse2 {' '.join(sorted(flags))}\n\n")
    return str(path)


# --- the rules, one branch at a time -------------------------------------------------------

# The table's answers (conftest.py turns the precision trial off; the trial's branches are below).
@pytest.mark.backends("tensorflow", "jax", "torch")
@pytest.mark.parametrize("forced, expected", [
    (Machine("tpu"), "mixed_bfloat16"),
    (Machine("gpu", 9), "mixed_bfloat16"),
    (Machine("gpu", 8), "mixed_bfloat16"),
    (Machine("gpu", 7), "mixed_float16"),
    # avx512_bf16 without AMX: bfloat16 on PyTorch and TensorFlow (a Zen 4, issue 54), float32 + XLA on JAX.
    (Machine("cpu", cpu_flags=AVX512_BF16), {"torch": "mixed_bfloat16", "tensorflow": "mixed_bfloat16"}),
    (Machine("cpu", cpu_flags=AVX2), "float32"),
    (Machine("cpu"), "float32"),
])
def test_precision_per_branch(forced, expected):
    if isinstance(expected, dict):
        expected = expected.get(keras.backend.backend(), "float32")
    assert machine.default_precision(forced) == expected
    assert distribute.resolve_precision("auto", forced) == expected
    assert distribute.resolve_precision("mixed_float16", forced) == "mixed_float16"  # explicit wins


# AMX: by Keras backend and token width (None: unknown).
@pytest.mark.parametrize("backend, width, expected", [
    ("torch", 128, "mixed_bfloat16"),
    ("torch", None, "mixed_bfloat16"),
    ("tensorflow", machine.TENSORFLOW_AMX_MIN_WIDTH, "mixed_bfloat16"),
    ("tensorflow", 768, "mixed_bfloat16"),
    ("tensorflow", machine.TENSORFLOW_AMX_MIN_WIDTH - 1, "float32"),
    ("tensorflow", None, "float32"),
    ("jax", 768, "float32"),
])
def test_precision_on_amx_by_backend_and_width(backend, width, expected):
    precision, reason = machine.precision_choice(Machine("cpu", cpu_flags=AMX), backend, width)
    assert precision == expected
    assert "AMX" in reason and (backend != "tensorflow" or str(width if width is not None else "unknown") in reason)
    assert "no precision trial" in reason  # conftest.py: KERAS_VIT_PRECISION_TRIAL=0
    # The same CPU without AMX (AVX-512 BF16 only): bfloat16 on PyTorch and TensorFlow at every width, float32 on JAX.
    zen4 = machine.precision_choice(Machine("cpu", cpu_flags=AVX512_BF16), backend, width)
    assert zen4[0] == ("float32" if backend == "jax" else "mixed_bfloat16") and "avx512_bf16" in zen4[1]


def test_the_current_backend_is_the_rules_default():
    amx = Machine("cpu", cpu_flags=AMX)
    assert machine.default_precision(amx, width=768) == machine.default_precision(amx, keras.backend.backend(), 768)
    assert distribute.choose_precision("auto", amx, 768) == machine.precision_choice(amx, keras.backend.backend(), 768)
    assert distribute.choose_precision("float32", amx, 768) == ("float32", "given")


# jit_compile per backend: (CPU float32, CPU mixed_bfloat16, CPU with collectives, GPU mixed)
JIT_DEFAULTS = {"tensorflow": (True, False, False, True), "jax": (True, True, True, True),
                "torch": (False, False, False, False)}


@pytest.mark.backends("tensorflow", "jax", "torch")
def test_jit_compile_per_branch():
    expected = JIT_DEFAULTS[keras.backend.backend()]
    cpu, gpu = Machine("cpu", cpu_flags=AVX512_BF16), Machine("gpu", 8)
    got = (machine.default_jit_compile(cpu, "float32", False), machine.default_jit_compile(cpu, "mixed_bfloat16", False),
           machine.default_jit_compile(cpu, "float32", True), machine.default_jit_compile(gpu, "mixed_bfloat16", False))
    assert got == expected
    assert distribute.default_jit_compile("float32", distribute.get_strategy("default"), cpu) is expected[0]


def test_check_jit_compile_refuses_xla_collectives_on_cpu_only():
    class TwoReplicas:
        num_replicas_in_sync = 2

    with pytest.raises(ValueError, match="jit_compile=True cannot be used"):
        distribute.check_jit_compile(True, TwoReplicas(), Machine("cpu"))
    distribute.check_jit_compile(True, TwoReplicas(), Machine("gpu", 8))  # GPUs all-reduce under XLA


@pytest.mark.backends("tensorflow", "jax", "torch")
def test_detect_reads_the_cpu_flags_and_memory(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no nvidia-smi
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:   12582912 kB\n")
    found = machine.detect(cpuinfo=_cpuinfo(tmp_path, AVX512_BF16), meminfo=str(meminfo))
    assert found.cpu_flags >= AVX512_BF16 and found.accelerator == "cpu"
    assert found.memory == (12 * GIB, "MemAvailable in /proc/meminfo")
    unknown = machine.detect(cpuinfo=str(tmp_path / "missing"), meminfo=str(tmp_path / "missing"))
    assert unknown.cpu_flags == frozenset() and unknown.memory[0] is None


def test_memory_branches(tmp_path, monkeypatch):
    # A GPU that nvidia-smi reports: its free memory; hidden by CUDA_VISIBLE_DEVICES: the host's.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 40960\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemAvailable:   1048576 kB\n")
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert machine.available_memory(str(meminfo)) == (40 * GIB, "free memory of GPU 0 (nvidia-smi)")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert machine.available_memory(str(meminfo)) == (GIB, "MemAvailable in /proc/meminfo")
    assert machine.available_memory(str(tmp_path / "missing")) == (None, "no memory figure on this machine")


def test_memory_check_uses_the_machines_figure(monkeypatch):
    from keras_vit.training import memory

    blocks = [memory.Block(3137, 128, 4, 256)] * 6
    monkeypatch.setattr(machine, "detect", lambda: Machine(memory=(16 * GIB, "forced")))
    with pytest.raises(ValueError, match=r"exceeds the 16.0 GiB available \(forced\)"):
        memory.check_training_memory(blocks, 800_000, 256, 224, 4)
    monkeypatch.setattr(machine, "detect", lambda: Machine())  # no figure: no refusal on a guess
    assert memory.check_training_memory(blocks, 800_000, 256, 224, 4).total > 16 * GIB


def test_machine_refuses_what_it_cannot_be():
    with pytest.raises(ValueError, match="accelerator='npu'"):
        Machine("npu")
    with pytest.raises(ValueError, match="gpu_capability"):
        Machine("gpu")


# TensorFlow's oneDNN kernels: TensorFlow turns them on only on CPUs with avx512_vnni, avx512_bf16 or
# AMX; on an avx512f Xeon and an AVX2-only EPYC without them it ran Eigen's, slower.
AVX512F = frozenset({"avx2", "fma", "avx512f"})


@pytest.mark.parametrize("flags, arch, environ, loaded, value, why", [
    (AVX512F, "x86_64", {}, False, "1", "on: keras_vit set TF_ENABLE_ONEDNN_OPTS=1"),
    (AVX512F, "AMD64", {}, False, "1", "on: keras_vit set"),
    (AVX512F, "x86_64", {"TF_ENABLE_ONEDNN_OPTS": "0"}, False, None, "TF_ENABLE_ONEDNN_OPTS=0, as set"),
    (AVX512F, "x86_64", {"TF_ENABLE_ONEDNN_OPTS": "1"}, True, None, "TF_ENABLE_ONEDNN_OPTS=1, as set"),
    (AVX512F, "x86_64", {}, True, None, "off: TensorFlow was imported before keras_vit"),
    (AVX512_BF16, "x86_64", {}, False, None, "on, TensorFlow's own setting on a CPU with avx512_bf16"),
    (AMX, "x86_64", {}, False, None, "on, TensorFlow's own setting on a CPU with amx_tile"),
    (frozenset({"avx2", "fma", "avx512f", "avx512_vnni"}), "x86_64", {}, False, None, "with avx512_vnni"),
    (AVX2, "x86_64", {}, False, "1", "on: keras_vit set TF_ENABLE_ONEDNN_OPTS=1"),
    (AVX2, "x86_64", {}, True, None, "off: TensorFlow was imported before keras_vit"),
    (frozenset({"sse4_2", "avx"}), "x86_64", {}, False, None, "not measured on x86 CPUs without avx2 or avx512f"),
    (frozenset(), "aarch64", {}, False, None, "TensorFlow's own setting on a aarch64 CPU"),
])
def test_onednn_is_turned_on_only_where_tensorflow_leaves_it_off_and_it_was_measured(flags, arch, environ, loaded, value, why):
    got, reason = machine.onednn_choice(flags, arch, environ, loaded)
    assert got == value
    assert why in reason


def test_prepare_tensorflow_sets_the_variable_only_in_its_branch(tmp_path):
    cpuinfo = _cpuinfo(tmp_path, AVX512F)
    environ = {}
    why = machine.prepare_tensorflow(environ, {}, cpuinfo=cpuinfo, arch="x86_64")
    assert environ == {"TF_ENABLE_ONEDNN_OPTS": "1"} and why.startswith("on: keras_vit set")
    for preset in ({"TF_ENABLE_ONEDNN_OPTS": "0"}, {}):
        environ = dict(preset)
        machine.prepare_tensorflow(environ, {"tensorflow": object()}, cpuinfo=cpuinfo, arch="x86_64")
        assert environ == preset  # the user's setting, or TensorFlow already loaded: untouched
    environ = {}
    machine.prepare_tensorflow(environ, {}, cpuinfo=_cpuinfo(tmp_path, AVX512_BF16), arch="x86_64")
    assert environ == {}


def test_import_keras_vit_first_sets_onednn_as_the_rule_says(monkeypatch):
    # A fresh process, as a user's script or the CLI starts: keras_vit imported before TensorFlow.
    code = "import os, keras_vit; print(os.environ.get('TF_ENABLE_ONEDNN_OPTS')); print(keras_vit.machine.ONEDNN)"
    environ = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    lines = subprocess.run([os.sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env=environ).stdout.splitlines()
    import platform

    value, why = machine.onednn_choice(machine.read_cpuinfo()[1], platform.machine(), {}, False)
    assert lines == [str(value), why]
    # The run header says it on a CPU, after the compiler.
    monkeypatch.setattr(machine, "ONEDNN", "on: forced")
    assert backends.compilation(True) == "XLA on, Keras backend tensorflow; oneDNN on: forced"


# --- the precision trial: where the table cannot know, measured (timings injected) ----------

ZEN4 = Machine("cpu", cpu_flags=AVX512_BF16, cpu_name="AMD EPYC 9R14")
TI4 = precision_workloads.training_workload({"patch_size": 4, "hidden_size": 192, "num_layers": 12, "num_heads": 3,
                                             "mlp_dim": 768}, image_size=32, channels=3, batch_size=128)


def _timings(float32, bfloat16, steps=3, first_steps=None, first_validations=None):
    """A timing function that returns fixed seconds per step (float32's, mixed_bfloat16's) and records its calls.

    `first_steps`, `first_validations`: (float32's, mixed_bfloat16's) seconds of the warm-up and of the first
    validation call, as a child reports them (None: not reached); None: none reported.
    """
    calls = []

    def measure(workload, policies, seconds):
        calls.append((workload, tuple(policies), seconds))
        per_step = {"float32": float32, "mixed_bfloat16": bfloat16}
        first = dict(zip(("float32", "mixed_bfloat16"), first_steps or ()))
        validation = dict(zip(("float32", "mixed_bfloat16"), first_validations or ()))
        return [{"policy": policy, "label": policy, "seconds": [per_step[policy]] * steps,
                 **({"warmup": [first[policy]]} if first else {}),
                 **({"validation": [validation[policy]] if validation[policy] is not None else []} if validation else {})}
                for policy in policies]

    measure.calls = calls
    return measure


def _measured_on_zen4(monkeypatch):
    """This machine taken for a Zen 4, its training trials timed by `_timings(0.2, 0.1)` (bfloat16 twice as fast)."""
    measure = _timings(0.2, 0.1)
    monkeypatch.setattr(machine, "detect", lambda *args, **kwargs: ZEN4)
    monkeypatch.setattr(precision_trial, "measure_training", lambda workload, policies, seconds, backend=None:
                        measure(workload, policies, seconds))
    return measure


@pytest.fixture
def trial_on(tmp_path, monkeypatch):
    """The trial on (30 s cap), its cache in a fresh folder; returns the cache file."""
    monkeypatch.setenv(precision_trial.ENV, "30")
    monkeypatch.setenv(precision_trial.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache" / precision_trial.CACHE_FILENAME


@pytest.mark.parametrize("forced, trial", [
    (Machine("cpu", cpu_flags=AMX), True),           # AMX: the backend and model decide, so measured
    (Machine("cpu", cpu_flags=AVX512_BF16), True),   # avx512_bf16 only (Zen 4): measured
    (Machine("cpu", cpu_flags=AVX2 | {"avx512f"}), False),  # bfloat16 emulated (this CI's Xeon): the table
    (Machine("cpu"), False),
    (Machine("gpu", 8, cpu_flags=AMX), False),        # a GPU computes: the table, whatever the host CPU
    (Machine("tpu", cpu_flags=AVX512_BF16), False),
])
def test_the_trial_runs_only_where_the_table_cannot_know(forced, trial, trial_on):
    measure = _timings(0.2, 0.1)
    policy, reason = machine.precision_choice(forced, "tensorflow", 192, TI4, measure)
    assert machine.needs_trial(forced) is trial
    assert len(measure.calls) == int(trial)
    if trial:
        assert measure.calls[0] == (TI4, ("float32", "mixed_bfloat16"), 30.0)
        assert (policy, reason.startswith("measured on this")) == ("mixed_bfloat16", True)
    else:
        assert (policy, reason) == machine.table_precision(forced, "tensorflow", 192)
        assert not trial_on.exists()  # nothing measured, nothing cached


@pytest.mark.parametrize("float32, bfloat16, expected", [
    (0.20, 0.10, "mixed_bfloat16"),  # 2x: bfloat16
    (0.10, 0.20, "float32"),
    (0.100, 0.096, "float32"),       # 4% faster: within the margin, the exact one
    (0.100, 0.094, "mixed_bfloat16"),  # 6% faster
])
def test_the_trial_picks_the_fastest_beyond_the_margin(float32, bfloat16, expected, trial_on):
    policy, reason = precision_trial.choose(ZEN4, "torch", TI4, ("float32", "table"), measure=_timings(float32, bfloat16))
    assert policy == expected
    figures = {label: float(ips) for label, ips in re.findall(r"(float32|mixed_bfloat16) (\d+) img/s", reason)}
    assert figures == {"float32": round(128 / float32), "mixed_bfloat16": round(128 / bfloat16)}
    assert reason.startswith("measured on this avx512_bf16 CPU: ")
    assert reason.endswith("; 3 timed steps each of width 192, 12 layers, 64 tokens, batch 128")
    assert reason.split(": ", 1)[1].startswith(expected)  # the chosen first


# float32 + XLA 4% faster a step than mixed_bfloat16 without XLA, but 30 s of compilation against 3 s of tracing.
XLA_FIRST = dict(float32=0.100, bfloat16=0.104, first_steps=(30.0, 3.0))


@pytest.mark.parametrize("budget, expected", [
    (None, "float32"),            # speed alone: within the margin, the exact one
    (20, "mixed_bfloat16"),       # float32's first step outlasts the budget
    (120, "mixed_bfloat16"),      # 1231 img/s x 117 s against 1280 x 90 s: 1.25x the images
    (3600, "float32"),            # 1280 x 3570 s against 1231 x 3597 s
])
def test_a_budgeted_run_weighs_each_candidates_first_step_against_its_speed(budget, expected, trial_on):
    """Issue 54: a run's budget pays for XLA's compilation, so a short one can train more images without it."""
    policy, reason = precision_trial.choose(ZEN4, "tensorflow", TI4, ("float32", "table"), budget_seconds=budget,
                                            measure=_timings(**XLA_FIRST))
    assert policy == expected
    assert reason.split(": ", 1)[1].startswith(expected)
    assert ("weighed over the run's budget" in reason) is (budget is not None)
    if budget is not None:
        assert f"budget of {budget:g} s" in reason and "after a first step of" in reason


def test_the_cache_weighs_another_budget_without_measuring_again(trial_on):
    measure = _timings(**XLA_FIRST)
    assert precision_trial.choose(ZEN4, "tensorflow", TI4, ("float32", "table"), measure=measure)[0] == "float32"
    short = precision_trial.choose(ZEN4, "tensorflow", TI4, ("float32", "table"), measure=measure, budget_seconds=60)
    assert short[0] == "mixed_bfloat16" and len(measure.calls) == 1
    assert ", cached: mixed_bfloat16 1231 img/s after a first step of 3 s, float32 1280 img/s after 30 s; weighed over " \
           "the run's budget of 60 s" in short[1]
    # A cache written before the weighing (no candidates) answers a run without a budget as it did;
    # a budgeted run measures again rather than answer by speed alone.
    cache = json.loads(trial_on.read_text())
    for entry in cache["entries"].values():
        del entry["candidates"], entry["steps"]
    trial_on.write_text(json.dumps(cache))
    assert precision_trial.choose(ZEN4, "tensorflow", TI4, ("float32", "table"), measure=measure)[0] == "float32"
    assert len(measure.calls) == 1
    assert precision_trial.choose(ZEN4, "tensorflow", TI4, ("float32", "table"), measure=measure,
                                  budget_seconds=60)[0] == "mixed_bfloat16"
    assert len(measure.calls) == 2


# The same, with XLA's compilation of the first validation call: 6 s against 0.5 s.
XLA_FIRST_VALIDATED = dict(XLA_FIRST, first_validations=(6.0, 0.5))


@pytest.mark.parametrize("shapes, expected", [
    (0, "float32"),         # no validation: 1231 img/s x 357 s against 1280 x 330 s, 1.04x: within the margin
    (1, "mixed_bfloat16"),  # a whole batch: 1231 x 356.5 s against 1280 x 324 s, 1.06x
    (2, "mixed_bfloat16"),  # and a partial one: 1231 x 356 s against 1280 x 318 s, 1.08x
])
def test_a_budgeted_run_weighs_its_validations_compilation_too(shapes, expected, trial_on):
    """Issue 54: under XLA a run's first validation pass compiles at each batch shape, and its budget pays for it."""
    measure = _timings(**XLA_FIRST_VALIDATED)
    policy, reason = precision_trial.choose(ZEN4, "tensorflow", TI4, ("float32", "table"), measure=measure,
                                            budget_seconds=360, validation_shapes=shapes)
    assert policy == expected
    first_calls = {0: "float32 1280 img/s after a first step of 30 s, mixed_bfloat16 1231 img/s after 3 s",
                   1: "mixed_bfloat16 1231 img/s after first calls of 4 s, float32 1280 img/s after 36 s",
                   2: "mixed_bfloat16 1231 img/s after first calls of 4 s, float32 1280 img/s after 42 s"}[shapes]
    assert first_calls in reason
    assert ("validation" in reason) is bool(shapes)
    # The cache keeps the validation call's figure: another run weighs it without a trial.
    entry = next(iter(json.loads(trial_on.read_text())["entries"].values()))
    assert [c["first_validation_s"] for c in entry["candidates"]] == [6.0, 0.5]
    assert precision_trial.choose(ZEN4, "tensorflow", TI4, ("float32", "table"), measure=measure,
                                  budget_seconds=360, validation_shapes=2)[0] == "mixed_bfloat16"
    assert len(measure.calls) == 1


def test_a_cached_answer_without_the_validation_call_is_measured_again_for_a_run_that_validates(trial_on):
    """An entry written before validation calls were timed weighs a run without validation; one with validation
    measures again rather than leave the validation's compilation out."""
    old = _timings(**XLA_FIRST)  # no validation figures reported
    assert precision_trial.choose(ZEN4, "tensorflow", TI4, ("float32", "table"), measure=old, budget_seconds=360)[0] \
        == "float32"
    assert precision_trial.choose(ZEN4, "tensorflow", TI4, ("float32", "table"), measure=old, budget_seconds=360)[0] \
        == "float32" and len(old.calls) == 1
    cache = json.loads(trial_on.read_text())
    for entry in cache["entries"].values():
        for candidate in entry["candidates"]:
            del candidate["first_validation_s"]
    trial_on.write_text(json.dumps(cache))
    new = _timings(**XLA_FIRST_VALIDATED)
    assert precision_trial.choose(ZEN4, "tensorflow", TI4, ("float32", "table"), measure=new, budget_seconds=360,
                                  validation_shapes=1)[0] == "mixed_bfloat16"
    assert len(new.calls) == 1
    # A validation call the trial did not reach (its cap ran out): weighed by speed alone, as a missing first step.
    unreached = _timings(**dict(XLA_FIRST_VALIDATED, first_validations=(6.0, None)))
    candidates = precision_trial.candidates_of(unreached(TI4, precision_trial.POLICIES, 30), 128)
    assert precision_trial.pick(candidates, budget_seconds=360, validation_shapes=1)[1] == \
        "float32 1280 img/s, mixed_bfloat16 1231 img/s"


def test_validation_shapes_counts_a_whole_and_a_partial_batch():
    assert [precision_trial.validation_shapes(n, 256) for n in (None, 0, 100, 256, 600)] == [0, 0, 1, 1, 2]
    assert precision_trial.validation_shapes(600, 256, whole_batches=True) == 1


def test_a_trial_without_first_steps_is_weighed_by_speed_alone(trial_on):
    """An in-process trial reports no warm-ups: nothing to weigh a budget with."""
    policy, reason = precision_trial.choose(ZEN4, "tensorflow", TI4, ("float32", "table"), budget_seconds=60,
                                            measure=_timings(0.100, 0.104))
    assert policy == "float32" and "budget" not in reason


def test_a_trial_that_times_too_little_falls_back_to_the_table_and_is_cached_until_the_cap_grows(trial_on, monkeypatch):
    empty = _timings(0.1, 0.1, steps=0)
    table = ("float32", "the table's why")
    policy, reason = precision_trial.choose(ZEN4, "tensorflow", TI4, table, measure=empty)
    assert (policy, reason) == ("float32", "the table's why; the precision trial's 30 s ran out before every "
                                "candidate was timed; a larger KERAS_VIT_PRECISION_TRIAL measures again")
    # The next run with the same cap does not pay for it again; a larger cap measures.
    assert precision_trial.choose(ZEN4, "tensorflow", TI4, table, measure=empty)[1].endswith(
        "timed too little in its 30 s; cached, a larger KERAS_VIT_PRECISION_TRIAL measures again")
    assert len(empty.calls) == 1
    monkeypatch.setenv(precision_trial.ENV, "60")
    assert precision_trial.choose(ZEN4, "tensorflow", TI4, table, measure=_timings(0.2, 0.1))[0] == "mixed_bfloat16"


def test_a_trial_out_of_time_says_what_its_warm_ups_took(trial_on):
    def slow(workload, policies, seconds):
        return [{"policy": "float32", "label": "float32 + XLA", "seconds": [], "warmup": [41.2]},
                {"policy": "mixed_bfloat16", "label": "mixed_bfloat16", "seconds": [], "warmup": []}]

    assert precision_trial.choose(ZEN4, "tensorflow", TI4, ("float32", "table"), measure=slow)[1] == (
        "table; the precision trial's 30 s ran out before every candidate was timed, warm-up steps: float32 + XLA 41 s, "
        "mixed_bfloat16 not reached; a larger KERAS_VIT_PRECISION_TRIAL measures again")


def test_a_failed_trial_falls_back_to_the_table_and_says_why(trial_on):
    def crashing(workload, policies, seconds):
        raise precision_trial.TrialError("the trial's process exited with status 1: MemoryError")

    policy, reason = precision_trial.choose(ZEN4, "tensorflow", TI4, ("float32", "table"), measure=crashing)
    assert (policy, reason) == ("float32", "table; the precision trial failed: TrialError: the trial's process "
                                "exited with status 1: MemoryError")
    assert not trial_on.exists()  # a failure is not cached: the next run tries again


def test_the_trial_off_is_the_table(trial_on, monkeypatch):
    monkeypatch.setenv(precision_trial.ENV, "0")
    measure = _timings(0.1, 0.2)  # float32 would win a trial; the table answers bfloat16 here
    assert machine.precision_choice(ZEN4, "tensorflow", 192, TI4, measure) == (
        "mixed_bfloat16",
        machine.table_precision(ZEN4, "tensorflow", 192)[1] + "; no precision trial: KERAS_VIT_PRECISION_TRIAL=0")
    assert not measure.calls
    monkeypatch.setenv(precision_trial.ENV, "soon")
    with pytest.raises(ValueError, match="Invalid KERAS_VIT_PRECISION_TRIAL='soon'"):
        machine.precision_choice(ZEN4, "tensorflow", 192, TI4, measure)


# --- its cache --------------------------------------------------------------------------------

def test_the_cache_answers_the_second_run(trial_on):
    measure = _timings(0.2, 0.1)
    first = precision_trial.choose(ZEN4, "torch", TI4, ("float32", "table"), measure=measure)
    second = precision_trial.choose(ZEN4, "torch", TI4, ("float32", "table"), measure=measure)
    assert len(measure.calls) == 1 and first[0] == second[0] == "mixed_bfloat16"
    assert re.fullmatch(r"measured on this avx512_bf16 CPU on \d{4}-\d\d-\d\d, cached: " + re.escape(first[1].split(": ", 1)[1]),
                        second[1]), second[1]
    # Another backend, model shape, batch or CPU is another entry: measured again.
    for other in [("tensorflow", TI4, ZEN4), ("torch", {**TI4, "batch_size": 64}, ZEN4),
                  ("torch", {**TI4, "num_layers": 6}, ZEN4),
                  ("torch", TI4, Machine("cpu", cpu_flags=AVX512_BF16, cpu_name="AMD EPYC 9R45")),
                  ("torch", TI4, Machine("cpu", cpu_flags=AMX, cpu_name="AMD EPYC 9R14"))]:
        backend, workload, forced = other
        precision_trial.choose(forced, backend, workload, ("float32", "table"), measure=measure)
    assert len(measure.calls) == 6
    entries = json.loads(trial_on.read_text())["entries"]
    assert len(entries) == 6 and all(entry["key"]["cores"] == os.cpu_count() for entry in entries.values())
    assert {entry["key"]["versions"]["keras"] for entry in entries.values()} == {keras.__version__}


@pytest.mark.parametrize("content", ["{not json", "[]", '{"version": 1}', '{"version": 99, "entries": {}}'])
def test_a_corrupt_cache_is_ignored_with_a_warning_and_rewritten(content, trial_on):
    trial_on.parent.mkdir()
    trial_on.write_text(content)
    measure = _timings(0.2, 0.1)
    with pytest.warns(UserWarning, match="Ignoring the precision trial cache"):
        assert precision_trial.choose(ZEN4, "torch", TI4, ("float32", "table"), measure=measure)[0] == "mixed_bfloat16"
    assert len(measure.calls) == 1
    assert json.loads(trial_on.read_text())["version"] == precision_trial.CACHE_VERSION  # a valid cache again
    assert os.listdir(trial_on.parent) == [precision_trial.CACHE_FILENAME]  # written atomically: no temporary left


def test_a_corrupt_cache_entry_is_measured_again(trial_on):
    measure = _timings(0.2, 0.1)
    precision_trial.choose(ZEN4, "torch", TI4, ("float32", "table"), measure=measure)
    data = json.loads(trial_on.read_text())
    (digest,) = data["entries"]
    data["entries"][digest]["precision"] = "float8"
    trial_on.write_text(json.dumps(data))
    with pytest.warns(UserWarning, match="Ignoring 1 corrupt entries"):
        precision_trial.choose(ZEN4, "torch", TI4, ("float32", "table"), measure=measure)
    assert len(measure.calls) == 2


def test_an_unwritable_cache_warns_and_still_answers(tmp_path, monkeypatch):
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setenv(precision_trial.ENV, "30")
    monkeypatch.setenv(precision_trial.CACHE_ENV, str(blocker / "cache"))  # a folder inside a file: cannot exist
    with pytest.warns(UserWarning, match="Could not cache the precision trial's answer"):
        assert precision_trial.choose(ZEN4, "torch", TI4, ("float32", "t"), measure=_timings(0.2, 0.1))[0] == "mixed_bfloat16"


def test_the_cache_folder(monkeypatch):
    assert precision_trial.cache_file({"KERAS_VIT_CACHE": "/k", "XDG_CACHE_HOME": "/x", "HOME": "/h"}) == "/k/precision.json"
    assert precision_trial.cache_file({"XDG_CACHE_HOME": "/x", "HOME": "/h"}) == "/x/keras_vit/precision.json"
    assert precision_trial.cache_file({"HOME": "/h"}) == "/h/.cache/keras_vit/precision.json"


# --- the timing: alternating, capped ----------------------------------------------------------

class FakeClock:
    """A clock that each step advances by its own duration."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def step(self, name, seconds, order):
        def run():
            order.append(name)
            self.now += seconds
        return run


def test_time_alternating_warms_up_alternates_and_stops_at_the_cap():
    clock, order = FakeClock(), []
    steps = {"a": clock.step("a", 1.0, order), "b": clock.step("b", 2.0, order)}
    timed = precision_trial.time_alternating(steps, 100, rounds=3, clock=clock)
    assert order == ["a", "b", "a", "b", "b", "a", "a", "b"]  # warm-up each, then A B, B A, A B
    assert timed == {"a": [1.0, 1.0, 1.0], "b": [2.0, 2.0, 2.0]}
    # A cap of 8 s: warm-ups (3 s) and a round (3 s); a round that would end past the cap does not start...
    clock, order = FakeClock(), []
    steps = {"a": clock.step("a", 1.0, order), "b": clock.step("b", 2.0, order)}
    assert precision_trial.time_alternating(steps, 8, rounds=5, clock=clock) == {"a": [1.0], "b": [2.0]}
    assert clock.now == 6.0
    # ...and warm-ups past the cap leave no timed step: the trial is inconclusive.
    clock, order = FakeClock(), []
    steps = {"a": clock.step("a", 5.0, order), "b": clock.step("b", 5.0, order)}
    assert precision_trial.time_alternating(steps, 8, clock=clock) == {"a": [], "b": []}
    # A warm-up does not start past the cap: the child ends instead of compiling what it cannot time.
    clock, order = FakeClock(), []
    steps = {"a": clock.step("a", 5.0, order), "b": clock.step("b", 5.0, order)}
    assert precision_trial.time_alternating(steps, 4, clock=clock) == {"a": [], "b": []} and order == ["a"]
    # `once` (a first validation call): right after each candidate's warm-up, reported on its own, not in the
    # rounds; not made for a candidate whose warm-up the cap left out.
    clock, order, reports = FakeClock(), [], []
    steps = {"a": clock.step("a", 1.0, order), "b": clock.step("b", 2.0, order)}
    once = {"a": clock.step("A", 0.5, order), "b": clock.step("B", 0.25, order)}
    timed = precision_trial.time_alternating(steps, 100, rounds=1, once=once, clock=clock,
                                             report=lambda *report: reports.append(report))
    assert order == ["a", "A", "b", "B", "a", "b"] and timed == {"a": [1.0], "b": [2.0]}
    assert reports == [("a", 1.0, "warmup"), ("a", 0.5, "once"), ("b", 2.0, "warmup"), ("b", 0.25, "once"),
                       ("a", 1.0, None), ("b", 2.0, None)]
    clock, order = FakeClock(), []
    steps = {"a": clock.step("a", 5.0, order), "b": clock.step("b", 5.0, order)}
    precision_trial.time_alternating(steps, 4, once={"a": clock.step("A", 1.0, order), "b": clock.step("B", 1.0, order)},
                                     clock=clock)
    assert order == ["a"]
    assert precision_trial.decide([{"policy": p, "label": p, "seconds": []} for p in "ab"], 8) is None


# --- the trial's own timing functions: a training trial's child process, an inference trial ---

def _completed(stdout, returncode=0, stderr=""):
    return subprocess.CompletedProcess([], returncode, stdout=stdout, stderr=stderr)


def test_measure_training_reads_the_childs_lines(monkeypatch):
    lines = [{"policy": "float32", "label": "float32 + XLA"}, {"policy": "mixed_bfloat16", "label": "mixed_bfloat16"},
             {"policy": "float32", "seconds": 9.0, "warmup": True}, {"policy": "float32", "seconds": 1.5, "validation": True},
             {"policy": "mixed_bfloat16", "seconds": 4.0, "warmup": True},
             {"policy": "float32", "seconds": 0.5}, {"policy": "mixed_bfloat16", "seconds": 0.25}]
    seen = {}

    def run(command, **kwargs):
        seen.update(command=command, **kwargs)
        return _completed("a log line\n" + "\n".join(json.dumps(line) for line in lines) + "\n")

    monkeypatch.setattr(subprocess, "run", run)
    results = precision_trial.measure_training(TI4, precision_trial.POLICIES, 20, backend="jax")
    assert results == [{"policy": "float32", "label": "float32 + XLA", "seconds": [0.5], "warmup": [9.0], "validation": [1.5]},
                       {"policy": "mixed_bfloat16", "label": "mixed_bfloat16", "seconds": [0.25], "warmup": [4.0],
                        "validation": []}]
    assert seen["command"][1:3] == ["-m", "keras_vit.training.precision_child"]
    assert json.loads(seen["command"][3]) == {"workload": TI4, "policies": list(precision_trial.POLICIES), "seconds": 20}
    assert seen["env"]["KERAS_BACKEND"] == "jax" and seen["timeout"] == 20 + precision_trial.START_SECONDS

    # Stopped at its limit: the steps it timed still count. Failed: the error's last line.
    def too_slow(command, **kwargs):
        raise subprocess.TimeoutExpired(command, kwargs["timeout"], output=json.dumps(lines[5]).encode() + b"\n")

    monkeypatch.setattr(subprocess, "run", too_slow)
    assert [r["seconds"] for r in precision_trial.measure_training(TI4, precision_trial.POLICIES, 20)] == [[0.5], []]
    monkeypatch.setattr(subprocess, "run", lambda command, **kwargs: _completed("", 1, "Traceback\nMemoryError: oom\n"))
    with pytest.raises(precision_trial.TrialError, match="exited with status 1: MemoryError: oom"):
        precision_trial.measure_training(TI4, precision_trial.POLICIES, 20)


def test_the_child_prints_a_line_per_label_and_timed_step(monkeypatch, capsys):
    from keras_vit.training import precision_child

    calls = []
    monkeypatch.setattr(precision_child, "training_steps", lambda workload, policies: (
        {p: (lambda p=p: calls.append(p)) for p in policies}, {p: p.upper() for p in policies},
        {p: (lambda p=p: calls.append("validate " + p)) for p in policies}))
    assert precision_child.main([json.dumps({"workload": TI4, "policies": ["float32", "mixed_bfloat16"], "seconds": 60})]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[:2] == [{"policy": "float32", "label": "FLOAT32"}, {"policy": "mixed_bfloat16", "label": "MIXED_BFLOAT16"}]
    assert [(line["policy"], line.get("warmup", False), line.get("validation", False)) for line in lines[2:6]] == [
        ("float32", True, False), ("float32", False, True), ("mixed_bfloat16", True, False), ("mixed_bfloat16", False, True)]
    assert [line["policy"] for line in lines[6:]] == ["float32", "mixed_bfloat16", "mixed_bfloat16", "float32",
                                                      "float32", "mixed_bfloat16"]
    assert not any("warmup" in line or "validation" in line for line in lines[6:])
    assert len(calls) == 2 + 2 + 6 and calls.count("validate float32") == 1  # a warm-up and a validation each, 3 rounds


@pytest.mark.backends("tensorflow", "jax", "torch")
def test_training_steps_build_each_policy_and_restore_the_global_one():
    from keras_vit.training import optimizers, precision_child

    tiny = precision_workloads.training_workload({"patch_size": 4, "hidden_size": 8, "num_layers": 1, "num_heads": 2,
                                                  "mlp_dim": 16}, image_size=8, channels=1, batch_size=2,
                                                 jit_compile=False)
    steps, labels, validations = precision_child.training_steps(tiny, precision_trial.POLICIES)
    assert labels == {"float32": "float32", "mixed_bfloat16": "mixed_bfloat16"}  # jit_compile given: off for both
    assert keras.config.dtype_policy().name == "float32"
    for policy, step in steps.items():
        assert np.isfinite(float(np.ravel(step())[0]))
        assert np.isfinite(float(np.ravel(validations[policy]())[0]))  # the same model, evaluated
        model = step.__defaults__[0]
        assert model.get_layer("encoderblock_0").dtype_policy.name == policy
        # The run's optimizer, not Keras' AdamW (53 graph operations a variable against 25 on TensorFlow).
        assert isinstance(model.optimizer, optimizers.LayerDecayAdamW)
    lpft = precision_child.training_steps({**tiny, "recipe": "lpft"}, ["float32"])[0]["float32"].__defaults__[0]
    assert lpft.optimizer.layer_scales and min(lpft.optimizer.layer_scales.values()) < 1.0
    sgd = precision_child.training_steps({**tiny, "recipe": "finetune"}, ["float32"])[0]["float32"].__defaults__[0]
    assert isinstance(sgd.optimizer, keras.optimizers.SGD)
    default = precision_workloads.training_workload({**tiny, "num_layers": 1}, 8, 1, 2)  # jit_compile None: the backend's
    labels = precision_child.training_steps(default, precision_trial.POLICIES)[1]
    compiler = backends.current().COMPILER
    expected = {"tensorflow": {"float32": f"float32 + {compiler}", "mixed_bfloat16": "mixed_bfloat16"},
                "jax": {"float32": f"float32 + {compiler}", "mixed_bfloat16": f"mixed_bfloat16 + {compiler}"},
                "torch": {"float32": "float32", "mixed_bfloat16": "mixed_bfloat16"}}[keras.backend.backend()]
    assert labels == expected


# --- where `auto` is chosen: the run's plan and header, default_precision, predict ------------

def test_the_plan_times_the_runs_own_model_and_the_header_shows_the_figures(trial_on, monkeypatch):
    from keras_vit.training import plan as plan_lib

    measure = _measured_on_zen4(monkeypatch)
    config = plan_lib.TrainConfig(variant="tiny", image_size=28, model_overrides={"num_layers": 1}, batch_size=16,
                                  max_train_examples=32, run_dir=None, output_dir=None)
    plan = plan_lib.resolve(config)
    ((workload, _, _),) = measure.calls
    assert workload == precision_workloads.training_workload(plan.architecture, 28, plan.channels, 16, recipe="compact")
    # A recipe of the user's own is not one a child can rebuild by name: the default's optimizer stands in.
    own = dataclasses.replace(plan_lib.recipes.get_recipe("compact"), optimizer="sgd")
    assert plan_lib._named_recipe(own) is None
    assert plan_lib._named_recipe(dataclasses.replace(own, optimizer="adamw", learning_rate=1.0)) == "compact"
    assert (plan.precision, plan.jit_compile) == ("mixed_bfloat16", False)
    parts = train_options.header_parts(plan)
    assert parts["precision"] == (", precision mixed_bfloat16 (measured on this avx512_bf16 CPU: mixed_bfloat16 160 "
                                  "img/s, float32 80 img/s; 3 timed steps each of width 32, 1 layers, 49 tokens, "
                                  "batch 16)")
    assert parts["jit_compile"].startswith(", XLA off")
    # A given --jit-compile is timed as given; the second plan reads the cache.
    jit_on = plan_lib.resolve(dataclasses.replace(config, jit_compile=True))
    assert measure.calls[-1][0]["jit_compile"] is True and len(measure.calls) == 2
    plan_lib.resolve(config)
    assert len(measure.calls) == 2 and jit_on.precision == "mixed_bfloat16"


def test_a_budgeted_plan_passes_its_budget_to_the_trial(trial_on, monkeypatch):
    from keras_vit.training import plan as plan_lib

    measure = _timings(**XLA_FIRST_VALIDATED)
    monkeypatch.setattr(machine, "detect", lambda *args, **kwargs: ZEN4)
    monkeypatch.setattr(precision_trial, "measure_training", lambda workload, policies, seconds, backend=None:
                        measure(workload, policies, seconds))
    config = plan_lib.TrainConfig(variant="tiny", image_size=28, model_overrides={"num_layers": 1}, batch_size=16,
                                  max_train_examples=32, run_dir=None, output_dir=None, budget_seconds=90,
                                  validation_split=0.2)
    plan = plan_lib.resolve(config)
    assert plan.precision == "mixed_bfloat16"
    header = train_options.header_parts(plan)["precision"]
    assert "weighed over the run's budget of 90 s" in header
    # Its validation images (a whole batch of 16 and a partial one) compile twice within the budget.
    assert plan.validation.count() > 16 and plan.validation.count() % 16
    assert "a first validation call at each of 2 batch shapes" in header
    assert plan_lib.resolve(dataclasses.replace(config, budget_seconds=None)).precision == "float32"
    assert len(measure.calls) == 1  # the second plan weighed the cached figures


def _stem_checkpoint(path):
    """A .keras checkpoint of the conv stem + ViT, as `keras-vit pretrain --method dino` writes one for 32 px images."""
    from keras_vit.models import stems

    keras_vit.ViT(patch_size=1, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, input_shape=(32, 32, 3),
                  backbone=stems.conv_stem((8, 16), (2, 2)), include_top=False, preprocessing="unit").save(path)
    return str(path)


@pytest.mark.parametrize("start", ["scratch", "checkpoint"])
def test_the_trial_times_the_conv_stem_and_its_tokens_not_a_vit_on_pixels(trial_on, monkeypatch, tmp_path, start):
    """The model behind a conv stem reads the stem's cells as 1 px patches: a trial of a plain ViT on 1 px patches
    timed 1,024 tokens where the run's model has 16 (or 64) and chose its precision on that model."""
    from PIL import Image

    from keras_vit.training import plan as plan_lib
    from keras_vit.training import precision_child

    measure = _measured_on_zen4(monkeypatch)
    rng = np.random.default_rng(0)
    for name in ("cat", "dog"):
        (tmp_path / "data" / name).mkdir(parents=True)
        for i in range(16):
            Image.fromarray(rng.integers(0, 255, (32, 32, 3)).astype("uint8")).save(tmp_path / "data" / name / f"{i}.png")
    config = plan_lib.TrainConfig(dataset=str(tmp_path / "data"), batch_size=16, run_dir=None, output_dir=None,
                                  epochs=1)
    if start == "scratch":
        config = dataclasses.replace(config, stem="conv", model_overrides={"hidden_size": 16, "num_layers": 1,
                                                                            "num_heads": 2, "mlp_dim": 32})
    else:
        config = dataclasses.replace(config, weights=_stem_checkpoint(tmp_path / "stem.keras"))
    plan = plan_lib.resolve(config)
    ((workload, _, _),) = measure.calls
    stem = {"filters": [32, 64, 128, 128], "strides": [2, 2, 2, 1]} if start == "scratch" else {
        "filters": [8, 16], "strides": [2, 2]}
    tokens = 16 if start == "scratch" else 64
    assert (workload["stem"], workload["tokens"], workload["patch_size"]) == (stem, tokens, 1)
    assert "the conv stem, " + f"{tokens} tokens" in plan.precision_reason
    steps = precision_child.training_steps(workload, ["float32"])[0]
    timed = steps["float32"].__defaults__[0]
    assert tuple(timed.get_layer("embedding").grid_size) == (int(tokens ** 0.5),) * 2
    assert precision_workloads.training_workload(plan.architecture, 32, 3, 16) != workload  # no stem: another key


@pytest.mark.parametrize("start", ["scratch", "checkpoint"])
def test_a_hybrids_trial_times_its_resnet_stem_and_its_tokens_not_a_vit_on_pixels(trial_on, monkeypatch, tmp_path,
                                                                                   start):
    """A hybrid's ResNet feeds the encoder cells it reads as 1 px patches: a ViT on 1 px patches of its images would
    time 1,024 tokens here (50,176 at 224 px), and the width's stand-in (what the trial timed before) has no ResNet."""
    from keras_vit.training import plan as plan_lib
    from keras_vit.training import precision_child

    measure = _measured_on_zen4(monkeypatch)
    config = plan_lib.TrainConfig(variant="R_tiny", image_size=32, batch_size=16, max_train_examples=32,
                                  run_dir=None, output_dir=None)
    if start == "checkpoint":
        path = str(tmp_path / "hybrid.keras")
        keras_vit.ViT("R_tiny", include_top=False, preprocessing="unit").save(path)
        config = dataclasses.replace(config, variant=None, image_size=None, weights=path)
    plan = plan_lib.resolve(config)
    ((workload, _, _),) = measure.calls
    assert (workload["stem"], workload["tokens"], workload["patch_size"]) == ({"resnet": [1], "width": 32}, 64, 1)
    assert "the ResNet stem (1,), 64 tokens" in plan.precision_reason
    steps = precision_child.training_steps(workload, ["float32"])[0]
    timed = steps["float32"].__defaults__[0]
    assert tuple(timed.get_layer("embedding").grid_size) == (8, 8)
    assert timed.get_layer("resnet").count_params() == plan_lib.build_model(plan).get_layer("resnet").count_params()


def test_a_custom_backbones_trial_times_the_widths_stand_in(trial_on, monkeypatch):
    """A Keras model given as the backbone cannot be built again in the trial's child: the width's stand-in is timed."""
    from keras_vit.models import stems
    from keras_vit.training import plan as plan_lib

    measure = _measured_on_zen4(monkeypatch)
    config = plan_lib.TrainConfig(image_size=32, backbone=lambda: stems.conv_stem((8,), (4,)),
                                  model_overrides={"patch_size": 1, "hidden_size": 32, "num_layers": 1, "num_heads": 2,
                                                   "mlp_dim": 64},
                                  batch_size=16, max_train_examples=32, run_dir=None, output_dir=None)
    plan_lib.resolve(config)
    ((workload, _, _),) = measure.calls
    assert workload == precision_workloads.width_workload(32), workload


def test_a_resumed_run_keeps_its_backups_precision_without_a_trial(trial_on, monkeypatch, tmp_path):
    from keras_vit.training import plan as plan_lib
    from keras_vit.training import run_dir, run_state

    measure = _measured_on_zen4(monkeypatch)  # a trial would pick mixed_bfloat16
    run_state.commit(tmp_path / "run" / run_dir.BACKUP, {"fingerprint": {"precision": "float32"}})
    config = plan_lib.TrainConfig(variant="tiny", image_size=28, model_overrides={"num_layers": 1}, batch_size=16,
                                  max_train_examples=32, run_dir=str(tmp_path / "run"), output_dir=None)
    plan = plan_lib.resolve(config)
    assert (plan.precision, plan.precision_reason) == (
        "float32", "the backup's, which this run resumes: no precision trial to answer otherwise")
    assert not measure.calls
    assert plan_lib.resolve(dataclasses.replace(config, resume=False)).precision == "mixed_bfloat16"  # a new run: measured


def test_a_step_that_all_reduces_takes_the_table(trial_on, monkeypatch):
    class TwoReplicas:
        num_replicas_in_sync = 2

    monkeypatch.setattr(precision_trial, "measure_training", None)  # called: a TypeError
    policy, reason = distribute.choose_precision("auto", ZEN4, 192, TI4, strategy=TwoReplicas())
    assert policy == machine.table_precision(ZEN4, width=192)[0]
    assert reason.endswith("no precision trial: a step that all-reduces over replicas or workers takes the table's answer")


def test_default_precision_measures_the_default_model_at_a_width(trial_on, monkeypatch):
    seen = []

    def measure_training(workload, policies, seconds, backend=None):
        seen.append((workload, backend))
        return _timings(0.1, 0.2)(workload, policies, seconds)

    monkeypatch.setattr(precision_trial, "measure_training", measure_training)
    assert machine.default_precision(ZEN4, "torch", 768) == "float32"
    assert seen == [(precision_workloads.width_workload(768), "torch")]  # on the backend asked for, in its child
    assert machine.default_precision(ZEN4, "torch", 768) == "float32" and len(seen) == 1  # cached
    assert distribute.default_precision(ZEN4, width=768) == "float32" and seen[-1][1] == keras.backend.backend()


def test_predict_auto_times_the_models_float32_and_bfloat16_copies(trial_on, monkeypatch, tmp_path, capsys):
    from keras_vit.export import predict

    model = keras_vit.ViT("tiny", num_classes=3, preprocessing="unit")
    measure = _timings(0.2, 0.1)
    assert predict.inference_precision(model, "auto", ZEN4, measure) == (
        "bfloat16", "measured on this avx512_bf16 CPU: mixed_bfloat16 80 img/s, float32 40 img/s; "
                    "3 timed steps each of width 32, 2 layers, batch 8")
    ((workload, _, _),) = measure.calls
    assert workload == precision_workloads.inference_workload("VisionTransformer", model.count_params(), (32, 32, 3), 32, 2)
    assert predict.inference_precision(model, "auto", Machine("cpu", cpu_flags=AVX2), measure)[0] == "float32"
    assert len(measure.calls) == 1  # emulated bfloat16: the table
    # The real timing function, on the model's own copies: every candidate timed within a short cap.
    results = predict.inference_trial(model)(workload, precision_trial.POLICIES, 20)
    assert [r["label"] for r in results] == ["float32", "bfloat16"] and all(r["seconds"] for r in results)
    # keras-vit predict says what it measured.
    path = tmp_path / "m.keras"
    model.save(path)
    image = tmp_path / "x.png"
    keras.utils.save_img(image, np.zeros((32, 32, 3), "uint8"))
    monkeypatch.setattr(machine, "detect", lambda *args, **kwargs: ZEN4)
    monkeypatch.setattr(predict, "inference_trial", lambda model: _timings(0.1, 0.2))
    monkeypatch.setenv(precision_trial.CACHE_ENV, str(tmp_path / "another cache"))  # not the answer above
    assert cli.main(["predict", str(path), str(image), "--top-k", "1"]) == 0
    assert "precision float32 (measured on this avx512_bf16 CPU: float32 80 img/s, mixed_bfloat16 40 img/s" in (
        capsys.readouterr().err)


def test_export_auto_writes_the_saved_model_in_what_the_trial_picks(trial_on, monkeypatch, tmp_path, capsys):
    from keras_vit.export import predict

    path = str(tmp_path / "m.keras")
    keras_vit.ViT("tiny", num_classes=3, preprocessing="unit").save(path)
    monkeypatch.setattr(machine, "detect", lambda *args, **kwargs: ZEN4)
    monkeypatch.setattr(predict, "inference_trial", lambda model: _timings(0.2, 0.1))
    assert cli.main(["export", path, "--tflite", str(tmp_path / "m.tflite"), "--precision", "auto"]) == 2
    assert "--precision auto applies to the SavedModel" in capsys.readouterr().err
    assert cli.main(["export", path, "--saved-model", str(tmp_path / "sm"), "--precision", "auto"]) == 0
    printed = capsys.readouterr()
    assert "precision bfloat16 (measured on this avx512_bf16 CPU: mixed_bfloat16 80 img/s, float32 40 img/s" in printed.err
    assert "computes in bfloat16" in printed.out
    assert export.load_predictor(str(tmp_path / "sm")).precision == "bfloat16"


# --- `keras-vit train` end to end under each branch, exports included ----------------------

# branch: (machine, precision, XLA, extra train arguments)
BRANCHES = {
    "cpu_avx2": (Machine("cpu", cpu_flags=AVX2, memory=(24 * GIB, "forced")), "float32", "on", []),
    "cpu_avx512_bf16": (Machine("cpu", cpu_flags=AVX512_BF16, memory=(24 * GIB, "forced")), "mixed_bfloat16", "off",
                        []),
    # A model as wide as the AMX rule's threshold: bfloat16 through oneDNN, XLA off.
    "cpu_amx_wide": (Machine("cpu", cpu_flags=AMX, memory=(24 * GIB, "forced")), "mixed_bfloat16", "off",
                     ["--hidden-size", str(machine.TENSORFLOW_AMX_MIN_WIDTH), "--num-heads", "2", "--mlp-dim", "64"]),
    "gpu_ampere": (Machine("gpu", 8, memory=(80 * GIB, "forced")), "mixed_bfloat16", "on", []),
    "gpu_volta": (Machine("gpu", 7, memory=(16 * GIB, "forced")), "mixed_float16", "on", []),
}


# One end-to-end run per precision the branches give: cpu_avx512_bf16 trains in mixed_bfloat16
# without XLA as cpu_amx_wide does (with the table's answer: conftest.py turns the trial off).
@pytest.mark.parametrize("branch", sorted(set(BRANCHES) - {"cpu_avx512_bf16"}))
def test_train_end_to_end_with_exports_per_branch(branch, tmp_path, monkeypatch, capsys):
    forced, precision, xla, extra = BRANCHES[branch]
    monkeypatch.setattr(machine, "detect", lambda *args, **kwargs: forced)
    out = tmp_path / "out"
    code = cli.main([
        "train", "--variant", "tiny", "--image-size", "28", "--num-layers", "1", "--epochs", "1", "--batch-size", "32",
        "--max-train-examples", "64", "--max-test-examples", "32", "--quiet",
        "--run-dir", str(tmp_path / "run"), "--output-dir", str(out), "--name", "m", *extra,
    ])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert re.search(rf"precision {precision} \([^)]*\), XLA {xla}", printed.out), printed.out
    trained = keras.saving.load_model(out / "m.keras", compile=False)
    assert trained.get_layer("encoderblock_0").dtype_policy.name == precision
    images = np.random.default_rng(0).integers(0, 256, (4, 28, 28, 1)).astype("float32")  # the sample is grey
    # Exports compute in float32: compare with the float32 copy of the trained model.
    expected = np.asarray(export.compute_precision.float32_model(trained)(images))
    for path in (out / "m.tflite", out / "m" / "1"):
        np.testing.assert_allclose(export.load_predictor(str(path)).predict(images), expected, atol=1e-5)
    assert sorted(os.listdir(out)) == ["m", "m.json", "m.keras", "m.labels.txt", "m.tflite"]


def test_a_failed_export_prints_one_paragraph_and_keeps_the_model(tmp_path, monkeypatch, capsys):
    """The converter's dump goes to the run's log; the paragraph names the format, cause and retry command."""

    class ConverterError(Exception):  # what tf.lite raises; not a ValueError
        pass

    real_tflite = export.tflite

    def failing_tflite(*args, **kwargs):
        os.write(2, b"loc(fused[...]): error: 'tf.Conv2D' op is neither a custom op nor a flex op\n" * 500)
        raise ConverterError("Could not translate MLIR to FlatBuffer.\n" + "module {\n" * 1000)

    monkeypatch.setattr(export, "tflite", failing_tflite)
    monkeypatch.setattr(machine, "detect", lambda *args, **kwargs: BRANCHES["cpu_avx2"][0])
    out, run = tmp_path / "out", tmp_path / "run"
    argv = ["train", "--variant", "tiny", "--image-size", "28", "--num-layers", "1", "--epochs", "1",
            "--batch-size", "32", "--max-train-examples", "64", "--max-test-examples", "32", "--quiet",
            "--run-dir", str(run), "--output-dir", str(out), "--name", "m"]
    code = cli.main(argv)
    printed = capsys.readouterr()
    err = printed.err
    assert code == 1
    # The cpu_avx2 branch's defaults, end to end: the table answers, with no trial.
    assert ("precision float32 (CPU without native bfloat16, neither avx512_bf16 nor amx_bf16: bfloat16 is emulated, "
            "float32 ran fastest), XLA on") in printed.out
    paragraph = err.strip()
    assert len(paragraph.splitlines()) == 1 and "neither a custom op" not in paragraph, paragraph[:2000]
    retry = f"keras-vit export {out / 'm.keras'} --tflite {out / 'm.tflite'} --overwrite"
    for part in ("The TFLite export failed", "ConverterError: Could not translate MLIR to FlatBuffer", retry,
                 str(run / "m.export.log")):
        assert part in paragraph, part
    log = (run / "m.export.log").read_text()
    assert "neither a custom op" in log and "module {" in log and "Traceback" in log
    assert (out / "m.keras").is_file() and (out / "m" / "1" / "saved_model.pb").is_file()
    assert not (out / "m.tflite").exists()
    # The paragraph's command works as printed.
    monkeypatch.setattr(export, "tflite", real_tflite)
    assert cli.main(retry.split()[1:]) == 0
    assert export.load_predictor(str(out / "m.tflite")).class_names[0] == "T-shirt/top"


def test_keras_vit_export_failure_is_one_paragraph_too(tmp_path, monkeypatch, capsys):
    import keras_vit

    model_path = str(tmp_path / "vit.keras")
    keras_vit.ViT("tiny", num_classes=2, preprocessing="unit").save(model_path)

    def failing_onnx(*args, **kwargs):
        os.write(2, b"tf2onnx: unsupported op dump\n" * 200)
        raise RuntimeError("Unsupported ops: Counter({'Foo': 1})")

    monkeypatch.setattr(export, "onnx", failing_onnx)
    assert cli.main(["export", model_path, "--onnx", str(tmp_path / "vit.onnx")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "dump" not in err
    assert "The ONNX export failed: RuntimeError: Unsupported ops" in err
    assert f"keras-vit export {model_path} --onnx {tmp_path / 'vit.onnx'}" in err
    assert "unsupported op dump" in (tmp_path / "vit.export.log").read_text()
    assert sorted(os.listdir(tmp_path)) == ["vit.export.log", "vit.keras"]


def test_the_default_cap_times_vit_ti4_on_tensorflow_where_each_first_step_takes_28_s():
    """The AMX Xeon's trial of ViT-Ti/4 (first steps 28 and 27 s, then about 2-3 s a step) timed
    nothing under a 30 s cap, and `auto` fell back to the table."""
    now = [0.0]
    costs = {"float32": [28.0, 2.6, 2.6, 2.6], "mixed_bfloat16": [27.0, 1.9, 1.9, 1.9]}

    def step(policy):
        now[0] += costs[policy].pop(0)

    timed = precision_trial.time_alternating({policy: (lambda p=policy: step(p)) for policy in costs},
                                             precision_trial.trial_seconds({}), clock=lambda: now[0])
    assert all(len(seconds) >= 2 for seconds in timed.values()), timed
