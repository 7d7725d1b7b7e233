"""step: training images/s of the set-ups named on the command line (implementation x precision x
XLA x Keras backend x threads), each in its own worker process, alternating in rounds.

The jobs, timing and table of `backends` (a first `fit` of SHORT steps, then a warm one of LONG
steps; images/s from the median single step), for any workload of `benchmarks/workloads.py`
with fields overridden by --set. This is where "which precision and XLA setting is fastest on
this machine" is answered side by side:

    python -m benchmarks step --precisions float32,mixed_bfloat16 --jit on,off --rounds 3
    python -m benchmarks step --workload train_default --set patch=4 --impls keras_vit,keras_hub --steps 3,20
    python -m benchmarks step --workload tiny --steps 1,2 --rounds 1     # smoke run

Data: one in-memory batch repeated through tf.data without autotuning (--data repeated), or
the arrays passed to `fit` (numpy) or through tf.data (tf.data).
"""

from __future__ import annotations

import argparse
import itertools

from benchmarks.backends import BACKENDS, _job, run_jobs, summarise
from benchmarks.compare import check_names, parse_steps
from benchmarks.workers import ResultLog
from benchmarks.workloads import KERAS_IMPLS, TRAINING, parse_overrides, workload


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks step", description=__doc__.split("\n")[0])
    parser.add_argument("--workload", default="train_default", choices=TRAINING)
    parser.add_argument("--set", help="workload fields to override, e.g. patch=4,batch=128")
    parser.add_argument("--impls", default="keras_vit", help=f"some of {','.join(KERAS_IMPLS)}")
    parser.add_argument("--precisions", default="float32", help="Keras dtype policies, e.g. float32,mixed_bfloat16")
    parser.add_argument("--jit", default="on", help="on, off or on,off (XLA / jit / torch.compile)")
    parser.add_argument("--backends", default="tensorflow", help=f"some of {','.join(BACKENDS)}")
    parser.add_argument("--threads", default="0", help="compute threads per job, 0 = the backend's default; e.g. 0,1")
    parser.add_argument("--data", default="repeated", choices=("repeated", "numpy", "tf.data"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", default="3,40", help="SHORT,LONG: steps of the first and the warm fit")
    parser.add_argument("--fit-seconds", type=float, default=120.0, help="a fit stops after the step that passes this")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per job process")
    parser.add_argument("--out", help="folder for step-<hardware>-<time>.jsonl and .md")
    args = parser.parse_args(argv)
    short, long = parse_steps(parser, args.steps, strictly_increasing=False)
    overrides = parse_overrides(args.set)
    workload(args.workload, overrides)  # refuses unknown fields before any process starts
    impls = check_names(parser, "--impls", args.impls, KERAS_IMPLS)
    backends = check_names(parser, "--backends", args.backends, BACKENDS)
    jits = [{"on": True, "off": False}[j] for j in check_names(parser, "--jit", args.jit, ("on", "off"))]
    try:
        threads = [int(t) or None for t in args.threads.split(",")]
    except ValueError:
        parser.error(f"--threads={args.threads!r}: expected integers, e.g. 0,1")
    jobs = [_job(args.workload, b, jit, precision, args.data, t, impl=impl) for impl, b, precision, jit, t in
            itertools.product(impls, backends, args.precisions.split(","), jits, threads)]
    log = ResultLog("step", args.out, argv)
    results = run_jobs(jobs, log, (short, long), args.rounds, fit_seconds=args.fit_seconds, timeout=args.timeout,
                       overrides=overrides)
    log.summary(summarise(results, jobs, overrides))
    return results
