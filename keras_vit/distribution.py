"""Training on many devices with keras.distribution: data parallel, and model parallel by layer name.

Two ways to spread a ViT over a device mesh (JAX; see `keras_vit.backends`):

- `data_parallel()`: every device holds the whole model and optimizer state, each takes a slice
  of the global batch, and gradients are all-reduced (`keras.distribution.DataParallel`).
- `model_parallel(mesh)`: a mesh with a "batch" and a "model" axis. Weights are split over
  "model" by the layout rules below (Megatron-style: attention heads and the MLP's hidden units),
  and the batch over "batch" (`keras.distribution.ModelParallel`). Per-device memory of weights
  and optimizer state falls about as 1 / model-axis size, which is what lets ViT-g/G/e train.

Layout rules (`LAYOUT_RULES`) match a variable's path (`encoderblock_3/attention/query/kernel`)
by the last two names, so they follow the layer names of the weight schema and hold for every
variant and family the config table builds. A variable no rule matches is replicated, and so is
one whose split dimension does not divide evenly by the model axis (2 heads over 4 devices), so
an unknown or new layer always works, only without the memory saving. Optimizer slots take
their variable's layout (Keras copies it), and variables are created already split: Keras
initialises each one on its own shards, so the full model never sits on one device.

Several processes (hosts of a TPU pod slice or GPU cluster): `initialize()` first, in every
process, then the same mesh spans all processes' devices and Keras shards each batch by process.

Example (the rules run anywhere; the mesh needs KERAS_BACKEND=jax, so it is skipped in the
TensorFlow doctests; tests/test_distribution.py runs it on 8 host devices):

>>> layout_of("encoderblock_0/mlp_dense_0/kernel", (768, 3072), model_size=4)
(None, 'model')
>>> from keras_vit import ViT
>>> distribution = model_parallel("2x4")  # doctest: +SKIP
>>> describe(distribution)  # doctest: +SKIP
'mesh batch 2 x model 4 (8 devices, 1 process)'
>>> with distribution.scope():  # doctest: +SKIP
...     model = ViT("B16", num_classes=1000)  # each kernel is created split over 4 devices
"""

from __future__ import annotations

import re

import keras

from keras_vit import backends

BATCH_AXIS = "batch"
MODEL_AXIS = "model"

# Layers whose kernels split their output units over "model" (column parallel) and those that
# split their input units (row parallel, the matching second product: no gather in between).
# A new layer joins by its name here: e.g. a SwiGLU MLP's gate and up projections are column
# parallel, its down projection row parallel.
COLUMN_PARALLEL_MLP = ("mlp_dense_0", "mlp_gate", "mlp_up", "mlp_fc1")
ROW_PARALLEL_MLP = ("mlp_dense_1", "mlp_down", "mlp_fc2")

# (path pattern, how each dimension is split), matched with re.fullmatch against variable.path;
# at most one pattern may match a path. Attention kernels have the checkpoints' shapes:
# query/key/value (D, heads, D/heads), output (heads, D/heads, D): split by heads, so every
# device computes whole heads. Embeddings, class/register tokens, LayerNorms, LayerScale and
# the ResNet stem are small and replicated (not matched).
_NAME = r"(?:.*/)?"
LAYOUT_RULES = (
    (_NAME + r"(?:query|key|value)/kernel", (None, MODEL_AXIS, None)),
    (_NAME + r"(?:query|key|value)/bias", (MODEL_AXIS, None)),
    (_NAME + r"attention_output/kernel", (MODEL_AXIS, None, None)),
    (_NAME + f"(?:{'|'.join(COLUMN_PARALLEL_MLP)})/kernel", (None, MODEL_AXIS)),
    (_NAME + f"(?:{'|'.join(COLUMN_PARALLEL_MLP)})/bias", (MODEL_AXIS,)),
    (_NAME + f"(?:{'|'.join(ROW_PARALLEL_MLP)})/kernel", (MODEL_AXIS, None)),
    # The head's classes (1000, 21,843: replicated where the axis does not divide them).
    (_NAME + r"(?:pre_logits|head)/kernel", (None, MODEL_AXIS)),
    (_NAME + r"(?:pre_logits|head)/bias", (MODEL_AXIS,)),
)


def layout_of(path: str, shape, model_size: int) -> tuple:
    """How the variable at `path` of `shape` is split over a model axis of `model_size` devices.

    Args:
        path: str. The variable's path, e.g. "encoderblock_0/attention/query/kernel".
        shape: tuple of int. The variable's shape.
        model_size: int. Devices on the "model" axis.

    Returns:
        tuple: one entry per dimension, "model" or None (all None: replicated).

    Example:

    >>> layout_of("encoderblock_0/attention/query/kernel", (768, 12, 64), model_size=4)
    (None, 'model', None)
    >>> layout_of("encoderblock_0/attention/query/kernel", (32, 2, 16), model_size=4)  # 2 heads: replicated
    (None, None, None)
    >>> layout_of("encoderblock_0/norm1/gamma", (768,), model_size=4)
    (None,)
    """
    replicated = (None,) * len(shape)
    matches = [axes for pattern, axes in LAYOUT_RULES if re.fullmatch(pattern, path)]
    if len(matches) > 1:
        raise ValueError(f"Variable path {path!r} matches {len(matches)} layout rules; each may match at most one.")
    if not matches or len(matches[0]) != len(shape):
        return replicated
    axes = matches[0]
    for size, axis in zip(shape, axes):
        if axis == MODEL_AXIS and size is not None and size % model_size:
            return replicated
    return axes


def layout_map(mesh):
    """The `keras.distribution.LayoutMap` of `LAYOUT_RULES` on `mesh`, for Keras' own ModelParallel.

    It cannot see shapes, so a dimension that does not divide evenly fails there; `model_parallel`
    replicates those instead.

    Args:
        mesh: `keras.distribution.DeviceMesh` with a "model" axis.

    Example:

    >>> mesh = keras.distribution.DeviceMesh((1, 1), (BATCH_AXIS, MODEL_AXIS), keras.distribution.list_devices()[:1])
    >>> layout_map(mesh)["encoderblock_0/mlp_dense_1/kernel"].axes
    ('model', None)
    """
    layouts = keras.distribution.LayoutMap(mesh)
    for pattern, axes in LAYOUT_RULES:
        layouts[pattern] = axes
    return layouts


class ViTModelParallel(keras.distribution.ModelParallel):
    """`keras.distribution.ModelParallel` with `LAYOUT_RULES`, replicating what does not divide evenly.

    Args:
        mesh: `keras.distribution.DeviceMesh` with axes ("batch", "model").
        auto_shard_dataset: bool. Let Keras shard a tf.data dataset by process. Defaults to True.
    """

    def __init__(self, mesh, auto_shard_dataset=True):
        super().__init__(layout_map=layout_map(mesh), batch_dim_name=BATCH_AXIS, auto_shard_dataset=auto_shard_dataset)
        self.model_size = mesh.shape[list(mesh.axis_names).index(MODEL_AXIS)]

    def get_variable_layout(self, variable):
        # A layout the variable was made with (an optimizer slot copies its reference's): Keras stores it as
        # the private `_layout`, with no public getter, and its own ModelParallel reads it the same way
        # (pinned by tests/test_private_apis.py).
        if getattr(variable, "_layout", None) is not None:
            return variable._layout
        axes = layout_of(variable.path, tuple(variable.shape), self.model_size)
        return keras.distribution.TensorLayout(axes, self.device_mesh)


def parse_mesh(mesh) -> tuple[int, int]:
    """Reads a mesh shape "BATCHxMODEL" ("2x4") or a pair into (batch, model).

    Example:

    >>> parse_mesh("2x4"), parse_mesh((1, 8))
    ((2, 4), (1, 8))
    >>> parse_mesh("8")
    Traceback (most recent call last):
    ...
    ValueError: Invalid mesh='8'. Expected BATCHxMODEL, two integers >= 1 such as '2x4'.
    """
    parts = mesh.lower().split("x") if isinstance(mesh, str) else list(mesh) if isinstance(mesh, (tuple, list)) else []
    try:
        shape = tuple(int(part) for part in parts)
    except (TypeError, ValueError):
        shape = ()
    if len(shape) != 2 or min(shape) < 1:
        raise ValueError(f"Invalid mesh={mesh!r}. Expected BATCHxMODEL, two integers >= 1 such as '2x4'.")
    return shape


def device_mesh(shape, devices=None):
    """A `keras.distribution.DeviceMesh` of `shape` (batch, model) over `devices` (default: all).

    Consecutive devices share a "model" row, so the model axis stays within a host (fast links)
    and the batch axis spans hosts.

    Example:

    >>> device_mesh((1, 1), keras.distribution.list_devices()[:1]).axis_names
    ['batch', 'model']
    """
    batch, model = parse_mesh(shape)
    devices = list(devices) if devices is not None else keras.distribution.list_devices()
    if batch * model != len(devices):
        raise ValueError(
            f"Invalid mesh={batch}x{model}: it needs {batch * model} devices, and there are {len(devices)}. "
            f"Expected a mesh whose sizes multiply to {len(devices)}, e.g. {mesh_choices(len(devices))}."
        )
    return keras.distribution.DeviceMesh((batch, model), [BATCH_AXIS, MODEL_AXIS], devices)


def mesh_choices(devices: int) -> str:
    """The meshes of `devices` devices, as "1x8, 2x4, 4x2, 8x1"."""
    return ", ".join(f"{devices // m}x{m}" for m in range(1, devices + 1) if devices % m == 0)


def data_parallel(devices=None):
    """keras.distribution.DataParallel over `devices` (default: every device of every process).

    Example:

    >>> data_parallel().num_model_replicas == len(keras.distribution.list_devices())  # doctest: +SKIP
    True
    """
    _check_backend("data_parallel")
    if devices is None:
        return keras.distribution.DataParallel()
    return keras.distribution.DataParallel(devices=list(devices))


def model_parallel(mesh=None, devices=None):
    """A `ViTModelParallel` on a (batch, model) mesh; default: every device on the model axis.

    Args:
        mesh: str, (int, int) or None. "BATCHxMODEL"; None puts all devices on "model".
        devices: list or None. Defaults to every device of every process.
    """
    _check_backend("model_parallel")
    devices = list(devices) if devices is not None else keras.distribution.list_devices()
    return ViTModelParallel(device_mesh(mesh if mesh is not None else (1, len(devices)), devices))


def get_distribution(strategy: str, mesh=None):
    """The distribution of a strategy name: "data_parallel", "model_parallel", or None for "default".

    Args:
        strategy: str. "default", "data_parallel" or "model_parallel".
        mesh: str, (int, int) or None. The model-parallel mesh; for "data_parallel" only
            "Nx1" (N = all devices) is accepted. Defaults to None.
    """
    if strategy == "default":
        if mesh is not None:
            raise ValueError(f"mesh={mesh!r} needs strategy='data_parallel' or 'model_parallel', got 'default'.")
        return None
    if strategy == "data_parallel":
        if mesh is not None and parse_mesh(mesh)[1] != 1:
            raise ValueError(
                f"Invalid mesh={mesh!r} for strategy='data_parallel', which keeps whole models: expected "
                "BATCHx1, or strategy='model_parallel'."
            )
        distribution = data_parallel()
        if mesh is not None and parse_mesh(mesh)[0] != distribution.num_model_replicas:
            device_mesh(mesh)  # raises, naming the meshes that fit
        return distribution
    if strategy == "model_parallel":
        return model_parallel(mesh)
    raise ValueError(f"Unknown strategy={strategy!r}. Expected 'default', 'data_parallel' or 'model_parallel'.")


def mesh_shape(distribution) -> tuple[int, int]:
    """(batch, model) sizes of a distribution's mesh; a data-parallel one is (devices, 1)."""
    if distribution is None:
        return (1, 1)
    mesh = distribution.device_mesh
    names = list(mesh.axis_names)
    model = mesh.shape[names.index(MODEL_AXIS)] if MODEL_AXIS in names else 1
    return (mesh.devices.size // model, model)


def describe(distribution) -> str:
    """One line: "mesh batch 2 x model 4 (8 devices, 1 process)"."""
    batch, model = mesh_shape(distribution)
    devices = batch * model
    processes = process_count()
    return (f"mesh batch {batch} x model {model} ({devices} device{'s' if devices > 1 else ''}, "
            f"{processes} process{'es' if processes > 1 else ''})")


def process_count() -> int:
    """Processes of this run (`initialize`): 1 unless several joined."""
    if keras.backend.backend() != "jax":
        return 1
    import jax

    return jax.process_count()


def bytes_per_device(variables) -> int:
    """Bytes the fullest local device holds of `variables` (weights, optimizer slots): measured.

    Example:

    >>> import numpy as np
    >>> bytes_per_device([keras.Variable(np.zeros((4, 8), "float32"))])
    128
    """
    variables = list(variables)
    backend = backends.current()
    if hasattr(backend, "device_bytes"):
        held = backend.device_bytes(variables)
        return max(held.values()) if held else 0
    return sum(keras.ops.convert_to_numpy(v).nbytes for v in variables)  # one device holds everything


def sharding_of(variable) -> tuple:
    """The mesh axis (or None) each dimension of a JAX-backed `variable` is split over."""
    return backends.current().sharding_spec(variable)


def initialize(coordinator=None, num_processes=None, process_id=None):
    """Joins this process to a multi-process run; call it in every process before anything else.

    Arguments left None come from KERAS_DISTRIBUTION_JOB_ADDRESSES, KERAS_DISTRIBUTION_NUM_PROCESSES
    and KERAS_DISTRIBUTION_PROCESS_ID, or from the platform (Cloud TPU, SLURM) through
    `jax.distributed.initialize`. On CPU hosts it turns on gloo for cross-process collectives.

    Args:
        coordinator: str or None. "host:port" of process 0. Defaults to None.
        num_processes: int or None. Processes in the run. Defaults to None.
        process_id: int or None. This process's index, 0 to num_processes - 1. Defaults to None.
    """
    _check_backend("initialize")
    if num_processes is not None and (not isinstance(num_processes, int) or num_processes < 1):
        raise ValueError(f"Invalid num_processes={num_processes!r}. Expected an integer >= 1.")
    if process_id is not None and num_processes is not None and not 0 <= process_id < num_processes:
        raise ValueError(f"Invalid process_id={process_id!r}. Expected 0 to {num_processes - 1}.")
    backends.current().prepare_processes()
    keras.distribution.initialize(coordinator, num_processes, process_id)


def _check_backend(what):
    backend = backends.current()
    if not hasattr(backend, "prepare_processes"):
        raise ValueError(
            f"{what} needs keras.distribution, which keras_vit runs on JAX; the Keras backend is {backend.NAME!r}. "
            "Expected KERAS_BACKEND=jax (or a tf.distribute strategy on TensorFlow)."
        )
