"""TensorFlow: tf.distribute strategies, XLA for float32 (oneDNN for bfloat16 on CPU).

Example:

>>> default_jit_compile("cpu", "float32", collectives=False), default_jit_compile("cpu", "mixed_bfloat16", False)
(True, False)
"""

from __future__ import annotations

NAME = "tensorflow"
COMPILER = "XLA"  # what jit_compile=True turns on
STRATEGIES = ("default", "mirrored", "multi_worker", "tpu")


def accelerator() -> str:
    """Returns "tpu", "gpu" or "cpu": what TensorFlow sees."""
    import tensorflow as tf

    if tf.config.list_logical_devices("TPU"):
        return "tpu"
    if tf.config.list_physical_devices("GPU"):
        return "gpu"
    return "cpu"


def gpu_compute_capability() -> int | None:
    """The major compute capability of TensorFlow's first GPU, or None without one."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return None
    return tf.config.experimental.get_device_details(gpus[0]).get("compute_capability", (0, 0))[0]


def kernels() -> str:
    """What runs TensorFlow's CPU operations outside XLA, for run headers: oneDNN's setting and why."""
    from keras_vit import machine

    return f"oneDNN {machine.ONEDNN}"


def has_float64() -> bool:
    """Always: float64 tensors are float64."""
    return True


def require(condition, template, *values):
    """An assertion op whose InvalidArgumentError reads `template` filled with `values` ({} each)."""
    import tensorflow as tf

    return tf.debugging.Assert(condition, [tf.strings.format(template, values) if values else template])


def checked(tensor, condition, template, *values):
    """`tensor`, passed on only once `condition` holds at run time (else `require`'s error).

    For what only a running graph knows: TensorFlow is the one backend that traces with unknown
    sizes (a `tf.function` with an input_signature of None sides); JAX and PyTorch trace concrete ones.

    Example:

    >>> import tensorflow as tf
    >>> f = tf.function(lambda x: checked(x, tf.shape(x)[0] > 1, "got {} rows", tf.shape(x)[0]),
    ...                 input_signature=[tf.TensorSpec([None])])
    >>> try:
    ...     f(tf.zeros([1]))
    ... except tf.errors.InvalidArgumentError as error:
    ...     print("got 1 rows" in error.message)
    True
    """
    import tensorflow as tf

    with tf.control_dependencies([require(condition, template, *values)]):
        return tf.identity(tensor)


def default_jit_compile(device: str, precision: str, collectives: bool) -> bool:
    """XLA everywhere except two CPU cases.

    Under XLA bfloat16 matrix products are slower than float32 on CPU, while oneDNN outside XLA
    runs them fast; and XLA cannot compile the gradient all-reduce of several CPU replicas.
    """
    if device == "cpu":
        return precision == "float32" and not collectives
    return True
