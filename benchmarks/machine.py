"""The one record of the machine a benchmark ran on: CPU model and flags, cores, load, CPU time shares.

Absolute speeds say little between machines (AVX2 EPYC, AVX-512 Xeon, AVX-512+bf16 EPYC), so
every result file and every printed header carries this record.

    >>> record = machine_record()
    >>> {"date", "cpu", "flags", "cores", "load", "hardware"} <= set(record)
    True
    >>> set(record["flags"]) <= set(FLAGS), slug("AMD EPYC 7B13", {"avx2", "fma"})
    (True, 'amd-epyc-7b13-avx2')
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time

from keras_vit.machine import ONEDNN_VARIABLE, native_bfloat16, read_cpuinfo

# The instruction-set flags that decide precision and XLA defaults and matmul speed.
FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16")
# Environment variables that change what XLA compiles, recorded with every result where they are set.
COMPILER_VARIABLES = ("XLA_FLAGS", "TF_XLA_FLAGS")


def cpu_info():
    """(CPU model name, the native bfloat16 instruction flags it has) from /proc/cpuinfo."""
    name, flags = read_cpuinfo()
    return name, native_bfloat16(flags)


def cpu_flags(flags=None):
    """The flags of `FLAGS` this CPU has, in `FLAGS` order."""
    flags = read_cpuinfo()[1] if flags is None else flags
    return [f for f in FLAGS if f in flags]


def slug(name, flags):
    """A file-name-safe hardware name: CPU model and its widest vector/bfloat16 flag."""
    model = re.sub(r"\(r\)|\(tm\)|processor|cpu|@.*$|\d+-core", "", (name or "cpu").lower())
    model = "-".join(re.findall(r"[a-z0-9]+", model))[:40] or "cpu"
    best = next((f for f in reversed(FLAGS) if f in flags and f != "fma"), None)
    return f"{model}-{best.replace('_', '')}" if best else model


def gpu_name():
    """The first NVIDIA GPU's name (nvidia-smi), or None."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return None
    return out[0].strip() if out else None


def loadavg():
    """The 1, 5 and 15-minute load averages as one string, or None where there are none."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return None


def machine_record(gpu=False):
    """Date, CPU model, flags, cores, load (and GPU name with `gpu=True`) as one dict."""
    name, flags = read_cpuinfo()
    record = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": name, "flags": cpu_flags(flags),
              "cores": os.cpu_count(), "load": loadavg(), "hardware": slug(name, flags),
              "onednn": os.environ.get(ONEDNN_VARIABLE, "unset")}
    # Compiler flags change what XLA runs (oneDNN or XNNPACK products, threads); a figure taken under them says so.
    record.update({name.lower(): os.environ[name] for name in COMPILER_VARIABLES if os.environ.get(name)})
    if gpu:
        record["gpu"] = gpu_name()
        if record["gpu"]:
            record["hardware"] = "-".join(re.findall(r"[a-z0-9]+", record["gpu"].lower()))
    return record


def header(command, record=None):
    """The two-line header of every printed result: date, machine, load; the command."""
    r = record or machine_record()
    gpu = f"; GPU: {r['gpu']}" if r.get("gpu") else ""
    compiler = "".join(f"; {name}={r[name.lower()]}" for name in COMPILER_VARIABLES if r.get(name.lower()))
    return (f"{r['date']}; CPU: {r['cpu']}, {r['cores']} cores, flags: {' '.join(r['flags']) or 'none of ' + '/'.join(FLAGS)}"
            f"{gpu}; load {r['load']}; {ONEDNN_VARIABLE} {r.get('onednn', 'unset')}{compiler}\ncommand: {command}")


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
