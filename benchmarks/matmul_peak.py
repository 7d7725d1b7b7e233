"""Matrix-product peak of this machine through TensorFlow, to compare machines' figures.

VIT_FACTS.md gives its machine's peak for a 3072 x 3072 product (about 420 GFLOP/s float32 and
775 bfloat16 with oneDNN, 320 bfloat16 under XLA). Running the same measurement here says how
much of a gap in training figures the machine itself explains. Not a test.

    python benchmarks/matmul_peak.py [--size 3072 --repeats 10]

Prints GFLOP/s for float32 and bfloat16, each with and without XLA (best of three timings of
`repeats` products), plus the CPU model and whether it has native bfloat16 (avx512_bf16/amx),
then float32 through NumPy and PyTorch too, and the best of all: the machine's matmul peak.
"""

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorflow as tf  # noqa: E402
from machine import cpu_info  # noqa: E402


def gflops(size, dtype, jit_compile, repeats):
    """Best-of-three GFLOP/s of `repeats` chained size x size products."""
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


def best_time(run, repeats=3):
    """The shortest wall time in seconds of `repeats` calls of `run`, after one call to warm up."""
    run()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=3072)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args(argv)
    name, bf16 = cpu_info()
    print(f"CPU: {name}, {os.cpu_count()} cores, native bfloat16: {', '.join(bf16) or 'none'}")
    peak = library_gflops(args.size, args.repeats)  # float32 with and without XLA among them
    rates = {("float32", False): peak["by_library"]["tensorflow"], ("float32", True): peak["by_library"]["xla"]}
    for dtype in ("float32", "bfloat16"):
        for jit in (False, True):
            rate = rates.get((dtype, jit)) or gflops(args.size, dtype, jit, args.repeats)
            print(f"{dtype:8s} XLA {'on ' if jit else 'off'}: {rate:6.1f} GFLOP/s ({args.size}x{args.size}, TF {tf.__version__})")
    print("float32 by library: " + ", ".join(f"{k} {v:.1f}" for k, v in peak["by_library"].items())
          + f" GFLOP/s; machine peak {peak['gflops']:.1f} ({peak['best']})")


if __name__ == "__main__":
    main()
