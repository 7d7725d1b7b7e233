"""torch-threads: timm's CPU training step under different torch thread settings, alternating in one process.

Why the compare figure for timm can be far too low on a shared machine: PyTorch's OpenMP threads
meet at a barrier after every parallel operation, so when another process holds one of the
cores, each operation waits for the descheduled thread. TensorFlow's work-sharing thread pool
does not wait that way. This times timm's training step (compare's model, AdamW, one repeated
batch) with each setting in turn, several rounds, and prints the medians.

    python -m benchmarks torch-threads [--workload train_default] [--threads 1,2] [--rounds 3]
        [--steps 3] [--flush-denormal] [--out DIR]
"""

from __future__ import annotations

import argparse

from benchmarks import timing
from benchmarks.jobs import timm_training_step
from benchmarks.machine import cpu_jiffies, cpu_share
from benchmarks.workers import ResultLog
from benchmarks.workloads import TRAINING, workload


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks torch-threads", description=__doc__.split("\n")[0])
    parser.add_argument("--workload", default="train_default", choices=TRAINING)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per setting and round")
    parser.add_argument("--flush-denormal", action="store_true", help="torch.set_flush_denormal(True)")
    parser.add_argument("--out", help="folder for torch-threads-<hardware>-<time>.jsonl and .md")
    args = parser.parse_args(argv)
    import torch

    if args.flush_denormal:
        torch.set_flush_denormal(True)
    w = workload(args.workload)
    torch.manual_seed(0)
    step, _, _, timm_version = timm_training_step(w)
    settings = [int(t) for t in args.threads.split(",")]
    log = ResultLog("torch-threads", args.out, argv)
    print(f"timm {timm_version}, torch {torch.__version__}, default threads {torch.get_num_threads()}, "
          f"flush denormal {args.flush_denormal}", flush=True)
    run = timing.loop_epochs(step)
    run(1)
    times, before = {t: [] for t in settings}, cpu_jiffies()
    for round_index in range(args.rounds):
        for threads in settings:
            torch.set_num_threads(threads)
            run(1)  # the first step after a change of thread count starts the new threads
            times[threads].append(run(args.steps).wall_s / args.steps)
            log.add({"workload": args.workload, "threads": threads, "round": round_index, "step_s": times[threads][-1]},
                    echo=False)
        print(f"round {round_index}: " + ", ".join(f"{t} threads {times[t][-1]:.2f} s" for t in settings), flush=True)
    lines = [f"{args.workload}, batch {w['batch']}; CPU during the rounds: {cpu_share(before, cpu_jiffies())}"]
    for threads in settings:
        median = timing.median_range(times[threads])[0]
        lines.append(f"{threads} threads: {timing.fmt_range(times[threads], 2)} s/step, {w['batch'] / median:.0f} img/s")
    log.summary("\n".join(lines))
    return times
