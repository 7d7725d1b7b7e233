"""`model.fit` training throughput of one keras_vit model on the TensorFlow, JAX and PyTorch backends.

Issue 15 asks which Keras backend trains fastest on CPU; issue 16 asks whether bfloat16 pays on
a CPU without native bfloat16 instructions. Every measurement runs in its own process (Keras
fixes its backend at import, from KERAS_BACKEND); the jobs of a round alternate backends, so a
change in the shared machine's load hits all of them alike.

Workloads (random data from numpy; AdamW, sparse cross-entropy on logits):

- default: `keras-vit train`'s default model (patch 7, width 128, 6 layers, 4 heads, MLP 256)
  on its Fashion-MNIST input, 28x28 with 3 channels, batch 256 (the compact recipe's).
- ti4: ViT-Ti/4 at 32 px (width 192, 12 layers, 3 heads, MLP 768), batch 128.

Plans (--plan); with the defaults a plan should take 15 minutes or less on a quiet 2-core
machine (measured at load average 5-9 on 2 cores: 8-11 minutes a round for backends, 9 for ti4
and for precision):

- backends: the default model on each backend with its default compiler setting (TensorFlow XLA,
  JAX jit, PyTorch eager), TensorFlow without XLA, each default on one thread (threads of one
  process wait on each other when other processes load the cores); in the first round only:
  JAX without jit (one short figure), tf.data input on JAX and PyTorch.
- compile: torch.compile on the default model (slow to compile: pass --timeout 600).
- ti4: ViT-Ti/4 on each backend with its default compiler setting, and PyTorch on one thread.
- precision: mixed_bfloat16 against float32 on TensorFlow (XLA on and off) and JAX (jit), the
  default model.

Per job: a first `fit` of SHORT steps (its wall, tracing and compilation included, less SHORT
warm steps, is the "first-fit overhead"), then a warm `fit` of LONG steps whose single steps a
callback times (median = the figure; p10-p90 = the spread inside the epoch) and whose wall less
its steps is the per-epoch "fit overhead". A fit stops early once it has run --fit-seconds
(a compiler that recompiles every step would otherwise run for hours); the steps done are
recorded. The matmul roofline (benchmarks/matmul_peak.py's `library_gflops`: float32, 3072^3,
the best of XLA, TensorFlow's oneDNN, NumPy and PyTorch) runs in its own process each round;
/proc/stat busy and steal shares (benchmarks/machine.py) come with every job.

    python benchmarks/backends.py [--plan backends|compile|ti4|precision] [--workloads default,ti4]
        [--backends tensorflow,jax,torch] [--rounds 2] [--steps 3,12] [--out benchmarks/results]
    python benchmarks/backends.py --summarise benchmarks/results/backends-<plan>-<time>.jsonl ...
    python benchmarks/backends.py --quick    # smoke run: tiny model, 1 + 2 steps, one round
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from compare import roofline_summary, vit_flops, without_autotuning  # noqa: E402
from machine import cpu_info, cpu_jiffies, cpu_share, loadavg  # noqa: E402

BACKENDS = ("tensorflow", "jax", "torch")
COMPILER = {"tensorflow": "XLA", "jax": "jit", "torch": "torch.compile"}
WORKLOADS = {
    "default": dict(patch=7, hidden=128, layers=6, heads=4, mlp=256, image=28, channels=3, classes=10, batch=256),
    "ti4": dict(patch=4, hidden=192, layers=12, heads=3, mlp=768, image=32, channels=3, classes=10, batch=128),
    # --quick: keras_vit's "tiny" variant at 32 px.
    "tiny": dict(patch=4, hidden=32, layers=2, heads=2, mlp=64, image=32, channels=3, classes=10, batch=8),
}
ARCH = ("patch", "hidden", "layers", "heads", "mlp", "image", "classes", "channels")


def _job(workload, backend, jit, precision="float32", data="numpy", threads=None, once=False):
    return dict(workload=workload, backend=backend, jit=jit, precision=precision, data=data, threads=threads,
                once=once)


# Each backend's default first (TensorFlow XLA, JAX jit, PyTorch eager), then the variants.
PLANS = {
    "backends": [
        *[_job("default", b, b != "torch") for b in BACKENDS],
        _job("default", "tensorflow", False),
        *[_job("default", b, b != "torch", threads=1) for b in BACKENDS],
        _job("default", "jax", False, once=True),
        *[_job("default", b, b != "torch", data="tf.data", once=True) for b in ("jax", "torch")],
    ],
    # torch.compile alone: its first step took 300 s on the shared 2-core machine (run with --timeout 600).
    "compile": [_job("default", "torch", True)],
    "ti4": [*[_job("ti4", b, b != "torch") for b in BACKENDS], _job("ti4", "torch", False, threads=1)],
    "precision": [
        *[_job("default", "tensorflow", jit, precision) for precision in ("float32", "mixed_bfloat16")
          for jit in (True, False)],
        *[_job("default", "jax", True, precision) for precision in ("float32", "mixed_bfloat16")],
    ],
}


def worker(job, steps, fit_seconds):
    """Runs one job in this process (KERAS_BACKEND already set) and returns its figures."""
    import numpy as np
    import keras

    import keras_vit

    w = WORKLOADS[job["workload"]]
    keras.config.set_dtype_policy(job["precision"])
    model = keras_vit.ViT(patch_size=w["patch"], hidden_size=w["hidden"], num_layers=w["layers"],
                          num_heads=w["heads"], mlp_dim=w["mlp"], input_shape=(w["image"], w["image"], w["channels"]),
                          num_classes=w["classes"], classifier_activation=None)
    model.compile(optimizer=keras.optimizers.AdamW(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=job["jit"])
    short, long = steps
    rng = np.random.default_rng(0)
    x = rng.random((w["batch"] * max(short, long), w["image"], w["image"], w["channels"]), dtype="float32")
    y = rng.integers(0, w["classes"], len(x))

    def data(n):
        if job["data"] == "numpy":
            return dict(x=x[: n * w["batch"]], y=y[: n * w["batch"]], batch_size=w["batch"], shuffle=False)
        import tensorflow as tf

        ds = tf.data.Dataset.from_tensor_slices((x[: n * w["batch"]], y[: n * w["batch"]]))
        return dict(x=without_autotuning(ds.batch(w["batch"]).prefetch(2)))

    class StepTimes(keras.callbacks.Callback):
        """Times each step (Keras hands callbacks materialised logs, so a step has finished at its end)."""

        def __init__(self):
            super().__init__()
            self.times = []

        def on_train_begin(self, logs=None):
            self.fit_start = time.perf_counter()

        def on_train_batch_begin(self, batch, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            now = time.perf_counter()
            self.times.append(now - self.start)
            print(f"STEP {now - self.start:.3f}", flush=True)  # progress, for a job that times out
            if now - self.fit_start > fit_seconds:
                self.model.stop_training = True

    def fit(n):
        timer = StepTimes()
        start = time.perf_counter()
        history = model.fit(**data(n), epochs=1, verbose=0, callbacks=[timer])
        return time.perf_counter() - start, timer.times, history.history["loss"][-1]

    first_wall, first_times, _ = fit(short)
    cpu_before = sum(os.times()[:2])
    warm_wall, times, loss = fit(long)
    cores_used = (sum(os.times()[:2]) - cpu_before) / warm_wall
    median = statistics.median(times)
    deciles = statistics.quantiles(times, n=10, method="inclusive") if len(times) > 1 else [median] * 9
    return {
        "versions": f"keras {keras.__version__}, {job['backend']} {_backend_version(job['backend'])}",
        "step_s": median, "images_per_s": w["batch"] / median,
        "step_p10_s": deciles[0], "step_p90_s": deciles[-1], "steps": len(times), "first_steps": len(first_times),
        "first_fit_overhead_s": first_wall - len(first_times) * median,
        "fit_overhead_s": warm_wall - sum(times),
        "cores_used": round(cores_used, 2), "loss_finite": bool(np.isfinite(loss)),
    }


def _backend_version(backend):
    module = __import__(backend)
    return getattr(module, "__version__", "?")


def roofline_worker(size, repeats):
    os.environ["KERAS_BACKEND"] = "tensorflow"
    from matmul_peak import library_gflops

    return library_gflops(size, repeats)


def thread_settings(threads):
    """Environment variables that cap each backend's compute threads (read when it starts)."""
    n = str(threads)
    return {"OMP_NUM_THREADS": n, "TF_NUM_INTRAOP_THREADS": n, "TF_NUM_INTEROP_THREADS": n,
            "XLA_FLAGS": f"--xla_cpu_multi_thread_eigen={str(threads > 1).lower()} intra_op_parallelism_threads={n}"}


def run_worker(tags, worker_args, backend, timeout):
    """Runs one job in a fresh process under `backend`; its figures, or {"error": ...}."""
    before = cpu_jiffies()
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(worker_args)]
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               **(thread_settings(tags["threads"]) if tags.get("threads") else {}))
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as error:
        output = error.stdout.decode() if isinstance(error.stdout, bytes) else error.stdout or ""
        steps = [float(line.split()[1]) for line in output.splitlines() if line.startswith("STEP ")]
        return {**tags, "error": f"timed out after {timeout} s, {len(steps)} steps done", "step_times": steps}
    result = {**tags, "process_s": round(time.perf_counter() - start, 1), "cpu": cpu_share(before, cpu_jiffies())}
    for line in proc.stdout.splitlines()[::-1]:
        if line.startswith("RESULT "):
            return {**result, **json.loads(line[len("RESULT "):])}
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {**result, "error": " | ".join(tail)}


def label(job):
    compiler = COMPILER[job["backend"]]
    parts = [job["backend"], f"{compiler} {'on' if job['jit'] else 'off'}"]
    if job["precision"] != "float32":
        parts.append(job["precision"])
    if job["data"] != "numpy":
        parts.append(job["data"])
    if job["threads"]:
        parts.append(f"{job['threads']} thread" + "s" * (job["threads"] > 1))
    return ", ".join(parts)


def _median_range(values):
    return statistics.median(values), min(values), max(values)


def summarise(results, jobs):
    """Markdown tables: per workload, img/s median (range over rounds) and ratios to TensorFlow's."""
    peak, line = roofline_summary(results)
    lines = [line] if line else []
    for name in dict.fromkeys(j["workload"] for j in jobs):
        w = WORKLOADS[name]
        flops = 3 * vit_flops(**{k: w[k] for k in ARCH})
        limit = peak * 1e9 / flops if peak else None
        lines.append(f"\n{name}: batch {w['batch']}, {flops / 1e9:.3f} GFLOP per trained image (3x forward)"
                     + (f", roofline {limit:.0f} img/s" if limit else ""))
        lines += ["| backend, compiler | img/s median (range) | vs TensorFlow XLA | vs roofline | step s "
                  "(p10-p90 in epoch) | first-fit overhead s | fit overhead s | rounds |",
                  "|---|---|---|---|---|---|---|---|"]
        key = ("backend", "jit", "precision", "data", "threads")
        rows = {}
        for job in (j for j in jobs if j["workload"] == name):
            rows[label(job)] = [r for r in results if r.get("workload") == name and "images_per_s" in r
                                and all(r.get(k) == job[k] for k in key)]
        base = rows.get(label(_job(name, "tensorflow", True)))
        base = statistics.median(r["images_per_s"] for r in base) if base else None
        for row, rs in rows.items():
            if not rs:
                continue
            rate, low, high = _median_range([r["images_per_s"] for r in rs])
            lines.append(
                f"| {row} | {rate:.1f} ({low:.1f}-{high:.1f}) | " + (f"{rate / base:.2f}x" if base else "?")
                + " | " + (f"{rate / limit:.0%}" if limit else "?")
                + f" | {statistics.median(r['step_s'] for r in rs):.3f} "
                f"({statistics.median(r['step_p10_s'] for r in rs):.3f}-{statistics.median(r['step_p90_s'] for r in rs):.3f})"
                f" | {statistics.median(r['first_fit_overhead_s'] for r in rs):.1f}"
                f" | {statistics.median(r['fit_overhead_s'] for r in rs):.2f} | {len(rs)} |")
    shares = [r["cpu"] for r in results if r.get("cpu")]
    if shares:
        lines.append(f"\nCPU time during the jobs (/proc/stat, all processes): busy "
                     f"{min(s['busy'] for s in shares):.0%}-{max(s['busy'] for s in shares):.0%}, steal "
                     f"{min(s['steal'] for s in shares):.0%}-{max(s['steal'] for s in shares):.0%}")
    short = [r for r in results if "steps" in r and r["steps"] < r.get("long_steps", 0)]
    for r in short:
        lines.append(f"stopped early by --fit-seconds: {r['workload']} {label(r)} round {r['round']}: {r['steps']} steps")
    for r in results:
        if "error" in r:
            what = f"{r['workload']} {label(r)}" if "workload" in r else r.get("kind")
            lines.append(f"FAILED {what} round {r['round']}: {r['error']}")
    return "\n".join(lines)


def _parse_steps(parser, text):
    try:
        short, long = (int(s) for s in text.split(","))
        if short < 1 or long < 1:
            raise ValueError
    except ValueError:
        parser.error(f"--steps={text!r}: expected SHORT,LONG positive step counts, e.g. 3,12")
    return short, long


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--plan", choices=tuple(PLANS), default="backends")
    parser.add_argument("--workloads", help="comma-separated subset of the plan's workloads (default: all)")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated subset of "
                        f"{','.join(BACKENDS)} (default: all)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", default="3,12", help="SHORT,LONG: steps of the first and the warm fit")
    parser.add_argument("--fit-seconds", type=float, default=30.0, help="a fit stops after the step that passes "
                        "this many seconds (default: 30)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per job process (default: 300)")
    parser.add_argument("--quick", action="store_true", help="smoke run: the tiny model, steps 1,2, one round, "
                        "each backend's default compiler, a small roofline")
    parser.add_argument("--out", help="folder for backends-<plan>-<time>.jsonl and .md")
    parser.add_argument("--first-round", type=int, default=0, help="number of the first round; jobs marked "
                        "once run only in round 0 (continues an earlier run; default: 0)")
    parser.add_argument("--roofline", action=argparse.BooleanOptionalAction, default=True,
                        help="measure the matmul roofline in every round (default: on)")
    parser.add_argument("--match", help="run only the plan's jobs whose label (as in the tables) contains this text")
    parser.add_argument("--summarise", metavar="JSONL", nargs="+", help="print the tables of earlier runs' .jsonl "
                        "files and exit")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    short, long = _parse_steps(parser, args.steps)
    if args.summarise:
        results = []
        for path in args.summarise:
            with open(path) as f:
                results += [json.loads(line) for line in f]
        print(summarise(results, [r for r in results if "workload" in r]))
        return results
    if args.worker:
        spec = json.loads(args.worker)
        if spec["kind"] == "roofline":
            result = roofline_worker(spec["size"], spec["repeats"])
        else:
            result = worker(spec["job"], spec["steps"], spec["fit_seconds"])
        print("RESULT " + json.dumps(result))
        return None
    backends = args.backends.split(",")
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        parser.error(f"--backends={args.backends!r} names {unknown}; expected some of {list(BACKENDS)}")
    if args.rounds < 1:
        parser.error(f"--rounds={args.rounds}: expected a positive integer")
    jobs = PLANS[args.plan]
    roofline = {"kind": "roofline", "size": 3072, "repeats": 10}
    if args.quick:
        jobs = [_job("tiny", b, b != "torch") for b in BACKENDS]  # each backend's default
        short, long, args.rounds = 1, 2, 1
        roofline = {"kind": "roofline", "size": 256, "repeats": 2}
    if args.workloads:
        wanted = args.workloads.split(",")
        known = sorted({j["workload"] for j in jobs})
        if any(w not in known for w in wanted):
            parser.error(f"--workloads={args.workloads!r}: expected some of {known} for --plan {args.plan}")
        jobs = [j for j in jobs if j["workload"] in wanted]
    jobs = [j for j in jobs if j["backend"] in backends and (not args.match or args.match in label(j))]

    name, bf16 = cpu_info()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    header = (f"{stamp}; CPU: {name}, {os.cpu_count()} cores, native bfloat16: {', '.join(bf16) or 'none'}; "
              f"load average before: {loadavg()}\n"
              f"command: python benchmarks/backends.py {' '.join(sys.argv[1:] if argv is None else argv)}")
    print(header, flush=True)
    out_path = None
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        out_path = os.path.join(args.out, time.strftime(f"backends-{args.plan}-%Y%m%d-%H%M%S", time.gmtime()))
    results = []
    for round_index in range(args.first_round, args.first_round + args.rounds):
        todo = [(roofline, "tensorflow", {"kind": "roofline"})] if args.roofline else []
        todo += [({"kind": "fit", "job": j, "steps": (short, long), "fit_seconds": args.fit_seconds}, j["backend"], j)
                 for j in jobs if round_index == 0 or not j["once"]]
        for spec, backend, tags in todo:
            result = {**tags, "round": round_index, "long_steps": long,
                      **run_worker(tags, spec, backend, args.timeout)}
            results.append(result)
            print(json.dumps(result), flush=True)
            if out_path:
                with open(out_path + ".jsonl", "a") as f:
                    f.write(json.dumps(result) + "\n")
    table = summarise(results, jobs)
    print("\n" + table)
    if out_path:
        with open(out_path + ".md", "w") as f:
            f.write(header + "\n" + table + "\n")
    return results


if __name__ == "__main__":
    main()
