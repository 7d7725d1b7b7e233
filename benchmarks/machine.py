"""What the benchmark scripts record about the machine they ran on (Linux /proc, where there is one).

    >>> name, bf16 = cpu_info()
    >>> isinstance(name, str), set(bf16) <= {"avx512_bf16", "amx_bf16"}
    (True, True)
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from keras_vit._hardware import native_bfloat16, read_cpuinfo  # noqa: E402


def cpu_info():
    """(CPU model name, the native bfloat16 instruction flags it has) from /proc/cpuinfo."""
    name, flags = read_cpuinfo()
    return name, native_bfloat16(flags)


def loadavg():
    """The 1, 5 and 15-minute load averages as one string, or None where there are none."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return None


def cpu_jiffies():
    """(busy, steal, total) CPU time from /proc/stat, or None where there is none."""
    try:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = values[3] + values[4]  # idle + iowait
    steal = values[7] if len(values) > 7 else 0
    total = sum(values[:8])
    return total - idle - steal, steal, total


def cpu_share(before, after):
    """Shares of the machine's CPU time between two `cpu_jiffies()` readings: used by this and
    other processes, and stolen by the hypervisor (a virtual machine's host running other guests:
    it slows a run down without showing in the load average)."""
    if before is None or after is None or after[2] <= before[2]:
        return None
    total = after[2] - before[2]
    return {"busy": round((after[0] - before[0]) / total, 3), "steal": round((after[1] - before[1]) / total, 3)}
