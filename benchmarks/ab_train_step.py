"""ab-train-step: A/B ratios of training-step speed for candidate changes, measured side by side in one process.

Each named variant builds its own copy of a training workload (keras_vit,
AdamW, one repeated in-memory batch), with a candidate change applied while it is built and
traced. All models are warmed up first (tracing, XLA compilation); then every round runs one
`fit` epoch of --steps steps per variant, in turn, and records its wall per step (fit's own
overhead included, as users see it). Alternating inside one process means a change in the
shared machine's load hits every variant alike: the printed ratios (median and range over the
rounds, each round's variant time over the baseline's in that round) are what carries over.
Besides the wall, the process's CPU time per step is printed: on a machine whose cores other
jobs share, the wall also counts the time the process waited for a core, CPU time does not
(it does count threads spinning while they wait for each other).

Variants: baseline (shipped code: float32, XLA), spe4 / spe16 (steps_per_execution in
compile), nojit (no XLA: TensorFlow's oneDNN kernels), gelu_erfc (exact GELU as TensorFlow's
tf.nn.gelu writes it, with erfc, instead of keras_vit's 0.5 x (1 + erf(x / sqrt 2))), fused_attention
(built with fused_attention=True: keras.ops.dot_product_attention), unfused_attention (built
with fused_attention=False: the explicit softmax),
keras_hub (keras-hub's ViT instead of keras_vit), ln_centered (LayerNorm as
(x - mean) * (rsqrt(var + eps) * gamma) + beta, variance of the centred values), einsum_attention (scores and context as einsums on the
projection's (B, T, heads, width) layout: no explicit transposes). Thread settings need a fresh
process each: --threads INTRA,INTER applies tf.config.threading to the whole run, so compare
two runs' baseline figures with each other only through their ratios to a third variant.

    python -m benchmarks ab-train-step [--workload train_default|train_ti4] [--rounds 3]
        [--steps 6] [--variants baseline,spe4,nojit,gelu_erfc] [--threads 2,1] [--out DIR]
"""

from __future__ import annotations

import argparse
import math

from benchmarks import timing
from benchmarks.machine import cpu_jiffies, cpu_share
from benchmarks.workers import ResultLog
from benchmarks.workloads import TRAINING, compile_for_training, keras_model, repeated_batch, workload


def _gelu_erfc(original):
    def gelu(x, approximate=False):
        import keras

        return keras.ops.gelu(x, approximate=approximate)  # TensorFlow: tf.nn.gelu, the erfc form

    return gelu


def _layer_norm_centered(original):
    def layer_normalization(x, gamma=None, beta=None, axis=-1, epsilon=None, **kwargs):
        from keras import ops

        if axis not in (-1, [-1]) or kwargs.get("rms_scaling") or gamma is None or beta is None:
            return original(x, gamma, beta, axis, epsilon, **kwargs)
        centered = x - ops.mean(x, axis=-1, keepdims=True)
        variance = ops.mean(ops.square(centered), axis=-1, keepdims=True)
        return centered * (ops.rsqrt(variance + epsilon) * gamma) + beta

    return layer_normalization


def _einsum_attention_call(self, inputs, training=None, return_attention_scores=False):
    from keras import ops

    dim, heads = self.hidden_size, self.num_heads
    width = dim // heads
    batch, tokens = ops.shape(inputs)[0], ops.shape(inputs)[1]
    parts = [self.query, self.key, self.value]
    kernel = ops.concatenate([ops.reshape(part.kernel, (dim, dim)) for part in parts], axis=1)
    bias = ops.concatenate([ops.reshape(part.bias, (dim,)) for part in parts], axis=0)
    qkv = ops.matmul(ops.reshape(inputs, (-1, dim)), kernel) + bias
    qkv = ops.reshape(qkv, (batch, tokens, 3, heads, width))
    query, key, value = qkv[:, :, 0] * (1.0 / math.sqrt(width)), qkv[:, :, 1], qkv[:, :, 2]
    scores = ops.einsum("bqhd,bkhd->bhqk", query, key)
    weights = ops.cast(ops.softmax(ops.cast(scores, "float32"), axis=-1), scores.dtype)
    context = ops.einsum("bhqk,bkhd->bqhd", self.dropout(weights, training=training), value)
    out = self.attention_output
    outputs = ops.matmul(ops.reshape(context, (-1, dim)), ops.reshape(out.kernel, (dim, dim))) + out.bias
    outputs = ops.reshape(outputs, (batch, tokens, dim))
    return (outputs, weights) if return_attention_scores else outputs


def keras_ops_package():
    # keras.layers.LayerNormalization calls keras.src.ops.layer_normalization, not keras.ops'.
    import keras.src.ops

    return keras.src.ops


class Patch:
    """Sets attributes while a variant is built and traced, and puts them back afterwards."""

    def __init__(self, *changes):
        self.changes = changes  # (object, attribute name, value making the new one from the old)

    def __enter__(self):
        self.saved = [(obj, name, getattr(obj, name)) for obj, name, _ in self.changes]
        for obj, name, make in self.changes:
            setattr(obj, name, make(getattr(obj, name)))

    def __exit__(self, *exc):
        for obj, name, old in self.saved:
            setattr(obj, name, old)


# The variants built by another `workloads.keras_model` impl than "keras_vit".
IMPLS = {"keras_hub": "keras_hub", "fused_attention": "keras_vit_fused", "unfused_attention": "keras_vit_unfused"}


def variants():
    """{name: (compile arguments, a context manager factory in force while the variant is built and traced)}."""
    from keras_vit.layers import self_attention, transformer_block

    attention = self_attention.MultiHeadSelfAttention
    return {
        "baseline": ({}, Patch),
        "spe4": ({"steps_per_execution": 4}, Patch),
        "spe16": ({"steps_per_execution": 16}, Patch),
        "nojit": ({"jit_compile": False}, Patch),
        "gelu_erfc": ({}, lambda: Patch((transformer_block, "gelu", _gelu_erfc))),
        "ln_centered": ({}, lambda: Patch((keras_ops_package(), "layer_normalization", _layer_norm_centered))),
        "fused_attention": ({}, Patch),  # built by IMPLS' keras_vit_fused
        "unfused_attention": ({}, Patch),
        "einsum_attention": ({}, lambda: Patch((attention, "call", lambda old: _einsum_attention_call))),
        "keras_hub": ({}, Patch),  # keras-hub's ViT, as compare builds it
    }


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks ab-train-step", description=__doc__.split("\n")[0])
    parser.add_argument("--workload", default="train_default", choices=TRAINING)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8, help="steps per timed fit epoch")
    parser.add_argument("--variants", default="baseline,spe4,nojit,gelu_erfc,einsum_attention")
    parser.add_argument("--threads", help="INTRA,INTER for tf.config.threading (default: TensorFlow's)")
    parser.add_argument("--out", help="folder for ab-train-step-<hardware>-<time>.jsonl and .md")
    args = parser.parse_args(argv)
    import keras
    import tensorflow as tf

    if args.threads:
        intra, inter = (int(n) for n in args.threads.split(","))
        tf.config.threading.set_intra_op_parallelism_threads(intra)
        tf.config.threading.set_inter_op_parallelism_threads(inter)
    known = variants()
    names = args.variants.split(",")
    unknown = [n for n in names if n not in known]
    if unknown or "baseline" not in names:
        parser.error(f"--variants={args.variants!r}: expected 'baseline' and some of {list(known)}")
    w = workload(args.workload)
    data = repeated_batch(w)
    log = ResultLog("ab-train-step", args.out, argv)
    print(f"threads {args.threads or 'default'}; TF {tf.__version__}, Keras {keras.__version__}", flush=True)
    runs = {}
    for name in names:
        compile_args, context = known[name]
        keras.utils.set_random_seed(0)
        with context():
            model, _ = keras_model(IMPLS.get(name, "keras_vit"), w)
            compile_for_training(model, **{"jit_compile": True, **compile_args})
            runs[name] = timing.keras_epochs(model, data)
            warm = runs[name](4)  # traced with the change in place
        print(f"{name}: warm-up (tracing, compilation, 4 steps) {warm.wall_s:.1f} s", flush=True)
    steps, cpu, before = {n: [] for n in names}, {n: [] for n in names}, cpu_jiffies()
    for round_index in range(args.rounds):
        for name in names:
            epoch = runs[name](args.steps)
            steps[name].append(epoch.wall_s / args.steps)
            cpu[name].append(epoch.cpu_s / args.steps)
            log.add({"workload": args.workload, "variant": name, "round": round_index, "wall_step_s": steps[name][-1],
                     "cpu_step_s": cpu[name][-1], "threads": args.threads}, echo=False)
        print(f"round {round_index}: " + ", ".join(f"{n} {steps[n][-1] * 1e3:.0f} ms ({cpu[n][-1] * 1e3:.0f} ms CPU)"
                                                   for n in names), flush=True)
    lines = [f"{args.workload}, batch {w['batch']}, {args.rounds} rounds x {args.steps} steps; CPU during the rounds: "
             f"{cpu_share(before, cpu_jiffies())}",
             "| variant | wall ms/step median (range) | speed vs baseline (range) | CPU ms/step median (range) | "
             "CPU-time speed vs baseline (range) |", "|---|---|---|---|---|"]
    for name in names:
        cells = []
        for values, base in ((steps[name], steps["baseline"]), (cpu[name], cpu["baseline"])):
            ratios = [b / t for b, t in zip(base, values)]
            m, lo, hi = timing.median_range(ratios)
            cells.append(f"{timing.fmt_range(values, 0, 1e3)} | {m:.2f}x ({lo:.2f}-{hi:.2f})")
        lines.append(f"| {name} | {' | '.join(cells)} |")
    log.summary("\n".join(lines))
    return steps, cpu
