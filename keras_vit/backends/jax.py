"""JAX: always compiled with XLA (uncompiled JAX runs op by op); one device, no tf.distribute.

Example:

>>> default_jit_compile("cpu", "mixed_bfloat16", collectives=False)
True
"""

from __future__ import annotations

NAME = "jax"
COMPILER = "XLA"  # what jit_compile=True turns on
STRATEGIES = ("default",)


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


def has_float64() -> bool:
    """Only with jax_enable_x64: by default JAX truncates float64 to float32, with a warning."""
    import jax

    return bool(jax.config.read("jax_enable_x64"))


def default_jit_compile(device: str, precision: str, collectives: bool) -> bool:
    """Always XLA: JAX without jit dispatches every operation from Python."""
    return True
