"""A/B ratios of training-step speed for candidate changes, measured side by side in one process.

Each named variant builds its own copy of a benchmarks/compare.py training workload (keras_vit,
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
(keras.ops.dot_product_attention), keras_hub (keras-hub's ViT instead of keras_vit), ln_centered (LayerNorm as
(x - mean) * (rsqrt(var + eps) * gamma) + beta, variance of the centred values), einsum_attention (scores and context as einsums on the
projection's (B, T, heads, width) layout: no explicit transposes). Thread settings need a fresh
process each: --threads INTRA,INTER applies tf.config.threading to the whole run, so compare
two runs' baseline figures with each other only through their ratios to a third variant.

    python benchmarks/ab_train_step.py [--workload train_default|train_ti4] [--rounds 3]
        [--steps 6] [--variants baseline,spe4,nojit,gelu_erfc] [--threads 2,1]
"""

import argparse
import math
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)


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


def variants():
    import keras

    from keras_vit.layers import self_attention, transformer_block

    attention = self_attention.MultiHeadSelfAttention
    return {
        "baseline": ({}, Patch()),
        "spe4": ({"steps_per_execution": 4}, Patch()),
        "spe16": ({"steps_per_execution": 16}, Patch()),
        "nojit": ({"jit_compile": False}, Patch()),
        "gelu_erfc": ({}, Patch((transformer_block, "gelu", _gelu_erfc))),
        "ln_centered": ({}, Patch((keras_ops_package(), "layer_normalization", _layer_norm_centered))),
        "fused_attention": ({}, Patch((self_attention, "FUSED_ATTENTION", lambda old: True))),
        "einsum_attention": ({}, Patch((attention, "call", lambda old: _einsum_attention_call))),
        "keras_hub": ({}, Patch()),  # keras-hub's ViT, as benchmarks/compare.py builds it
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", default="train_default", choices=("train_default", "train_ti4"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8, help="steps per timed fit epoch")
    parser.add_argument("--variants", default="baseline,spe4,nojit,gelu_erfc,einsum_attention")
    parser.add_argument("--threads", help="INTRA,INTER for tf.config.threading (default: TensorFlow's)")
    args = parser.parse_args(argv)
    import keras
    import tensorflow as tf

    if args.threads:
        intra, inter = (int(n) for n in args.threads.split(","))
        tf.config.threading.set_intra_op_parallelism_threads(intra)
        tf.config.threading.set_inter_op_parallelism_threads(inter)
    from compare import WORKLOADS, keras_model, repeated_batch
    from machine import cpu_info, cpu_jiffies, cpu_share, loadavg

    known = variants()
    names = args.variants.split(",")
    unknown = [n for n in names if n not in known]
    if unknown or "baseline" not in names:
        parser.error(f"--variants={args.variants!r}: expected 'baseline' and some of {list(known)}")
    w = WORKLOADS[args.workload]
    data = repeated_batch(w)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {cpu_info()[0]}, {os.cpu_count()} cores; "
          f"load {loadavg()}; threads {args.threads or 'default'}; TF {tf.__version__}, Keras {keras.__version__}\n"
          f"command: python benchmarks/ab_train_step.py {' '.join(sys.argv[1:] if argv is None else argv)}", flush=True)
    models = {}
    for name in names:
        compile_args, patch = known[name]
        keras.utils.set_random_seed(0)
        with patch:
            model, _ = keras_model("keras_hub" if name == "keras_hub" else "keras_vit", w)
            model.compile(optimizer=keras.optimizers.AdamW(1e-3),
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                          **{"jit_compile": True, **compile_args})
            start = time.perf_counter()
            model.fit(data, steps_per_epoch=4, epochs=1, verbose=0)  # traced with the patch in place
        print(f"{name}: warm-up (tracing, compilation, 4 steps) {time.perf_counter() - start:.1f} s", flush=True)
        models[name] = model
    steps, cpu, before = {n: [] for n in names}, {n: [] for n in names}, cpu_jiffies()
    for round_index in range(args.rounds):
        for name in names:
            start, start_cpu = time.perf_counter(), time.process_time()
            models[name].fit(data, steps_per_epoch=args.steps, epochs=1, verbose=0)
            steps[name].append((time.perf_counter() - start) / args.steps)
            cpu[name].append((time.process_time() - start_cpu) / args.steps)
        print(f"round {round_index}: " + ", ".join(f"{n} {steps[n][-1] * 1e3:.0f} ms ({cpu[n][-1] * 1e3:.0f} ms CPU)"
                                                   for n in names), flush=True)
    print(f"\n{args.workload}, batch {w['batch']}, {args.rounds} rounds x {args.steps} steps; CPU during the rounds: "
          f"{cpu_share(before, cpu_jiffies())}")
    print("| variant | wall ms/step median (range) | speed vs baseline (range) | CPU ms/step median (range) | "
          "CPU-time speed vs baseline (range) |\n|---|---|---|---|---|")
    for name in names:
        cells = []
        for values, base in ((steps[name], steps["baseline"]), (cpu[name], cpu["baseline"])):
            ratios = [b / t for b, t in zip(base, values)]
            cells.append(f"{statistics.median(values) * 1e3:.0f} ({min(values) * 1e3:.0f}-{max(values) * 1e3:.0f}) | "
                         f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})")
        print(f"| {name} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
