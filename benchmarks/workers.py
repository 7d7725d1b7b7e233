"""The one worker protocol and the one result format of the harness.

A measurement that needs a fresh process (its own Keras backend, thread settings, peak memory,
or simply no state left by the previous one) runs as `python -m benchmarks _worker TARGET JSON`:
`TARGET` is "benchmarks.module:function", JSON its keyword arguments. The child prints
`RESULT <json>` last; `STEP <seconds>` lines are progress (kept when it times out) and lines
with an `echo` prefix are passed through. `run_worker` returns the result with the wall of the
process and the machine's CPU shares while it ran, or `{"error": ...}`.

Results: `ResultLog(name, out)` writes `<out>/<name>-<hardware>-<time>.jsonl`, whose first line
is the machine record (`{"kind": "machine", ...}`) and every later line one result, and
`.md` with the printed header and table.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time

from benchmarks.machine import cpu_jiffies, cpu_share, header, machine_record

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_worker(target, kwargs, env=None, timeout=None, echo=()):
    """Runs `target(**kwargs)` in a fresh `python -m benchmarks _worker` process; its result dict."""
    before = cpu_jiffies()
    cmd = [sys.executable, "-m", "benchmarks", "_worker", target, json.dumps(kwargs)]
    # The child imports this checkout's benchmarks and keras_vit, wherever the parent was started.
    env = dict(os.environ, **(env or {}))
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as error:
        output = error.stdout.decode() if isinstance(error.stdout, bytes) else error.stdout or ""
        steps = [float(line.split()[1]) for line in output.splitlines() if line.startswith("STEP ")]
        return {"error": f"timed out after {timeout} s, {len(steps)} steps done", "step_times": steps}
    facts = {"process_s": round(time.perf_counter() - start, 1), "cpu": cpu_share(before, cpu_jiffies())}
    for line in proc.stdout.splitlines():
        if echo and line.startswith(tuple(echo)) and not line.startswith("RESULT "):
            print(line, flush=True)
    for line in proc.stdout.splitlines()[::-1]:
        if line.startswith("RESULT "):
            return {**facts, **json.loads(line[len("RESULT "):])}
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {**facts, "error": " | ".join(tail)}


def worker_main(target, kwargs_json):
    """The child's side: runs `target` and prints its result as the RESULT line."""
    module, function = target.split(":")
    result = getattr(importlib.import_module(module), function)(**json.loads(kwargs_json))
    print("RESULT " + json.dumps(result), flush=True)


class ResultLog:
    """Where one run's results go: printed, and under `out` (if given) as JSONL and markdown."""

    def __init__(self, subcommand, out=None, argv=None, tag=None, gpu=False):
        self.machine = machine_record(gpu=gpu)
        args = sys.argv[2:] if argv is None else list(argv)
        self.command = " ".join(["python -m benchmarks", subcommand, *args])
        self.header = header(self.command, self.machine)
        self.path = None
        if out:
            os.makedirs(out, exist_ok=True)
            stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
            stem = f"{subcommand}-{tag}" if tag else subcommand
            self.path = os.path.join(out, f"{stem}-{self.machine['hardware']}-{stamp}")
            with open(self.path + ".jsonl", "w") as f:
                f.write(json.dumps({"kind": "machine", **self.machine, "command": self.command}) + "\n")
        print(self.header, flush=True)

    def add(self, result, echo=True):
        """Appends one result (a dict) to the JSONL file and prints it."""
        if echo:
            print(json.dumps(result), flush=True)
        if self.path:
            with open(self.path + ".jsonl", "a") as f:
                f.write(json.dumps(result) + "\n")

    def summary(self, text):
        """Prints the summary table and writes it, under the header, as the run's .md file."""
        print("\n" + text, flush=True)
        if self.path:
            with open(self.path + ".md", "w") as f:
                f.write(self.header + "\n\n" + text + "\n")


def read_results(paths):
    """The result lines of JSONL files written by `ResultLog` (machine lines left out) or older ones."""
    results = []
    for path in paths:
        with open(path) as f:
            results += [r for r in map(json.loads, f) if r.get("kind") != "machine"]
    return results
