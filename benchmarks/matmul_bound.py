"""matmul-bound: the fastest a ViT training step could run here if everything but its matrix products took no time.

Times each matrix product of one training step of a training workload, in the form
autodiff produces it (forward, input gradient dY @ W^T, kernel gradient X^T @ dY, and the batched
attention products and their gradients), once through XLA (what keras_vit trains with on
TensorFlow) and once through each other library installed here (TensorFlow's oneDNN without XLA,
PyTorch), each product on its own, best of --repeats, less the library's cost of one call
(measured on a 1 x 1 product). The sum per step estimates the matrix products' share of a step
computed with that library, and batch / sum the most images per second such a step can reach.
An estimate, not a proof: inside a compiled step XLA may run independent products side by side
and its threads are already awake, so compare with the profile of a real step
(`python -m benchmarks profile`) before leaning on small differences.

    python -m benchmarks matmul-bound [--workload train_ti4] [--rounds 3] [--out DIR]
"""

from __future__ import annotations

import argparse
import statistics

from benchmarks.timing import best_time
from benchmarks.workers import ResultLog
from benchmarks.workloads import TRAINING, WORKLOADS, architecture, vit_flops, workload  # noqa: F401 (doctest)


def step_products(w):
    """[("part: pass", batch count, m, k, n, transpose_a, transpose_b)] of one training step, each once per use.

    >>> products = step_products(WORKLOADS["train_default"])
    >>> flops = sum(2 * b * m * k * n for _, b, m, k, n, _, _ in products)
    >>> round(flops / (3 * vit_flops(**architecture(WORKLOADS["train_default"])) * 256), 2)
    1.0
    """
    batch, dim, heads, mlp = w["batch"], w["hidden"], w["heads"], w["mlp"]
    grid = (w["image"] // w["patch"]) ** 2
    tokens, width = grid + 1, dim // heads
    rows = batch * tokens
    products = []

    def dense(what, m, k, n, copies=1, input_gradient=True):
        for _ in range(copies):
            products.append((f"{what}: forward", 1, m, k, n, False, False))
            if input_gradient:
                products.append((f"{what}: input gradient", 1, m, n, k, False, True))
            products.append((f"{what}: kernel gradient", 1, k, m, n, True, False))

    dense("patch embedding", batch * grid, w["patch"] ** 2 * w["channels"], dim, input_gradient=False)
    for _ in range(w["layers"]):
        dense("query/key/value", rows, dim, dim, copies=3)
        dense("attention output", rows, dim, dim)
        dense("MLP in", rows, dim, mlp)
        dense("MLP out", rows, mlp, dim)
        pairs = batch * heads
        products += [  # scores = q k^T and context = a v, then the gradients of each operand
            ("attention scores: forward", pairs, tokens, width, tokens, False, True),
            ("attention scores: gradients", pairs, tokens, tokens, width, False, False),
            ("attention scores: gradients", pairs, tokens, tokens, width, True, False),
            ("attention context: forward", pairs, tokens, tokens, width, False, False),
            ("attention context: gradients", pairs, tokens, width, tokens, False, True),
            ("attention context: gradients", pairs, tokens, tokens, width, True, False),
        ]
    dense("head", batch, dim, w["classes"])
    return products


def _operands(b, m, k, n, transpose_a, transpose_b, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    a = rng.standard_normal((b, k, m) if transpose_a else (b, m, k), dtype=np.float32)
    c = rng.standard_normal((b, n, k) if transpose_b else (b, k, n), dtype=np.float32)
    return (a[0], c[0]) if b == 1 else (a, c)


def time_products(products, library, repeats=5):
    """{(b, m, k, n, transpose_a, transpose_b): best seconds, less one call's} of each product through `library`."""
    import tensorflow as tf

    shapes = {p[1:] for p in products}
    seconds = {}
    for shape in [(1, 1, 1, 1, False, False)] + sorted(shapes):
        a, c = _operands(*shape)
        transpose_a, transpose_b = shape[-2:]
        if library == "torch":
            import torch

            a, c = torch.from_numpy(a), torch.from_numpy(c)
            ta, tc = (a.mT if transpose_a else a), (c.mT if transpose_b else c)
            seconds[shape] = best_time(lambda ta=ta, tc=tc: torch.matmul(ta, tc), repeats)
            continue
        fn = tf.function(lambda x, y, ta=transpose_a, tb=transpose_b: tf.linalg.matmul(x, y, transpose_a=ta, transpose_b=tb),
                         jit_compile=library == "xla")
        a, c = tf.constant(a), tf.constant(c)
        seconds[shape] = best_time(lambda fn=fn, a=a, c=c: fn(a, c), repeats)  # synchronous on CPU
    call = seconds.pop((1, 1, 1, 1, False, False))
    return {shape: max(t - call, 0.0) for shape, t in seconds.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks matmul-bound", description=__doc__.split("\n")[0])
    parser.add_argument("--workload", default="train_ti4", choices=TRAINING)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of all libraries, alternating")
    parser.add_argument("--repeats", type=int, default=5, help="timings per product and round (best counts)")
    parser.add_argument("--out", help="folder for matmul-bound-<hardware>-<time>.jsonl and .md")
    args = parser.parse_args(argv)
    w = workload(args.workload)
    products = step_products(w)
    libraries = ["xla", "tensorflow"]
    try:
        import torch

        libraries.append("torch")
        print(f"torch {torch.__version__} ({torch.get_num_threads()} threads)")
    except ImportError:
        pass
    log = ResultLog("matmul-bound", args.out, argv)
    flops = sum(2 * b * m * k * n for _, b, m, k, n, _, _ in products)
    print(f"{args.workload}: batch {w['batch']}, {len(products)} matrix products per training step, "
          f"{flops / 1e9:.1f} GFLOP", flush=True)
    step_seconds = {library: [] for library in libraries}
    by_part = {library: {} for library in libraries}
    for round_index in range(args.rounds):
        for library in libraries:
            seconds = time_products(products, library, args.repeats)
            step_seconds[library].append(sum(seconds[p[1:]] for p in products))
            for p in products:
                by_part[library].setdefault(p[0].split(":")[0], []).append(seconds[p[1:]] / args.rounds)
            log.add({"workload": args.workload, "library": library, "round": round_index,
                     "step_s": step_seconds[library][-1], "gflop": flops / 1e9})
    lines = ["| library | matrix products, s per step: median (range) | GFLOP/s | bound: images/s at most |",
             "|---|---|---|---|"]
    for library, values in step_seconds.items():
        median = statistics.median(values)
        lines.append(f"| {library} | {median:.3f} ({min(values):.3f}-{max(values):.3f}) | {flops / median / 1e9:.0f} | "
                     f"{w['batch'] / median:.1f} |")
    lines.append("\nseconds per step by part (mean over rounds):")
    for part in by_part[libraries[0]]:
        lines.append(f"  {part:28s} " + "  ".join(f"{library} {sum(by_part[library][part]):.3f}" for library in libraries))
    log.summary("\n".join(lines))
    return step_seconds
