"""PyTorch: eager by default (torch.compile trained at 2.6 images/s against 151 eager on CPU, issue 15).

Example:

>>> default_jit_compile("cpu", "float32", collectives=False)
False
"""

from __future__ import annotations

NAME = "torch"
COMPILER = "torch.compile"  # what jit_compile=True turns on
STRATEGIES = ("default",)


def accelerator() -> str:
    """Returns "gpu" or "cpu": whether PyTorch sees a CUDA device."""
    import torch

    return "gpu" if torch.cuda.is_available() else "cpu"


def gpu_compute_capability() -> int | None:
    """The major compute capability of PyTorch's first CUDA device, or None without one."""
    import torch

    return torch.cuda.get_device_capability(0)[0] if torch.cuda.is_available() else None


def kernels() -> str:
    """Nothing to add to a run's header: the backend's CPU kernels have no setting keras_vit makes."""
    return ""


def has_float64() -> bool:
    """Always: float64 tensors are float64."""
    return True


def default_jit_compile(device: str, precision: str, collectives: bool) -> bool:
    """Off: torch.compile recompiles for a long time and ran the ViT train step far slower on CPU."""
    return False
