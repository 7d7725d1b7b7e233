"""Distribution strategies by name, the global batch size rule, and hardware defaults.

The batch size given to keras_vit is always the global batch: Keras splits each batch over the
replicas of the strategy, so it must divide evenly. The learning rate follows the global batch
(linear scaling, `Recipe.learning_rate_for`). On TensorFlow the strategies are tf.distribute's
("mirrored", "multi_worker", "tpu": data parallel, every replica holds the whole model); on JAX
they are keras.distribution's over a device mesh (`MeshStrategy`: "data_parallel", and
"model_parallel", which splits the weights, see `keras_vit.distribution`); on PyTorch only
"default" (one device, `SingleDevice`) runs.

Defaults for precision and XLA depend on the machine and the Keras backend: `keras_vit.machine`
lists each with the measurement that chose it.

Example:

>>> strategy = get_strategy("default")
>>> global_batch_size(64, strategy)
64
"""

from __future__ import annotations

import contextlib

import tensorflow as tf

from keras_vit import backends
from keras_vit import machine as machine_lib
from keras_vit._validation import check_positive_int
from keras_vit.choices import PRECISIONS, STRATEGIES  # named there so that --help needs no TensorFlow

_MESH_STRATEGIES = ("data_parallel", "model_parallel")  # keras.distribution's, on JAX


class SingleDevice:
    """The "default" strategy on JAX and PyTorch: one replica, and a scope that does nothing."""

    num_replicas_in_sync = 1

    def scope(self):
        return contextlib.nullcontext()


class MeshStrategy:
    """A keras.distribution (JAX) in the shape of a tf.distribute strategy, for the trainer.

    Args:
        distribution: `keras.distribution.Distribution`. DataParallel or ModelParallel.

    Example (JAX only, so skipped in the TensorFlow doctests):

    >>> from keras_vit import distribution
    >>> strategy = MeshStrategy(distribution.model_parallel((1, 1)))  # doctest: +SKIP
    >>> strategy.num_replicas_in_sync, strategy.mesh  # doctest: +SKIP
    (1, (1, 1))
    """

    def __init__(self, distribution):
        from keras_vit import distribution as distribution_lib

        self.distribution = distribution
        self.mesh = distribution_lib.mesh_shape(distribution)
        self.num_replicas_in_sync = self.mesh[0]  # the global batch is split over the "batch" axis
        self.processes = distribution_lib.process_count()
        self.local_devices = self.mesh[0] * self.mesh[1] // self.processes

    def scope(self):
        return self.distribution.scope()

    def describe(self, model=None) -> str:
        """The mesh, and with `model` what its weights and optimizer state take on the fullest device."""
        from keras_vit import distribution as distribution_lib

        text = distribution_lib.describe(self.distribution)
        if model is not None:
            variables = list(model.variables) + list(getattr(model.optimizer, "variables", []))
            text += f"; weights + optimizer state {distribution_lib.bytes_per_device(variables) / 2**20:,.1f} MiB per device"
        return text


def get_strategy(name: str = "default", devices=None, mesh=None):
    """Returns the distribution strategy called `name`.

    Args:
        name: str. "default" (no distribution); on TensorFlow "mirrored" (all local GPUs, or
            the given devices), "multi_worker" (MultiWorkerMirroredStrategy; the cluster comes
            from the TF_CONFIG environment variable) or "tpu"; on JAX "data_parallel" (every
            device) or "model_parallel" (weights split over a mesh's "model" axis), each a
            `MeshStrategy`. Defaults to "default". On PyTorch only "default" (a `SingleDevice`).
        devices: list of str or None. Devices for "mirrored". Defaults to all local GPUs, or
            all logical CPU devices when there is no GPU.
        mesh: str, (int, int) or None. "BATCHxMODEL" for "model_parallel" (default: every
            device on "model") and "data_parallel" ("Nx1"). Defaults to None.

    Example:

    >>> get_strategy("default").num_replicas_in_sync
    1
    >>> get_strategy("gpus")
    Traceback (most recent call last):
    ...
    ValueError: Unknown strategy='gpus'. Expected one of ['default', 'mirrored', 'multi_worker', 'tpu', 'data_parallel', 'model_parallel'].
    """
    if name not in STRATEGIES:
        raise ValueError(f"Unknown strategy={name!r}. Expected one of {list(STRATEGIES)}.")
    backend = backends.current()
    if name not in backend.STRATEGIES:
        needs = "keras.distribution on KERAS_BACKEND=jax" if name in _MESH_STRATEGIES else "tf.distribute on KERAS_BACKEND=tensorflow"
        raise ValueError(
            f"strategy={name!r} needs {needs}; the Keras backend {backend.NAME!r} runs {list(backend.STRATEGIES)}."
        )
    if mesh is not None and name not in _MESH_STRATEGIES:
        raise ValueError(f"mesh={mesh!r} applies to strategy 'data_parallel' or 'model_parallel', not {name!r}.")
    if name in _MESH_STRATEGIES:
        from keras_vit import distribution

        return MeshStrategy(distribution.get_distribution(name, mesh))
    if backend.NAME != "tensorflow":
        return SingleDevice()
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        if devices is None and not tf.config.list_logical_devices("GPU"):
            devices = [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices=devices)
    if name == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, tf.errors.NotFoundError) as error:
        raise ValueError(f"strategy='tpu' was asked for but no TPU was found: {error}") from error
    return tf.distribute.TPUStrategy(resolver)


def whole_batches_only(strategy) -> bool:
    """Whether evaluation must drop a last partial batch: Keras splits a tf.data dataset between
    processes by its static batch size, which a partial last batch leaves unknown.

    Example:

    >>> whole_batches_only(get_strategy("default"))
    False
    """
    return isinstance(strategy, MeshStrategy) and strategy.processes > 1


def global_batch_size(batch_size: int, strategy) -> int:
    """Checks that the global `batch_size` splits evenly over the strategy's replicas and returns it.

    Args:
        batch_size: int. The global batch size.
        strategy: tf.distribute.Strategy. Anything with `num_replicas_in_sync`.

    Example:

    >>> from types import SimpleNamespace
    >>> eight_replicas = SimpleNamespace(num_replicas_in_sync=8)
    >>> global_batch_size(128, eight_replicas)
    128
    >>> global_batch_size(100, eight_replicas)
    Traceback (most recent call last):
    ...
    ValueError: Invalid batch_size=100: the global batch must be divisible by the 8 replicas of
    the distribution strategy (e.g. 96).
    """
    replicas = strategy.num_replicas_in_sync
    check_positive_int("batch_size", batch_size)
    if batch_size % replicas:
        raise ValueError(
            f"Invalid batch_size={batch_size}: the global batch must be divisible by the "
            f"{replicas} replicas of the distribution strategy (e.g. {replicas * max(batch_size // replicas, 1)})."
        )
    return batch_size


def accelerator(machine: machine_lib.Machine | None = None) -> str:
    """Returns "tpu", "gpu" or "cpu": the kind of device training will run on.

    Args:
        machine: keras_vit.machine.Machine or None. None detects this one. Defaults to None.

    Example:

    >>> accelerator() in ("tpu", "gpu", "cpu")
    True
    """
    return (machine or machine_lib.detect()).accelerator


def default_precision(machine: machine_lib.Machine | None = None, width: int | None = None) -> str:
    """The dtype policy `precision="auto"` picks: `keras_vit.machine.default_precision` of this machine.

    Args:
        machine: keras_vit.machine.Machine or None. None detects this one. Defaults to None.
        width: int or None. The model's token width: the table for AMX CPUs reads it, and on a CPU
            with native bfloat16 a trial times the default model at it. Defaults to None.

    Example:

    >>> from keras_vit.machine import Machine
    >>> default_precision(Machine("tpu")), default_precision(Machine("cpu", cpu_flags=frozenset({"avx512f"})))
    ('mixed_bfloat16', 'float32')
    """
    return machine_lib.default_precision(machine or machine_lib.detect(), width=width)


def default_jit_compile(precision: str = "float32", strategy=None, machine: machine_lib.Machine | None = None) -> bool:
    """Whether to compile the train step for `precision` and `strategy` on this Keras backend and machine.

    JAX: always (XLA). PyTorch: never (torch.compile was far slower). TensorFlow: XLA except on
    CPU for mixed precision (under XLA bfloat16 matrix products are slower than float32 on CPU,
    while oneDNN outside XLA runs them fast) or when the strategy all-reduces gradients (several
    replicas, or several workers): XLA cannot compile collectives for CPU devices (see
    `check_jit_compile`). The table of every machine-dependent default is `keras_vit.machine`'s.

    Args:
        precision: str. The dtype policy of the run. Defaults to "float32".
        strategy: tf.distribute.Strategy or None. The strategy of the run. Defaults to None.
        machine: keras_vit.machine.Machine or None. None detects this one. Defaults to None.

    Example:

    >>> from keras_vit.machine import Machine
    >>> default_jit_compile("float32", machine=Machine()), default_jit_compile("mixed_bfloat16", machine=Machine())
    (True, False)
    >>> default_jit_compile("mixed_float16", machine=Machine("gpu", 7))  # on TensorFlow
    True
    """
    return machine_lib.default_jit_compile(machine or machine_lib.detect(), precision, _uses_collectives(strategy))


def _uses_collectives(strategy) -> bool:
    return strategy is not None and (
        strategy.num_replicas_in_sync > 1 or isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
    )


def check_jit_compile(jit_compile, strategy, machine: machine_lib.Machine | None = None) -> None:
    """Raises ValueError for `jit_compile=True` with a strategy that XLA cannot compile on CPU.

    TensorFlow's XLA has no CPU implementation of the collectives (all-reduce) that
    MirroredStrategy over several CPU devices and MultiWorkerMirroredStrategy put in the train
    step: the step fails at its first call ("Collectives are not yet implemented for CPU devices
    when compiling with XLA", or a variable "located in device CPU:1" read from CPU:0).

    Args:
        jit_compile: bool or None. The requested setting (None: automatic, always accepted).
        strategy: tf.distribute.Strategy. The strategy of the run.
        machine: keras_vit.machine.Machine or None. None detects this one. Defaults to None.

    Example:

    >>> from keras_vit.machine import Machine
    >>> check_jit_compile(True, get_strategy("default"), Machine())  # one replica: fine
    >>> class TwoReplicas:  # stands in for MirroredStrategy over two logical CPU devices
    ...     num_replicas_in_sync = 2
    >>> check_jit_compile(True, TwoReplicas(), Machine())
    Traceback (most recent call last):
    ...
    ValueError: jit_compile=True cannot be used with TwoReplicas over 2 CPU replicas: ...
    """
    if jit_compile is True and accelerator(machine) == "cpu" and _uses_collectives(strategy):
        raise ValueError(
            f"jit_compile=True cannot be used with {type(strategy).__name__} over "
            f"{strategy.num_replicas_in_sync} CPU replicas: XLA cannot compile the gradient "
            "all-reduce for CPU devices. Expected jit_compile=False or None (automatic)."
        )


def resolve_precision(precision: str = "auto", machine: machine_lib.Machine | None = None,
                      width: int | None = None) -> str:
    """Maps "auto" to `default_precision(machine, width)` and checks the name.

    Args:
        precision: str. "auto" or one of `PRECISIONS`. Defaults to "auto".
        machine: keras_vit.machine.Machine or None. None detects this one. Defaults to None.
        width: int or None. The model's token width (the AMX rule reads it). Defaults to None.

    Example:

    >>> resolve_precision("mixed_float16"), resolve_precision() in PRECISIONS
    ('mixed_float16', True)
    """
    return choose_precision(precision, machine, width)[0]


def choose_precision(precision: str = "auto", machine: machine_lib.Machine | None = None,
                     width: int | None = None, workload: dict | None = None, strategy=None,
                     resumed: str | None = None, budget_seconds: float | None = None,
                     validation_shapes: int = 0) -> tuple[str, str]:
    """(dtype policy, why) for a run's `precision`: the given one, or the machine's rule for "auto".

    Args:
        precision: str. "auto" or one of `PRECISIONS`. Defaults to "auto".
        machine: keras_vit.machine.Machine or None. None detects this one. Defaults to None.
        width: int or None. The model's token width. Defaults to None.
        workload: dict or None. The run's model and batch, which a precision trial times on a CPU
            with native bfloat16 (`keras_vit.precision_workloads.training_workload`). Defaults to None.
        strategy: tf.distribute.Strategy or None. The run's; one whose step all-reduces gradients
            takes the table's answer, the same on every replica and worker, with no trial.
            Defaults to None.
        resumed: str or None. The precision of the backup the run resumes: where a trial would
            decide, it stands (a trial again could answer otherwise on a near tie, and the backup
            would be refused). Defaults to None.
        budget_seconds: float or None. The run's time budget, over which a trial weighs each
            candidate's first step (XLA's compilation) with its speed. Defaults to None.
        validation_shapes: int. The batch shapes the run's validation compiles within the budget,
            weighed as well (`keras_vit.precision_trial.validation_shapes`). Defaults to 0.

    Example:

    >>> choose_precision("float32")
    ('float32', 'given')
    """
    if precision not in PRECISIONS:
        raise ValueError(f"Invalid precision={precision!r}. Expected one of {list(PRECISIONS)}.")
    if precision != "auto":
        return precision, "given"
    machine = machine or machine_lib.detect()
    if machine_lib.needs_trial(machine) and resumed in PRECISIONS and resumed != "auto":
        return resumed, "the backup's, which this run resumes: no precision trial to answer otherwise"
    if machine_lib.needs_trial(machine) and _uses_collectives(strategy):
        policy, why = machine_lib.table_precision(machine, width=width)
        return policy, f"{why}; no precision trial: a step that all-reduces over replicas or workers takes the table's answer"
    return machine_lib.precision_choice(machine, width=width, workload=workload, budget_seconds=budget_seconds,
                                        validation_shapes=validation_shapes)


def work_around_multi_worker(model, strategy):
    """Makes `model` fit and evaluate under MultiWorkerMirroredStrategy with Keras 3.15; else does nothing.

    Two Keras 3.15 defects, worked around with what no public API reaches (pinned by
    tests/test_training_distribute.py, which fails when a Keras release renames what is set here):

    - The symbolic build before fit/evaluate reduces a distributed batch with
      `strategy.reduce`, which fails under MultiWorkerMirroredStrategy. Without a stored
      strategy (the private `model._distribute_strategy`) Keras builds at trace time and
      takes the strategy of the enclosing scope.
    - Scalar step logs are reduced with `strategy.reduce(..., axis=0)`: inside replicas
      `model.get_metrics_result()` must return them with shape (1,), so this instance's method
      is wrapped.

    Args:
        model: keras.Model. The model about to be fitted or evaluated.
        strategy: tf.distribute.Strategy. The run's strategy.
    """
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return
    model._distribute_strategy = None
    get_metrics_result = model.get_metrics_result

    def reshaped_metrics_result():
        logs = get_metrics_result()
        if tf.distribute.in_cross_replica_context():
            return logs
        return {k: tf.reshape(v, (1,)) if len(getattr(v, "shape", (0,))) == 0 else v for k, v in logs.items()}

    model.get_metrics_result = reshaped_metrics_result
