"""matmul-peak: matrix-product peak of this machine through TensorFlow, to compare machines' figures.

VIT_FACTS.md gives its machine's peak for a 3072 x 3072 product (about 420 GFLOP/s float32 and
775 bfloat16 with oneDNN, 320 bfloat16 under XLA). Running the same measurement here says how
much of a gap in training figures the machine itself explains. Not a test.

    python -m benchmarks matmul-peak [--size 3072 --repeats 10] [--out DIR]

Prints GFLOP/s for float32 and bfloat16, each with and without XLA (best of three timings of
`repeats` products), plus the CPU model and whether it has native bfloat16 (avx512_bf16/amx),
then float32 through NumPy and PyTorch too, and the best of all: the machine's matmul peak; and
bfloat16 through PyTorch, the kernels Keras-on-PyTorch and timm reach (RESULTS "bfloat16 on AMX").
"""

from __future__ import annotations

import argparse

from benchmarks.timing import best_time
from benchmarks.workers import ResultLog


def gflops(size, dtype, jit_compile, repeats):
    """Best-of-three GFLOP/s of `repeats` chained size x size products."""
    import tensorflow as tf

    a = tf.cast(tf.random.normal((size, size)), dtype)

    @tf.function(jit_compile=jit_compile)
    def products(x):
        for _ in range(repeats):
            x = tf.matmul(x, a) * tf.cast(1.0 / size, dtype)  # the scale keeps values finite
        return x

    return 2 * size**3 * repeats / best_time(lambda: products(a).numpy()) / 1e9


def library_gflops(size=3072, repeats=10):
    """Float32 size x size GFLOP/s through each matmul library installed here, and the machine's peak.

    XLA is what keras_vit trains with, TensorFlow without XLA calls oneDNN, NumPy its BLAS and
    PyTorch (where installed) its own kernels; the best of them is the machine's roofline, so
    that a model is not measured against a slower library than its competitors use.

    >>> rates = library_gflops(64, 1)
    >>> {"xla", "tensorflow", "numpy"} <= set(rates["by_library"]), rates["gflops"] == max(rates["by_library"].values())
    (True, True)
    """
    import numpy as np

    rates = {"xla": gflops(size, "float32", True, repeats), "tensorflow": gflops(size, "float32", False, repeats)}
    a = np.random.default_rng(0).standard_normal((size, size), dtype=np.float32)
    rates["numpy"] = 2 * size**3 * repeats / best_time(lambda: [a @ a for _ in range(repeats)]) / 1e9
    try:
        import torch
    except ImportError:
        pass
    else:
        t = torch.from_numpy(a)
        rates["torch"] = 2 * size**3 * repeats / best_time(lambda: [t @ t for _ in range(repeats)]) / 1e9
    best = max(rates, key=rates.get)
    return {"gflops": rates[best], "best": best, "by_library": rates}


def torch_bfloat16_gflops(size, repeats):
    """bfloat16 size x size GFLOP/s through PyTorch (oneDNN; AMX tiles where the CPU has them); None without torch."""
    try:
        import torch
    except ImportError:
        return None
    t = torch.randn(size, size).to(torch.bfloat16)
    return 2 * size**3 * repeats / best_time(lambda: [t @ t for _ in range(repeats)]) / 1e9


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks matmul-peak", description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=3072)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", help="folder for matmul-peak-<hardware>-<time>.jsonl and .md")
    args = parser.parse_args(argv)
    import tensorflow as tf

    log = ResultLog("matmul-peak", args.out, argv)
    peak = library_gflops(args.size, args.repeats)  # float32 with and without XLA among them
    rates = {("float32", False): peak["by_library"]["tensorflow"], ("float32", True): peak["by_library"]["xla"]}
    lines = []
    for dtype in ("float32", "bfloat16"):
        for jit in (False, True):
            rate = rates.get((dtype, jit)) or gflops(args.size, dtype, jit, args.repeats)
            log.add({"dtype": dtype, "xla": jit, "size": args.size, "gflops": rate, "tensorflow": tf.__version__},
                    echo=False)
            lines.append(f"{dtype:8s} XLA {'on ' if jit else 'off'}: {rate:6.1f} GFLOP/s ({args.size}x{args.size}, "
                         f"TF {tf.__version__})")
    log.add({"kind": "roofline", "size": args.size, **peak}, echo=False)
    lines.append("float32 by library: " + ", ".join(f"{k} {v:.1f}" for k, v in peak["by_library"].items())
                 + f" GFLOP/s; machine peak {peak['gflops']:.1f} ({peak['best']})")
    torch_rate = torch_bfloat16_gflops(args.size, args.repeats)
    if torch_rate is not None:
        log.add({"dtype": "bfloat16", "library": "torch", "size": args.size, "gflops": torch_rate}, echo=False)
        lines.append(f"bfloat16 through PyTorch (the kernels Keras-on-PyTorch and timm reach): {torch_rate:.1f} GFLOP/s")
    log.summary("\n".join(lines))
    return peak
