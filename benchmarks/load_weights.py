"""load-weights: times loading full-size ViT-B/16 weights from an original-layout .npz (seconds, peak memory).

Writes a ViT-B/16 checkpoint with the spec's key names (random weights, 1000-class head) once,
then, in a fresh Python process per case so peak memory is not inherited:
  build     : keras_vit.ViT_B16() with no weights (the baseline of a model build)
  build+npz : keras_vit.ViT_B16(weights=path)            (read, check, assign; 224 px)
  build+384 : keras_vit.ViT_B16(weights=path, image_size=384)  (plus position resampling)
  load_weights : keras_vit.load_weights(model, path) into an existing model (timed alone)
Peak memory is the process's VmHWM (peak resident set) from /proc/self/status; "baseline" is
the resident set after importing keras_vit.

    python -m benchmarks load-weights [--dir /tmp/keras_vit_bench] [--repeats 3] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import time

from benchmarks.timing import median_range
from benchmarks.workers import ResultLog, run_worker

CASES = ("build", "build+npz", "build+384", "load_weights")


def _status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0  # MiB
    return float("nan")


def measure(case, path):
    """The worker's side: one case's seconds, and the process's resident set after import and at its peak."""
    import keras_vit

    baseline = _status("VmRSS")
    start = time.perf_counter()
    if case == "build":
        keras_vit.ViT_B16()
    elif case == "build+npz":
        keras_vit.ViT_B16(weights=path)
    elif case == "build+384":
        keras_vit.ViT_B16(weights=path, image_size=384)
    else:
        model = keras_vit.ViT_B16(approximate_gelu=True)
        start = time.perf_counter()
        keras_vit.load_weights(model, path)
    seconds = time.perf_counter() - start
    return {"case": case, "seconds": seconds, "baseline_mib": baseline, "peak_mib": _status("VmHWM")}


def _generate(path):
    import keras_vit
    from keras_vit.weights import save_npz

    model = keras_vit.ViT_B16(num_classes=1000)
    save_npz(model, path)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks load-weights", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/tmp/keras_vit_bench")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", help="folder for load-weights-<hardware>-<time>.jsonl and .md")
    args = parser.parse_args(argv)
    path = os.path.abspath(os.path.join(args.dir, "ViT-B_16.npz"))
    log = ResultLog("load-weights", args.out, argv)
    os.makedirs(args.dir, exist_ok=True)
    if not os.path.exists(path):
        _generate(path)
    print(f"checkpoint: {path} ({os.path.getsize(path) / 2**20:.1f} MiB)")
    lines = ["| case | seconds (min / median) | peak RSS | baseline after import |", "|---|---|---|---|"]
    for case in CASES:
        runs = []
        for _ in range(args.repeats):
            result = run_worker("benchmarks.load_weights:measure", {"case": case, "path": path},
                                env={"TF_CPP_MIN_LOG_LEVEL": "3"})
            if "error" in result:
                raise SystemExit(f"load-weights {case} failed: {result['error']}")
            runs.append(result)
            log.add(result, echo=False)
        median, fastest, _ = median_range(r["seconds"] for r in runs)
        lines.append(f"| {case} | {fastest:.2f} / {median:.2f} | {max(r['peak_mib'] for r in runs):.0f} MiB | "
                     f"{min(r['baseline_mib'] for r in runs):.0f} MiB |")
    log.summary("\n".join(lines))
