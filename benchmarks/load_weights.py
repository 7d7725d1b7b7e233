"""Times loading full-size ViT-B/16 weights from an original-layout .npz (seconds, peak memory).

Writes a ViT-B/16 checkpoint with the spec's key names (random weights, 1000-class head) once,
then, in a fresh Python process per case so peak memory is not inherited:
  build     : keras_vit.ViT_B16() with no weights (the baseline of a model build)
  build+npz : keras_vit.ViT_B16(weights=path)            (read, check, assign; 224 px)
  build+384 : keras_vit.ViT_B16(weights=path, image_size=384)  (plus position resampling)
  load_weights : keras_vit.load_weights(model, path) into an existing model (timed alone)
Peak memory is the process's VmHWM (peak resident set) from /proc/self/status; "baseline" is
the resident set after importing keras_vit.

    python benchmarks/load_weights.py [--dir /tmp/keras_vit_bench] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

CASES = ("build", "build+npz", "build+384", "load_weights")


def _status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0  # MiB
    return float("nan")


def _measure(case, path):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
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
    print(json.dumps({"case": case, "seconds": seconds, "baseline_mib": baseline, "peak_mib": _status("VmHWM")}))


def _generate(path):
    import keras_vit
    from keras_vit.weights import save_npz

    model = keras_vit.ViT_B16(num_classes=1000)
    save_npz(model, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/tmp/keras_vit_bench")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    path = os.path.join(args.dir, "ViT-B_16.npz")
    if args.case:
        _measure(args.case, path)
        return
    os.makedirs(args.dir, exist_ok=True)
    if not os.path.exists(path):
        _generate(path)
    print(f"checkpoint: {path} ({os.path.getsize(path) / 2**20:.1f} MiB)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd()] + sys.path))
    for case in CASES:
        runs = []
        for _ in range(args.repeats):
            out = subprocess.run([sys.executable, __file__, "--dir", args.dir, "--case", case],
                                 capture_output=True, text=True, env=env, check=True)
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        seconds = sorted(r["seconds"] for r in runs)
        print(f"{case:13s} seconds min {seconds[0]:.2f} median {seconds[len(seconds) // 2]:.2f}  "
              f"peak RSS {max(r['peak_mib'] for r in runs):.0f} MiB (baseline after import "
              f"{min(r['baseline_mib'] for r in runs):.0f} MiB)")


if __name__ == "__main__":
    main()
