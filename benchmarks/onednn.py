"""onednn: a training step with TensorFlow's oneDNN kernels off and on, processes alternating.

TensorFlow reads TF_ENABLE_ONEDNN_OPTS once, when it is imported, so each setting needs its own
process: the rounds alternate a worker with the variable at 0 and one at 1, each building the
same keras_vit model (random weights: the step's time does not depend on them), compiling it with
a keras_vit recipe (`lpft` by default: the fine-tuning after a probe, which `keras-vit train
--weights` runs without XLA on TensorFlow) and timing `train_on_batch` on one random batch after
a warm-up. A process's speed on a shared VM varies by up to a third from one process to the next,
so the pairs' ratios are printed one by one, and their median. Under XLA (`--jit on`) the compiled
program is the same either way: that run measures the noise between processes.

    python -m benchmarks onednn [--workload ti4] [--set batch=32] [--recipe lpft] [--jit off]
        [--pairs 3] [--steps 20] [--warmup 3] [--out DIR]
"""

from __future__ import annotations

import argparse
import statistics

from benchmarks import timing
from benchmarks.workers import ResultLog, run_worker
from benchmarks.workloads import TRAINING, parse_overrides, random_batch, vit_arguments, workload
from keras_vit.machine import ONEDNN_VARIABLE as VARIABLE


def step_time(workload_name, overrides, recipe, jit_compile, steps, warmup):
    """The worker: median seconds of one `train_on_batch` of workload `workload_name` under `recipe`."""
    import os

    import keras

    import keras_vit
    from keras_vit.training import recipes

    w = workload(workload_name, overrides)
    model = keras_vit.ViT(**vit_arguments(w))
    r = recipes.get_recipe(recipe)
    optimizer = recipes.make_optimizer(r, model, recipes.make_schedule(r, w["batch"], 10, 100))
    model.compile(optimizer=optimizer, loss=recipes.make_loss(r, model), jit_compile=jit_compile)
    recipes.build_optimizer_variables(model)
    x, labels = random_batch(w)
    y = keras.utils.to_categorical(labels, w["classes"])
    run = timing.loop_epochs(lambda: model.train_on_batch(x, y))
    run(warmup)
    return {"step_s": statistics.median(run(steps).step_s), "variable": os.environ.get(VARIABLE, "unset"),
            "keras_vit_onednn": keras_vit.machine.ONEDNN}


def _steal(result):
    share = result.get("cpu") or {}
    return f"{share['steal']:.0%}" if "steal" in share else "unknown"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks onednn", description=__doc__.split("\n")[0])
    parser.add_argument("--workload", default="ti4", choices=TRAINING)
    parser.add_argument("--set", default="batch=32", help="FIELD=INT overrides of the workload, e.g. batch=32")
    parser.add_argument("--recipe", default="lpft", help="a keras_vit.training recipe name")
    parser.add_argument("--jit", default="off", choices=("on", "off"), help="XLA for the step")
    parser.add_argument("--pairs", type=int, default=3, help="rounds of one process per setting")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per process")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (tracing, compilation)")
    parser.add_argument("--out", help="folder for onednn-<hardware>-<time>.jsonl and .md")
    args = parser.parse_args(argv)
    for name in ("pairs", "steps", "warmup"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}={getattr(args, name)}: expected at least 1")
    overrides = parse_overrides(args.set)
    w = workload(args.workload, overrides)  # refuses an unknown field here, not in a worker
    log = ResultLog("onednn", args.out, argv)
    kwargs = dict(workload_name=args.workload, overrides=overrides, recipe=args.recipe,
                  jit_compile=args.jit == "on", steps=args.steps, warmup=args.warmup)
    ratios, figures = [], {"0": [], "1": []}
    for pair in range(args.pairs):
        result = {}
        for value in ("0", "1"):
            result[value] = run_worker("benchmarks.onednn:step_time", kwargs, env={VARIABLE: value})
            log.add({"pair": pair, VARIABLE: value, **result[value]}, echo=False)
            if "error" in result[value]:
                raise SystemExit(f"onednn: the worker with {VARIABLE}={value} failed: {result[value]['error']}")
            figures[value].append(result[value]["step_s"])
        ratios.append(result["0"]["step_s"] / result["1"]["step_s"])
        print(f"pair {pair}: off {result['0']['step_s']:.3f} s, on {result['1']['step_s']:.3f} s, "
              f"on is {ratios[-1]:.2f}x; steal {_steal(result['0'])} / {_steal(result['1'])}",
              flush=True)
    lines = [f"{args.workload} ({args.set}), batch {w['batch']}, recipe {args.recipe}, XLA {args.jit}, "
             f"{args.pairs} pairs x {args.steps} steps",
             "| oneDNN | step s, median (range) | img/s |", "|---|---|---|"]
    for value, label in (("0", "off"), ("1", "on")):
        median = statistics.median(figures[value])
        lines.append(f"| {label} | {median:.3f} ({min(figures[value]):.3f}-{max(figures[value]):.3f}) "
                     f"| {w['batch'] / median:.1f} |")
    lines.append(f"on against off, pair by pair: {', '.join(f'{r:.2f}x' for r in ratios)}; "
                 f"median {statistics.median(ratios):.2f}x")
    log.summary("\n".join(lines))
    return ratios
