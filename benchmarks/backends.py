"""backends: `model.fit` training throughput of one keras_vit model on the TensorFlow, JAX and PyTorch backends.

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
recorded. The matmul roofline (`matmul_peak.library_gflops`: float32, 3072^3, the best of XLA,
TensorFlow's oneDNN, NumPy and PyTorch) runs in its own process each round; /proc/stat busy
and steal shares come with every job.

    python -m benchmarks backends [--plan backends|compile|ti4|precision] [--workloads default,ti4]
        [--backends tensorflow,jax,torch] [--rounds 2] [--steps 3,12] [--out benchmarks/results]
    python -m benchmarks backends --summarise benchmarks/results/backends-<plan>-*.jsonl ...
    python -m benchmarks backends --quick    # smoke run: tiny model, 1 + 2 steps, one round

`python -m benchmarks step` runs the same jobs for set-ups named on its command line.
"""

from __future__ import annotations

import argparse
import statistics

from benchmarks.compare import check_names, cpu_line, parse_steps, roofline_summary
from benchmarks.timing import median_range
from benchmarks.workers import ResultLog, read_results, run_worker
from benchmarks.workloads import architecture, vit_flops, workload

BACKENDS = ("tensorflow", "jax", "torch")
COMPILER = {"tensorflow": "XLA", "jax": "jit", "torch": "torch.compile"}


def _job(workload, backend, jit, precision="float32", data="numpy", threads=None, once=False, impl="keras_vit"):
    return dict(workload=workload, backend=backend, jit=jit, precision=precision, data=data, threads=threads,
                once=once, impl=impl)


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


def thread_settings(threads):
    """Environment variables that cap each backend's compute threads (read when it starts)."""
    n = str(threads)
    return {"OMP_NUM_THREADS": n, "TF_NUM_INTRAOP_THREADS": n, "TF_NUM_INTEROP_THREADS": n,
            "XLA_FLAGS": f"--xla_cpu_multi_thread_eigen={str(threads > 1).lower()} intra_op_parallelism_threads={n}"}


def run_job(tags, spec, backend, timeout):
    """Runs one job (or the roofline) in a worker process under `backend`; its figures, or {"error": ...}."""
    env = dict(KERAS_BACKEND=backend, **(thread_settings(tags["threads"]) if tags.get("threads") else {}))
    if spec["kind"] == "roofline":
        return {**tags, **run_worker("benchmarks.jobs:roofline_job", {"size": spec["size"], "repeats": spec["repeats"]},
                                     env=env, timeout=timeout)}
    job = spec["job"]
    kwargs = {"impl": job.get("impl", "keras_vit"), "workload_name": job["workload"], "steps": spec["steps"],
              "jit": job["jit"], "precision": job["precision"], "data": job["data"], "fit_seconds": spec["fit_seconds"],
              "overrides": spec.get("overrides"), "progress": True}
    return {**tags, **run_worker("benchmarks.jobs:keras_job", kwargs, env=env, timeout=timeout)}


def label(job):
    compiler = COMPILER[job["backend"]]
    parts = [job["backend"], f"{compiler} {'on' if job['jit'] else 'off'}"]
    if job["precision"] != "float32":
        parts.append(job["precision"])
    if job.get("impl", "keras_vit") != "keras_vit":
        parts.insert(0, job["impl"])
    if job["data"] != "numpy":
        parts.append(job["data"])
    if job["threads"]:
        parts.append(f"{job['threads']} thread" + "s" * (job["threads"] > 1))
    return ", ".join(parts)


def summarise(results, jobs, overrides=None):
    """Markdown tables: per workload, img/s median (range over rounds) and ratios to TensorFlow XLA's
    (or, where that set-up did not run, to the first set-up's)."""
    peak, line = roofline_summary(results)
    lines = [line] if line else []
    for name in dict.fromkeys(j["workload"] for j in jobs):
        w = workload(name, overrides)
        flops = 3 * vit_flops(**architecture(w))
        limit = peak * 1e9 / flops if peak else None
        lines.append(f"\n{name}: batch {w['batch']}, {flops / 1e9:.3f} GFLOP per trained image (3x forward)"
                     + (f", roofline {limit:.0f} img/s" if limit else ""))
        lines += ["| backend, compiler | img/s median (range) | vs TensorFlow XLA (or first row) | vs roofline | step s "
                  "(p10-p90 in epoch) | first-fit overhead s | fit overhead s | rounds |",
                  "|---|---|---|---|---|---|---|---|"]
        key = ("backend", "jit", "precision", "data", "threads")
        rows = {}
        for job in (j for j in jobs if j["workload"] == name):
            rows[label(job)] = [r for r in results if r.get("workload") == name and "images_per_s" in r
                                and all(r.get(k) == job[k] for k in key)
                                and r.get("impl", "keras_vit") == job.get("impl", "keras_vit")]
        base = rows.get(label(_job(name, "tensorflow", True))) or next((rs for rs in rows.values() if rs), None)
        base = statistics.median(r["images_per_s"] for r in base) if base else None
        for row, rs in rows.items():
            if not rs:
                continue
            rate, low, high = median_range(r["images_per_s"] for r in rs)
            lines.append(
                f"| {row} | {rate:.1f} ({low:.1f}-{high:.1f}) | " + (f"{rate / base:.2f}x" if base else "?")
                + " | " + (f"{rate / limit:.0%}" if limit else "?")
                + f" | {statistics.median(r['step_s'] for r in rs):.3f} "
                f"({statistics.median(r['step_p10_s'] for r in rs):.3f}-{statistics.median(r['step_p90_s'] for r in rs):.3f})"
                f" | {statistics.median(r['first_fit_overhead_s'] for r in rs):.1f}"
                f" | {statistics.median(r['fit_overhead_s'] for r in rs):.2f} | {len(rs)} |")
    lines += cpu_line(results)
    short = [r for r in results if "steps" in r and r["steps"] < r.get("long_steps", 0)]
    for r in short:
        lines.append(f"stopped early by --fit-seconds: {r['workload']} {label(r)} round {r['round']}: {r['steps']} steps")
    for r in results:
        if "error" in r:
            what = f"{r['workload']} {label(r)}" if "workload" in r else r.get("kind")
            lines.append(f"FAILED {what} round {r['round']}: {r['error']}")
    return "\n".join(lines)


def run_jobs(jobs, log, steps, rounds, first_round=0, fit_seconds=30.0, timeout=300, roofline=None,
             overrides=None):
    """Runs `jobs` (and the roofline, if given) round after round, alternating; every result logged."""
    results = []
    for round_index in range(first_round, first_round + rounds):
        todo = [(roofline, "tensorflow", {"kind": "roofline"})] if roofline else []
        todo += [({"kind": "fit", "job": j, "steps": list(steps), "fit_seconds": fit_seconds, "overrides": overrides},
                  j["backend"], j) for j in jobs if round_index == 0 or not j["once"]]
        for spec, backend, tags in todo:
            result = {**tags, "round": round_index, "long_steps": steps[1], **run_job(tags, spec, backend, timeout)}
            results.append(result)
            log.add(result)
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks backends", description=__doc__.split("\n")[0])
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
    parser.add_argument("--out", help="folder for backends-<plan>-<hardware>-<time>.jsonl and .md")
    parser.add_argument("--first-round", type=int, default=0, help="number of the first round; jobs marked "
                        "once run only in round 0 (continues an earlier run; default: 0)")
    parser.add_argument("--roofline", action=argparse.BooleanOptionalAction, default=True,
                        help="measure the matmul roofline in every round (default: on)")
    parser.add_argument("--match", help="run only the plan's jobs whose label (as in the tables) contains this text")
    parser.add_argument("--summarise", metavar="JSONL", nargs="+", help="print the tables of earlier runs' .jsonl "
                        "files and exit")
    args = parser.parse_args(argv)
    short, long = parse_steps(parser, args.steps, strictly_increasing=False)
    if args.summarise:
        results = read_results(args.summarise)
        print(summarise(results, [r for r in results if "workload" in r]))
        return results
    backends = check_names(parser, "--backends", args.backends, BACKENDS)
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
    log = ResultLog("backends", args.out, argv, tag=args.plan)
    results = run_jobs(jobs, log, (short, long), args.rounds, args.first_round, args.fit_seconds, args.timeout,
                       roofline if args.roofline else None)
    log.summary(summarise(results, jobs))
    return results
