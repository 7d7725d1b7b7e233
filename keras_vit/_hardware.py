"""What the CPU offers, from Linux's /proc/cpuinfo; free of TensorFlow so any script can use it.

>>> model, flags = read_cpuinfo()
>>> isinstance(flags, set), set(native_bfloat16(flags)) <= set(BFLOAT16_FLAGS)
(True, True)
"""

from __future__ import annotations

import platform

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
