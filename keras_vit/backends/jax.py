"""JAX: always compiled with XLA (uncompiled JAX runs op by op); keras.distribution, no tf.distribute.

Example:

>>> default_jit_compile("cpu", "mixed_bfloat16", collectives=False)
True
"""

from __future__ import annotations

NAME = "jax"
COMPILER = "XLA"  # what jit_compile=True turns on
# "data_parallel" and "model_parallel" are keras.distribution's DataParallel and ModelParallel
# over a device mesh (`keras_vit.distribution`); tf.distribute's strategies need TensorFlow.
STRATEGIES = ("default", "data_parallel", "model_parallel")


def accelerator() -> str:
    """Returns "tpu", "gpu" or "cpu": JAX's default platform."""
    import jax

    platform = jax.default_backend()
    return platform if platform in ("tpu", "gpu") else ("gpu" if platform in ("cuda", "rocm") else "cpu")


def gpu_compute_capability() -> int | None:
    """The major compute capability of JAX's first GPU, or None without one."""
    import jax

    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        return None
    capability = getattr(gpus[0], "compute_capability", None) if gpus else None
    return int(str(capability).split(".")[0]) if capability else None


# cuDNN's flash attention (JAX 0.11) has no gradient for 197 tokens; padded to a multiple of 16 it
# has, and ViT-B/16 trained 1.19x faster than with the explicit softmax on an H100 (issue 54).
FLASH_TOKEN_MULTIPLE = 16


def flash_attention(query, key, value, scale, causal=False, implementation="cudnn", multiple=FLASH_TOKEN_MULTIPLE):
    """Attention of (batch, tokens, heads, width) tensors through one fused kernel, padding the tokens to a
    multiple of `FLASH_TOKEN_MULTIPLE`: the padded keys are left out through the sequence lengths and the
    padded queries' outputs dropped, so the result is that of the unpadded tokens.

    Args:
        query, key, value: arrays (batch, tokens, heads, width).
        scale: float. The factor of the scores.
        causal: bool. Each token attends to itself and the tokens before it. Defaults to False.
        implementation: str. `jax.nn.dot_product_attention`'s ("cudnn", or "xla" to check it on a CPU).
            Defaults to "cudnn".
        multiple: int. The tokens are padded to a multiple of it. Defaults to `FLASH_TOKEN_MULTIPLE`.

    Example:

    >>> import numpy as np
    >>> q = np.random.default_rng(0).normal(size=(1, 5, 2, 8)).astype("float32")
    >>> tuple(flash_attention(q, q, q, 8 ** -0.5, implementation="xla").shape)
    (1, 5, 2, 8)
    """
    import jax
    import jax.numpy as jnp

    tokens = query.shape[1]
    padded = -(-tokens // multiple) * multiple
    pad = ((0, 0), (0, padded - tokens), (0, 0), (0, 0))
    lengths = jnp.full((query.shape[0],), tokens, "int32")
    out = jax.nn.dot_product_attention(
        jnp.pad(query, pad), jnp.pad(key, pad), jnp.pad(value, pad), scale=scale, is_causal=causal,
        query_seq_lengths=lengths, key_value_seq_lengths=lengths, implementation=implementation)
    return out[:, :tokens]


def kernels() -> str:
    """Nothing to add to a run's header: the backend's CPU kernels have no setting keras_vit makes."""
    return ""


def has_float64() -> bool:
    """Only with jax_enable_x64: by default JAX truncates float64 to float32, with a warning."""
    import jax

    return bool(jax.config.read("jax_enable_x64"))


def default_jit_compile(device: str, precision: str, collectives: bool) -> bool:
    """Always XLA: JAX without jit dispatches every operation from Python."""
    return True


def prepare_processes() -> None:
    """Readies JAX for several processes before `jax.distributed.initialize`.

    CPU devices have no cross-process collectives unless one is chosen: gloo (shipped with
    jaxlib) all-reduces between host processes over TCP. GPUs and TPUs bring their own.
    """
    import jax

    if getattr(jax.config, "jax_cpu_collectives_implementation", None) in (None, "", "none"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")


def device_bytes(variables) -> dict:
    """{device: bytes} that the shards of `variables` (Keras variables) hold on each local device."""
    held = {}
    for variable in variables:
        for shard in variable.value.addressable_shards:
            held[shard.device] = held.get(shard.device, 0) + shard.data.nbytes
    return held


def sharding_spec(variable) -> tuple:
    """The mesh axis (or None) each dimension of `variable` is split over, e.g. (None, "model")."""
    sharding = variable.value.sharding
    spec = tuple(getattr(sharding, "spec", ()))
    return spec + (None,) * (len(variable.shape) - len(spec))
