"""What this machine is, and every training default that depends on it, decided in one place.

`detect()` reads the machine once into a `Machine`; each default below is a function of a
`Machine`, so a test can hand it any machine (a GPU, a CPU with or without bfloat16
instructions) on whatever machine the test runs (`tests/test_machine.py` forces every branch,
`keras-vit train` and its exports included).

`precision="auto"`: the table answers where it can know (GPU, TPU, and CPUs whose bfloat16 is
emulated); on a CPU with native bfloat16 (avx512_bf16 or amx_bf16) what is fastest depends on the
CPU, the backend and the model, so a short timed trial of the run's own model and batch decides
(float32 against mixed_bfloat16, each with the XLA setting below; `keras_vit.precision_trial`),
cached per machine and model shape. The CPU rows with native bfloat16 are the answer where the
trial is off (KERAS_VIT_PRECISION_TRIAL=0), fails or runs out of time.

| default | branch | choice | why (measurement) |
|---|---|---|---|
| precision | TPU | mixed_bfloat16 | bfloat16 matrix units |
| precision | GPU, compute capability >= 8 | mixed_bfloat16 | bfloat16 tensor cores, no loss scaling |
| precision | GPU, compute capability < 8 | mixed_float16 | float16 tensor cores; Keras scales the loss |
| precision | CPU without avx512_bf16 and amx_bf16 | float32, no trial | bfloat16 is emulated, 2-5x slower; without native bfloat16 instructions bfloat16 never beat float32 (AVX2 EPYC: training 0.66-1.08x on TensorFlow and JAX; ViT-B/16 inference 0.71x on TensorFlow, and on PyTorch 13 calls of batch 8 unfinished after 17 minutes against about 35 s in float32) |
| precision | CPU with avx512_bf16 or amx_bf16 | the trial's fastest (float32 unless mixed_bfloat16 is >= 5% faster), cached | no rule by flags and backend alone fits: on a 2-core AMD Zen 4 (avx512_bf16, no AMX) TensorFlow trained the default model 1.33x faster in float32 + XLA in issue 54's table and 1.22x faster in mixed_bfloat16 with the code of 2026-12-06; on the AMX Xeon the default model tied on TensorFlow while ViT-Ti/4 ran 1.3-1.4x faster in bfloat16 (RESULTS section 4) |
| precision, no trial | CPU with amx_bf16, PyTorch backend | mixed_bfloat16 | on a 2-core Xeon with AMX, Keras-on-PyTorch under mixed_bfloat16 trained ViT-Ti/4 2.12x and the default model 1.34x faster than in float32: PyTorch's oneDNN runs bfloat16 products on AMX tiles and ATen the element-wise work (`python -m benchmarks compare --keras-backends tensorflow,torch`, RESULTS "bfloat16 on AMX") |
| precision, no trial | CPU with amx_bf16, TensorFlow, token width >= `TENSORFLOW_AMX_MIN_WIDTH` | mixed_bfloat16 | ViT-B/16 inference 2.27x and ViT-S/16 training (224 px) 1.41x float32 + XLA, through oneDNN outside XLA |
| precision, no trial | CPU with amx_bf16, TensorFlow, narrower | float32 | the default model (width 128) trained 1.54x and ViT-Ti/4 (192) 1.12x faster in float32 + XLA: outside XLA, TensorFlow's casts and element-wise work cost more than its bfloat16 products save |
| precision, no trial | CPU with amx_bf16, JAX | float32 | XLA's CPU bfloat16 ran the default model at 0.77x and ViT-Ti/4 at 0.57x float32 |
| precision, no trial | CPU with avx512_bf16 without AMX, PyTorch | mixed_bfloat16 | on a 2-core Zen 4, Keras on PyTorch trained ViT-Ti/4 1.96x and the default model 1.73x, and ran ViT-B/16 inference 2.1x faster than in float32 (issue 54) |
| precision, no trial | CPU with avx512_bf16 without AMX, TensorFlow | mixed_bfloat16 | on a 2-core Zen 4 (2026-12-06, quiet, two rounds) TensorFlow trained ViT-Ti/4 1.43x and the default model 1.22x, and ran ViT-B/16 inference 1.86x faster in mixed_bfloat16 (oneDNN, no XLA) than in float32 + XLA (RESULTS "`auto` against keras-hub and timm on the Zen 4"); the code of 2026-11-23 had trained the default model 1.45-1.48x faster in float32 + XLA (RESULTS "Precision x XLA") |
| precision, no trial | CPU with avx512_bf16 without AMX, JAX | float32 | on a 2-core Zen 4 (2026-12-06, two rounds) JAX's mixed_bfloat16 under XLA ran ViT-B/16 inference at 0.94x, ViT-Ti/4 at 0.93x and the default model at 0.83x its float32, and the trial picked float32 for all three; XLA's CPU bfloat16 was slower on the AMX Xeon too |
| jit_compile | TensorFlow, CPU, float32, one replica | XLA on | 1.25x without XLA (RESULTS) |
| jit_compile | TensorFlow, CPU, mixed precision | XLA off | XLA's bfloat16 matrix products ran below its float32 ones; oneDNN's run ~2x |
| jit_compile | TensorFlow, CPU, several replicas or workers | XLA off | XLA cannot compile the gradient all-reduce for CPU devices |
| jit_compile | TensorFlow, GPU/TPU | XLA on | |
| jit_compile | JAX | XLA on | JAX without jit dispatches every op from Python |
| jit_compile | PyTorch | off | torch.compile trained ~60x slower on CPU |
| attention | JAX, GPU with compute capability >= 8 | cuDNN flash attention, tokens padded to a multiple of 16 | ViT-B/16 training on an H100 (batch 256, bf16): 3339 img/s against 2814 with the explicit softmax, 1.02x timm's compiled 3289 (cuDNN refuses 197 tokens' gradient unpadded; issue 54, RESULTS "Training speed on one GPU") |
| attention | otherwise | the explicit softmax | `keras.ops.dot_product_attention` trained a small ViT slower on CPU under TensorFlow; unmeasured on TensorFlow GPUs |
| oneDNN (TensorFlow's CPU kernels outside XLA) | x86-64 CPU with avx2 or avx512f but none of avx512_vnni, avx512_bf16, amx_tile, TF_ENABLE_ONEDNN_OPTS unset, TensorFlow not yet imported | on (keras_vit sets TF_ENABLE_ONEDNN_OPTS=1 at import) | TensorFlow turns oneDNN on by itself only on CPUs with one of those flags; the LP-FT fine-tuning step without XLA (ViT-Ti/4, batch 32, alternating process pairs) ran 1.07-1.45x faster with it on a 2-core Xeon with avx512f and none of them (seven pairs; a width-128 ViT 1.23-1.36x, two pairs) and 1.16-1.27x on a 2-core AMD EPYC with AVX2 only (three pairs); an XLA step compiles to the same program either way (RESULTS "TensorFlow's oneDNN kernels") |
| oneDNN | TF_ENABLE_ONEDNN_OPTS set, TensorFlow imported before keras_vit, non-x86 CPUs or x86 CPUs without avx2 | TensorFlow's own setting | the user's choice; too late once TensorFlow is loaded; not measured there |
| threads | all | the runtime's own (one per core) | 2/2 against 1/1 TensorFlow threads: no winner on 2 cores (RESULTS) |
| memory check | GPU seen by `nvidia-smi` | the first GPU's free memory | |
| memory check | otherwise, Linux | MemAvailable from /proc/meminfo | |
| memory check | no figure | no check | refusing on a guess would stop runs that fit |

Example:

>>> cpu = Machine(accelerator="cpu", cpu_flags=frozenset({"avx2", "avx512f"}))  # no native bfloat16: no trial
>>> default_precision(cpu), default_precision(Machine(accelerator="gpu", gpu_capability=7))
('float32', 'mixed_float16')
"""

from __future__ import annotations

import dataclasses
import os
import platform
import shutil
import subprocess
import sys

# Free of Keras and TensorFlow at import (keras_vit.backends is imported where a backend is asked):
# benchmark scripts read the CPU with it before choosing what to load.

# Instruction-set flags of native bfloat16 matrix arithmetic (AVX-512 BF16 dot products, AMX tiles).
BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16")
# The flag of AMX's bfloat16 tiles: oneDNN runs bfloat16 products on them several times faster than float32.
AMX_BFLOAT16_FLAG = "amx_bf16"


def read_cpuinfo(path: str = "/proc/cpuinfo") -> tuple[str, set]:
    """Returns (CPU model name, set of instruction-set flags); no flags where `path` is unreadable.

    Args:
        path: str. A /proc/cpuinfo-format file. Defaults to "/proc/cpuinfo".
    """
    name, flags = None, set()
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("model name") and name is None:
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return name or platform.processor(), flags


def native_bfloat16(flags: set) -> list:
    """The native bfloat16 flags among `flags` (sorted; empty: bfloat16 is emulated, 2-5x slower).

    Args:
        flags: set of str. Instruction-set flags, as `read_cpuinfo` returns them.

    >>> native_bfloat16({"avx2", "amx_bf16", "amx_tile"}), native_bfloat16({"avx2"})
    (['amx_bf16'], [])
    """
    return sorted(set(flags) & set(BFLOAT16_FLAGS))


def amx_bfloat16(flags) -> bool:
    """Whether `flags` include AMX's bfloat16 tiles (`AMX_BFLOAT16_FLAG`).

    >>> amx_bfloat16({"avx512_bf16", "amx_bf16", "amx_tile"}), amx_bfloat16({"avx512_bf16"})
    (True, False)
    """
    return AMX_BFLOAT16_FLAG in set(flags)


ACCELERATORS = ("cpu", "gpu", "tpu")
# From this token width up, TensorFlow on an AMX CPU runs a ViT faster in mixed_bfloat16 than in float32 + XLA.
TENSORFLOW_AMX_MIN_WIDTH = 384


@dataclasses.dataclass(frozen=True)
class Machine:
    """The facts about a machine that training defaults depend on.

    Args:
        accelerator: str. "cpu", "gpu" or "tpu": where the Keras backend computes. Defaults to "cpu".
        gpu_capability: int or None. Major CUDA compute capability of the first GPU. Defaults to None.
        cpu_flags: frozenset of str. The CPU's instruction-set flags (/proc/cpuinfo). Defaults to none.
        memory: (int or None, str). Bytes a training step may use and where that figure comes
            from; None when unknown. Defaults to (None, "no memory figure on this machine").
        cpu_name: str. The CPU's model name (/proc/cpuinfo), part of a precision trial's cache
            key. Defaults to "".

    Example:

    >>> Machine("gpu", 9).gpu_capability
    9
    >>> Machine("npu")
    Traceback (most recent call last):
    ...
    ValueError: Invalid accelerator='npu'. Expected one of ['cpu', 'gpu', 'tpu'].
    """

    accelerator: str = "cpu"
    gpu_capability: int | None = None
    cpu_flags: frozenset = frozenset()
    memory: tuple = (None, "no memory figure on this machine")
    cpu_name: str = ""

    @property
    def bfloat16_flags(self) -> list:
        """The CPU's native bfloat16 flags (`native_bfloat16`), sorted; empty where bfloat16 is emulated."""
        return native_bfloat16(self.cpu_flags)

    def __post_init__(self):
        if self.accelerator not in ACCELERATORS:
            raise ValueError(f"Invalid accelerator={self.accelerator!r}. Expected one of {list(ACCELERATORS)}.")
        if self.accelerator == "gpu" and self.gpu_capability is None:
            raise ValueError("Invalid Machine: accelerator='gpu' needs gpu_capability (the major CUDA compute capability).")


def detect(cpuinfo: str = "/proc/cpuinfo", meminfo: str = "/proc/meminfo") -> Machine:
    """Reads this machine as the current Keras backend sees it.

    Args:
        cpuinfo: str. The /proc/cpuinfo-format file with the CPU flags. Defaults to "/proc/cpuinfo".
        meminfo: str. The /proc/meminfo-format file with MemAvailable. Defaults to "/proc/meminfo".

    Example:

    >>> detect().accelerator in ACCELERATORS
    True
    """
    from keras_vit import backends

    backend = backends.current()
    accelerator = backend.accelerator()
    name, flags = read_cpuinfo(cpuinfo)
    return Machine(
        accelerator=accelerator,
        gpu_capability=backend.gpu_compute_capability() if accelerator == "gpu" else None,
        cpu_flags=frozenset(flags),
        memory=available_memory(meminfo),
        cpu_name=name or "",
    )


def default_precision(machine: Machine, backend: str | None = None, width: int | None = None,
                      workload: dict | None = None, measure=None) -> str:
    """The dtype policy `precision="auto"` picks on `machine` (see the table above): `precision_choice`'s first part.

    On a CPU with native bfloat16 it measures (or reads the cached answer): see `precision_choice`.

    Example:

    >>> default_precision(Machine("tpu")), default_precision(Machine("gpu", 8)), default_precision(Machine())
    ('mixed_bfloat16', 'mixed_bfloat16', 'float32')
    """
    return precision_choice(machine, backend, width, workload, measure)[0]


def needs_trial(machine: Machine) -> bool:
    """Whether the table cannot know `machine`'s fastest precision: a CPU with native bfloat16 instructions.

    >>> needs_trial(Machine(cpu_flags=frozenset({"avx512_bf16"}))), needs_trial(Machine(cpu_flags=frozenset({"avx512f"})))
    (True, False)
    >>> needs_trial(Machine("gpu", 8, cpu_flags=frozenset({"amx_bf16"})))
    False
    """
    return machine.accelerator == "cpu" and bool(machine.bfloat16_flags)


def precision_choice(machine: Machine, backend: str | None = None, width: int | None = None,
                     workload: dict | None = None, measure=None, budget_seconds: float | None = None,
                     validation_shapes: int = 0) -> tuple[str, str]:
    """(dtype policy, why) that `precision="auto"` picks for a model of token width `width` on `machine`.

    GPUs, TPUs and CPUs whose bfloat16 is emulated: the table (`table_precision`). A CPU with
    native bfloat16 (`needs_trial`): a short timed trial of float32 against mixed_bfloat16 on
    `workload`, or its cached answer (`keras_vit.precision_trial.choose`); the table where the
    trial is off (KERAS_VIT_PRECISION_TRIAL=0), fails or runs out of time, and the why says so.

    Args:
        machine: Machine.
        backend: str or None. The Keras backend's name; None: the one in use. Defaults to None.
        width: int or None. The model's token width (hidden size); None: unknown, taken as narrow.
            Defaults to None.
        workload: dict or None. What a trial times (`keras_vit.precision_workloads.training_workload`,
            or an inference workload); None: the default model at `width`
            (`keras_vit.precision_workloads.width_workload`). Defaults to None.
        measure: callable or None. The trial's timing function, (workload, policies, seconds) ->
            results; None: a training trial in a child process. Defaults to None.
        budget_seconds: float or None. The run's time budget, from which each candidate's first
            step (tracing, XLA's compilation) is spent; None: by speed alone. Defaults to None.
        validation_shapes: int. The batch shapes the run's validation compiles within the budget
            (`keras_vit.precision_trial.validation_shapes`). Defaults to 0.

    Example:

    >>> precision_choice(Machine("gpu", 7))
    ('mixed_float16', 'GPU of compute capability 7: float16 tensor cores')
    >>> precision_choice(Machine(cpu_flags=frozenset({"avx512f"})), "tensorflow")[1]
    'CPU without native bfloat16, neither avx512_bf16 nor amx_bf16: bfloat16 is emulated, float32 ran fastest'
    """
    if backend is None and machine.accelerator == "cpu":
        from keras_vit import backends

        backend = backends.current().NAME
    table = table_precision(machine, backend, width)
    if not needs_trial(machine):
        return table
    from keras_vit import precision_trial, precision_workloads

    if workload is None:
        workload = precision_workloads.width_workload(width)
    if measure is None and workload.get("mode", "train") == "train":
        def measure(workload, policies, seconds):
            return precision_trial.measure_training(workload, policies, seconds, backend)
    return precision_trial.choose(machine, backend, workload, table, measure=measure, budget_seconds=budget_seconds,
                                  validation_shapes=validation_shapes)


def table_precision(machine: Machine, backend: str | None = None, width: int | None = None) -> tuple[str, str]:
    """(dtype policy, why) of the table above, without a trial: what `precision_choice` falls back to.

    Args:
        machine: Machine.
        backend: str or None. The Keras backend's name; None: the one in use. Defaults to None.
        width: int or None. The model's token width (hidden size); None: unknown, taken as narrow.
            Defaults to None.

    Example:

    >>> amx = Machine(cpu_flags=frozenset({"amx_bf16", "amx_tile"}))
    >>> table_precision(amx, "tensorflow", 768)[0], table_precision(amx, "tensorflow", 128)[0]
    ('mixed_bfloat16', 'float32')
    >>> table_precision(amx, "torch", 128)[0], table_precision(amx, "jax", 768)[0]
    ('mixed_bfloat16', 'float32')
    >>> zen4 = Machine(cpu_flags=frozenset({"avx512f", "avx512_bf16"}))
    >>> table_precision(zen4, "torch")[0], table_precision(zen4, "tensorflow", 128)[0], table_precision(zen4, "jax")[0]
    ('mixed_bfloat16', 'mixed_bfloat16', 'float32')
    """
    if machine.accelerator == "tpu":
        return "mixed_bfloat16", "TPU: bfloat16 matrix units"
    if machine.accelerator == "gpu":
        if machine.gpu_capability >= 8:
            return "mixed_bfloat16", f"GPU of compute capability {machine.gpu_capability}: bfloat16 tensor cores"
        return "mixed_float16", f"GPU of compute capability {machine.gpu_capability}: float16 tensor cores"
    if backend is None:
        from keras_vit import backends

        backend = backends.current().NAME
    if not native_bfloat16(machine.cpu_flags):
        return "float32", ("CPU without native bfloat16, neither avx512_bf16 nor amx_bf16: bfloat16 is emulated, "
                           "float32 ran fastest")
    if not amx_bfloat16(machine.cpu_flags):
        if backend == "torch":
            return "mixed_bfloat16", ("avx512_bf16 on this CPU: Keras on PyTorch trained 1.7-2.0x and ran ViT-B/16 "
                                      "inference 2.1x faster in mixed_bfloat16 than in float32 on a Zen 4")
        if backend == "tensorflow":
            return "mixed_bfloat16", ("avx512_bf16 on this CPU: TensorFlow trained ViT-Ti/4 1.43x and the default "
                                      "model 1.22x, and ran ViT-B/16 inference 1.86x faster in mixed_bfloat16 than "
                                      "in float32 + XLA on a Zen 4")
        return "float32", ("avx512_bf16 without AMX on this CPU, but XLA's CPU bfloat16 ran slower than its float32: "
                           "0.83-0.94x on JAX on a Zen 4")
    if backend == "torch":
        return "mixed_bfloat16", ("AMX bfloat16 tiles on this CPU: Keras on PyTorch trained 1.3-2.1x faster "
                                  "in mixed_bfloat16 than in float32")
    if backend == "tensorflow":
        if width is not None and width >= TENSORFLOW_AMX_MIN_WIDTH:
            return "mixed_bfloat16", (f"AMX bfloat16 tiles on this CPU and token width {width} >= "
                                      f"{TENSORFLOW_AMX_MIN_WIDTH}: oneDNN's bfloat16 products outweigh the "
                                      "element-wise work left outside XLA")
        return "float32", (f"AMX on this CPU, but at token width {width if width is not None else 'unknown'} < "
                           f"{TENSORFLOW_AMX_MIN_WIDTH} float32 + XLA ran faster than bfloat16 on TensorFlow"
                           "; KERAS_BACKEND=torch trains in bfloat16 there")
    return "float32", "AMX on this CPU, but XLA's CPU bfloat16 ran slower than its float32 (JAX)"


def default_jit_compile(machine: Machine, precision: str, collectives: bool) -> bool:
    """Whether to compile the train step on `machine` for `precision`, by the current Keras backend's rule.

    Args:
        machine: Machine.
        precision: str. The run's dtype policy.
        collectives: bool. Whether the step all-reduces gradients (several replicas or workers).

    Example:

    >>> default_jit_compile(Machine(), "float32", False), default_jit_compile(Machine(), "mixed_bfloat16", False)
    (True, False)
    """
    from keras_vit import backends

    return backends.current().default_jit_compile(machine.accelerator, precision, collectives)


def default_fused_attention(machine: Machine, backend: str) -> bool:
    """Whether attention's `fused="auto"` runs one fused kernel on `machine` under Keras `backend` (the table above).

    Example:

    >>> default_fused_attention(Machine("gpu", 9), "jax"), default_fused_attention(Machine("gpu", 9), "tensorflow")
    (True, False)
    >>> default_fused_attention(Machine("gpu", 7), "jax"), default_fused_attention(Machine(), "jax")
    (False, False)
    """
    return backend == "jax" and machine.accelerator == "gpu" and (machine.gpu_capability or 0) >= 8


# TensorFlow (>= 2.9, its RFC 400) turns its oneDNN kernels on by itself only on x86-64 CPUs with one
# of these flags; elsewhere it runs Eigen's kernels unless TF_ENABLE_ONEDNN_OPTS=1 is set before import.
TENSORFLOW_ONEDNN_FLAGS = ("avx512_vnni", "avx512_bf16", "amx_tile")
ONEDNN_VARIABLE = "TF_ENABLE_ONEDNN_OPTS"
X86_64 = ("x86_64", "amd64")
# The vector flags of the CPU kinds where oneDNN was measured faster than TensorFlow's Eigen kernels.
ONEDNN_MEASURED_FLAGS = ("avx2", "avx512f")
# What oneDNN gained where keras_vit turns it on (RESULTS "TensorFlow's oneDNN kernels").
ONEDNN_MEASURED = ("the LP-FT fine-tuning step without XLA ran 1.07-1.45x faster with it on a 2-core Xeon with avx512f "
                   "and 1.16-1.27x on a 2-core AMD EPYC with AVX2 only")


def onednn_choice(flags, arch: str, environ, tensorflow_loaded: bool) -> tuple[str | None, str]:
    """(the value keras_vit gives TF_ENABLE_ONEDNN_OPTS, or None to leave TensorFlow's setting; why): the table above.

    Args:
        flags: set of str. The CPU's instruction-set flags, as `read_cpuinfo` returns them.
        arch: str. The machine's architecture, as `platform.machine()` names it.
        environ: mapping. The process environment.
        tensorflow_loaded: bool. Whether TensorFlow is imported already: its setting is then fixed.

    Example:

    >>> onednn_choice({"avx2", "avx512f"}, "x86_64", {}, False)[0]
    '1'
    >>> onednn_choice({"avx2", "avx512f"}, "x86_64", {"TF_ENABLE_ONEDNN_OPTS": "0"}, False)
    (None, 'TF_ENABLE_ONEDNN_OPTS=0, as set before keras_vit was imported')
    """
    flags = set(flags)
    if environ.get(ONEDNN_VARIABLE) is not None:
        return None, f"{ONEDNN_VARIABLE}={environ[ONEDNN_VARIABLE]}, as set before keras_vit was imported"
    if arch.lower() not in X86_64:
        return None, f"TensorFlow's own setting on a {arch} CPU"
    own = sorted(flags & set(TENSORFLOW_ONEDNN_FLAGS))
    if own:
        return None, f"on, TensorFlow's own setting on a CPU with {', '.join(own)}"
    if not flags & set(ONEDNN_MEASURED_FLAGS):
        return None, (f"off, TensorFlow's own setting on a CPU without {', '.join(TENSORFLOW_ONEDNN_FLAGS)}; "
                      f"not measured on x86 CPUs without {' or '.join(ONEDNN_MEASURED_FLAGS)} "
                      f"({ONEDNN_VARIABLE}=1 turns it on)")
    if tensorflow_loaded:
        return None, (f"off: TensorFlow was imported before keras_vit, too late to turn on its oneDNN kernels "
                      f"({ONEDNN_MEASURED}); set {ONEDNN_VARIABLE}=1 or import keras_vit first")
    return "1", (f"on: keras_vit set {ONEDNN_VARIABLE}=1, which TensorFlow leaves off on CPUs with "
                 f"{' or '.join(ONEDNN_MEASURED_FLAGS)} but none of {', '.join(TENSORFLOW_ONEDNN_FLAGS)} "
                 f"({ONEDNN_MEASURED}; {ONEDNN_VARIABLE}=0 turns it off)")


def prepare_tensorflow(environ=None, modules=None, cpuinfo: str = "/proc/cpuinfo", arch: str | None = None) -> str:
    """Turns on TensorFlow's oneDNN kernels where `onednn_choice` says so, before TensorFlow loads; returns the why.

    `import keras_vit` calls it and keeps the why in `ONEDNN`, which run headers state.

    Args:
        environ: mapping or None. The environment to set; None: `os.environ`. Defaults to None.
        modules: mapping or None. The loaded modules; None: `sys.modules`. Defaults to None.
        cpuinfo: str. The /proc/cpuinfo-format file with the CPU flags. Defaults to "/proc/cpuinfo".
        arch: str or None. The architecture; None: `platform.machine()`. Defaults to None.

    Example:

    >>> env = {}
    >>> why = prepare_tensorflow(env, {}, cpuinfo="/nonexistent", arch="x86_64")  # no flags read
    >>> env, why.startswith("off, TensorFlow's own setting")
    ({}, True)
    """
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    value, why = onednn_choice(read_cpuinfo(cpuinfo)[1], arch or platform.machine(), environ, "tensorflow" in modules)
    if value is not None:
        environ[ONEDNN_VARIABLE] = value
    return why


# The why of TensorFlow's oneDNN setting in this process, kept by `import keras_vit` (`prepare_tensorflow`).
ONEDNN = "not decided: keras_vit.machine.prepare_tensorflow has not run"


def available_memory(meminfo: str = "/proc/meminfo"):
    """(bytes, what) a training step may use: the first GPU's free memory when `nvidia-smi`
    reports one, else MemAvailable in `meminfo`; (None, reason) when unknown.

    Example:

    >>> available_memory("/nonexistent")[1] in ("no memory figure on this machine", "free memory of GPU 0 (nvidia-smi)")
    True
    """
    if shutil.which("nvidia-smi") and os.environ.get("CUDA_VISIBLE_DEVICES", "0") not in ("", "-1"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
                capture_output=True, text=True, timeout=10, check=True,
            ).stdout.split()
            if out:
                return int(out[0]) * 2**20, "free memory of GPU 0 (nvidia-smi)"
        except (OSError, subprocess.SubprocessError, ValueError):
            pass
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "MemAvailable in /proc/meminfo"
    except OSError:
        pass
    return None, "no memory figure on this machine"
