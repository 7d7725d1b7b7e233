"""timm's CPU training step under different torch thread settings, alternating in one process.

Why compare.py's timm figure can be far too low on a shared machine: PyTorch's OpenMP threads
meet at a barrier after every parallel operation, so when another process holds one of the
cores, each operation waits for the descheduled thread. TensorFlow's work-sharing thread pool
does not wait that way. This script times timm's training step (compare.py's model, AdamW,
one repeated batch) with each setting in turn, several rounds, and prints the medians.

    python benchmarks/torch_threads.py [--workload train_default] [--threads 1,2] [--rounds 3]
        [--steps 3] [--flush-denormal]
"""

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", default="train_default", choices=("train_default", "train_ti4"))
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per setting and round")
    parser.add_argument("--flush-denormal", action="store_true", help="torch.set_flush_denormal(True)")
    args = parser.parse_args(argv)
    import torch
    from compare import WORKLOADS, _random_batch, import_timm
    from machine import cpu_info, cpu_jiffies, cpu_share, loadavg

    timm = import_timm()
    from timm.models.vision_transformer import VisionTransformer

    if args.flush_denormal:
        torch.set_flush_denormal(True)
    w = WORKLOADS[args.workload]
    torch.manual_seed(0)
    model = VisionTransformer(img_size=w["image"], patch_size=w["patch"], in_chans=w["channels"],
                              num_classes=w["classes"], embed_dim=w["hidden"], depth=w["layers"],
                              num_heads=w["heads"], mlp_ratio=w["mlp"] / w["hidden"])
    x, y = _random_batch(w)
    x, y = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(), torch.from_numpy(y)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        optimizer.step()

    settings = [int(t) for t in args.threads.split(",")]
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {cpu_info()[0]}, {os.cpu_count()} cores; "
          f"load {loadavg()}; timm {timm.__version__}, torch {torch.__version__}, "
          f"default threads {torch.get_num_threads()}, flush denormal {args.flush_denormal}\n"
          f"command: python benchmarks/torch_threads.py {' '.join(sys.argv[1:] if argv is None else argv)}", flush=True)
    step()
    times, before = {t: [] for t in settings}, cpu_jiffies()
    for round_index in range(args.rounds):
        for threads in settings:
            torch.set_num_threads(threads)
            step()  # the first step after a change of thread count starts the new threads
            start = time.perf_counter()
            for _ in range(args.steps):
                step()
            times[threads].append((time.perf_counter() - start) / args.steps)
        print(f"round {round_index}: " + ", ".join(f"{t} threads {times[t][-1]:.2f} s" for t in settings), flush=True)
    print(f"\n{args.workload}, batch {w['batch']}; CPU during the rounds: {cpu_share(before, cpu_jiffies())}")
    for threads in settings:
        median = statistics.median(times[threads])
        print(f"{threads} threads: {median:.2f} s/step ({min(times[threads]):.2f}-{max(times[threads]):.2f}), "
              f"{w['batch'] / median:.0f} img/s")


if __name__ == "__main__":
    main()
