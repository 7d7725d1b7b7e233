"""Matrix-product peak of this machine through TensorFlow, to compare machines' figures.

VIT_FACTS.md gives its machine's peak for a 3072 x 3072 product (about 420 GFLOP/s float32 and
775 bfloat16 with oneDNN, 320 bfloat16 under XLA). Running the same measurement here says how
much of a gap in training figures the machine itself explains. Not a test.

    python benchmarks/matmul_peak.py [--size 3072 --repeats 10]

Prints GFLOP/s for float32 and bfloat16, each with and without XLA (best of three timings of
`repeats` products), plus the CPU model and whether it has native bfloat16 (avx512_bf16/amx).
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

    products(a).numpy()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        products(a).numpy()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 * repeats / best / 1e9


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=3072)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args(argv)
    name, bf16 = cpu_info()
    print(f"CPU: {name}, {os.cpu_count()} cores, native bfloat16: {', '.join(bf16) or 'none'}")
    for dtype in ("float32", "bfloat16"):
        for jit in (False, True):
            rate = gflops(args.size, dtype, jit, args.repeats)
            print(f"{dtype:8s} XLA {'on ' if jit else 'off'}: {rate:6.1f} GFLOP/s ({args.size}x{args.size}, TF {tf.__version__})")


if __name__ == "__main__":
    main()
