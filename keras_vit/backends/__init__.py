"""What differs between the Keras backends, one small module each: `tensorflow`, `jax`, `torch`.

Each module answers the same questions for its backend:

- `NAME`: the `KERAS_BACKEND` value.
- `COMPILER`: what `jit_compile=True` turns on ("XLA", "torch.compile").
- `accelerator()`: "tpu", "gpu" or "cpu", the device this backend computes on.
- `gpu_compute_capability()`: the major CUDA compute capability of the first GPU, or None.
- `default_jit_compile(device, precision, collectives)`: whether to compile the train step
  (XLA on TensorFlow and JAX, torch.compile on PyTorch) when the user did not say.
- `has_float64()`: whether float64 tensors keep their precision (JAX's need `jax_enable_x64`).
- `kernels()`: the setting of the backend's CPU kernels a run header states ("" when none).
- `STRATEGIES`: the `keras_vit.training.get_strategy` names the backend can run.

Example:

>>> current().NAME == keras.backend.backend()
True
>>> sorted(NAMES)
['jax', 'tensorflow', 'torch']
"""

from __future__ import annotations

import importlib

import keras

NAMES = ("tensorflow", "jax", "torch")


def current():
    """Returns the module of the Keras backend in use (`keras.backend.backend()`).

    Example:

    >>> current().NAME in NAMES
    True
    """
    name = keras.backend.backend()
    if name not in NAMES:
        raise ValueError(f"Unsupported Keras backend {name!r} (KERAS_BACKEND). Expected one of {list(NAMES)}.")
    return importlib.import_module(f"{__name__}.{name}")


def compilation(jit_compile) -> str:
    """How a train step runs on the current backend, for headers and summaries.

    Example:

    >>> compilation(False).startswith(f"{current().COMPILER} off, Keras backend {keras.backend.backend()}")
    True
    """
    backend = current()
    kernels = backend.kernels() if backend.accelerator() == "cpu" else ""
    return f"{backend.COMPILER} {'on' if jit_compile else 'off'}, Keras backend {backend.NAME}" + (
        f"; {kernels}" if kernels else "")
