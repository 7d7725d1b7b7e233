"""Does `--precision auto` pick the fastest training set-up on this machine? (issue 24)

Times `model.fit` steps of one workload under the four precision x XLA set-ups, each job in
its own process, the set-ups alternating within each round so that load on a shared machine
falls on all of them alike. Prints a line per job, then per workload the median images/s of
each set-up over rounds, its ratio to float32 + XLA, the set-up `auto` picks on this machine and
the CPU flags that decided it. Raw lines go to `--out` as JSON Lines.

Command (about 15 minutes on a quiet 2-core CPU):

    python -m benchmarks precision-xla --workloads default,ti4 --rounds 2 --out benchmarks/results

Workloads: "default" is `keras-vit train`'s default model (patch 7, width 128, 6 layers, 4 heads,
MLP 256) on 28x28x1 images at batch 256; "ti4" is ViT-Ti/4 (width 192, 12 layers, 3 heads, MLP
768) on 32x32x3 images at batch 128. Random data held in memory, AdamW, 3 warm-up steps
(tracing, XLA compilation) then `--steps` timed steps; images/s from the median step.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SETUPS = (("float32", True), ("float32", False), ("mixed_bfloat16", False), ("mixed_bfloat16", True))
WORKLOADS = {
    "default": dict(patch_size=7, hidden_size=128, num_layers=6, num_heads=4, mlp_dim=256, shape=(28, 28, 1), batch=256),
    "ti4": dict(patch_size=4, hidden_size=192, num_layers=12, num_heads=3, mlp_dim=768, shape=(32, 32, 3), batch=128),
}


def job(workload, policy, jit_compile, steps):
    """Runs in the child process: returns images/s of the median timed step."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np

    import keras_vit

    spec = dict(WORKLOADS[workload])
    shape, batch = spec.pop("shape"), spec.pop("batch")
    keras.config.set_dtype_policy(policy)
    model = keras_vit.ViT(**spec, input_shape=shape, num_classes=10, classifier_activation=None)
    model.compile(optimizer=keras.optimizers.AdamW(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=jit_compile)
    rng = np.random.default_rng(0)
    x = rng.random((batch,) + shape, dtype="float32")
    y = rng.integers(0, 10, batch)
    times = []
    for step in range(3 + steps):
        start = time.perf_counter()
        model.train_on_batch(x, y)
        times.append(time.perf_counter() - start)
    return batch / float(np.median(times[3:]))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks precision-xla", description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", default="default,ti4", help="comma-separated: " + ", ".join(WORKLOADS))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per job (default: 10)")
    parser.add_argument("--out", default=None, help="folder for the JSON Lines file (default: none)")
    parser.add_argument("--job", nargs=3, metavar=("WORKLOAD", "POLICY", "JIT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.job:
        workload, policy, jit = args.job
        print(json.dumps({"images_per_second": job(workload, policy, jit == "1", args.steps)}))
        return 0

    from benchmarks.timing import median_range
    from keras_vit import machine as machine_lib
    from keras_vit.machine import native_bfloat16, read_cpuinfo

    cpu, flags = read_cpuinfo()
    this_cpu = machine_lib.Machine("cpu", cpu_flags=frozenset(flags), cpu_name=cpu or "")
    auto_precision = machine_lib.default_precision(this_cpu)
    auto = (auto_precision, machine_lib.default_jit_compile(this_cpu, auto_precision, False))
    machine = {"cpu": cpu, "flags": sorted(f for f in flags if f.startswith(("avx", "amx", "fma"))), "cores": os.cpu_count()}
    print(f"machine: {machine}")
    workloads = args.workloads.split(",")
    unknown = [w for w in workloads if w not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workloads {unknown}; expected some of {sorted(WORKLOADS)}")
    stamp = time.strftime("%Y%m%d-%H%M", time.gmtime())
    out = open(os.path.join(args.out, f"precision-xla-{stamp}.jsonl"), "w") if args.out else None
    results = {}
    for round_ in range(args.rounds):
        for workload in workloads:
            order = SETUPS if round_ % 2 == 0 else SETUPS[::-1]
            for policy, jit in order:
                load = os.getloadavg()[0]
                done = subprocess.run(
                    [sys.executable, "-m", "benchmarks", "precision-xla", "--steps", str(args.steps),
                     "--job", workload, policy, "1" if jit else "0"],
                    capture_output=True, text=True, cwd=os.path.dirname(HERE),
                )
                if done.returncode:
                    raise SystemExit(f"{workload} {policy} xla={jit} failed:\n{done.stderr[-3000:]}")
                ips = json.loads(done.stdout.strip().splitlines()[-1])["images_per_second"]
                results.setdefault((workload, policy, jit), []).append(ips)
                line = {"round": round_, "workload": workload, "precision": policy, "xla": jit,
                        "images_per_second": round(ips, 1), "load_before": round(load, 2),
                        "utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), **machine}
                print(json.dumps(line), flush=True)
                if out:
                    out.write(json.dumps(line) + "\n")
                    out.flush()
    print(f"\nauto picks {auto[0]} {'with' if auto[1] else 'without'} XLA here (native bfloat16 flags: "
          f"{native_bfloat16(flags) or 'none'})")
    for workload in workloads:
        base = median_range(results[(workload, "float32", True)])[0]
        print(f"{workload}:")
        for policy, jit in SETUPS:
            median, low, high = median_range(results[(workload, policy, jit)])
            mark = "  <- auto" if (policy, jit) == auto else ""
            print(f"  {policy:15s} XLA {'on ' if jit else 'off'}  {median:7.1f} img/s "
                  f"({low:.1f}-{high:.1f})  {median / base:.2f}x float32+XLA{mark}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
