"""ab-inference: a git revision's encoder block against this checkout's, bfloat16 inference in one process.

Two bfloat16 copies of one model (`keras_vit.export.compute_precision.bfloat16_model`, what `keras-vit
predict --precision bfloat16` runs), random weights with non-zero biases and norms (zero ones
would let TensorFlow fold them away); each encoder block of the "revision" copy runs a
`TransformerBlock` (with its `MultiHeadSelfAttention`) built by those classes as they were at
--revision (read with `git show`), constructor and `call`, holding the block's weights; the
"checkout" copy runs this checkout's. Rounds alternate `predict_on_batch` calls of the two, so a
change in the machine's load hits both alike: the ratio (checkout's speed over the revision's,
median and range of the rounds) is what carries over between machines. It also prints how far
each copy's outputs are from the float32 model's.

    python -m benchmarks ab-inference [--revision HEAD~1] [--workload infer_b16] [--batch 8]
        [--rounds 8] [--out DIR]
"""

from __future__ import annotations

import argparse
import subprocess
import time
from pathlib import Path

from benchmarks.workers import ResultLog
from benchmarks.workloads import WORKLOADS, keras_model, workload

ROOT = Path(__file__).resolve().parent.parent
# class name: the file at --revision that defines it.
REPLACED = {
    "TransformerBlock": "keras_vit/layers/transformer_block.py",
    "MultiHeadSelfAttention": "keras_vit/layers/self_attention.py",
}


def revision_classes(revision):
    """{class name: the class as its file was at `revision`}, the block building the revision's attention."""
    classes = {}
    for name, path in REPLACED.items():
        shown = subprocess.run(["git", "show", f"{revision}:{path}"], cwd=ROOT, capture_output=True, text=True)
        if shown.returncode != 0:
            raise SystemExit(f"ab-inference: cannot read {path} at --revision {revision!r}: {shown.stderr.strip()}")
        # Registering the old class under the shipped name would replace the shipped one.
        source = shown.stdout.replace('@keras.saving.register_keras_serializable(package="keras_vit")', "")
        namespace = {"__name__": f"revision_{Path(path).stem}"}
        exec(compile(source, f"{revision}:{path}", "exec"), namespace)
        classes[name] = namespace[name]
    # The block's file imports this checkout's attention; its constructor reads the name at call time.
    classes["TransformerBlock"].__init__.__globals__["MultiHeadSelfAttention"] = classes["MultiHeadSelfAttention"]
    return classes


def with_revision(model, classes):
    """`model` with each encoder block calling a twin built by `classes` (`revision_classes`) that holds its weights."""
    for block in model.layers:
        if type(block).__name__ == "TransformerBlock":
            twin = classes["TransformerBlock"].from_config(block.get_config())
            twin.build(block.input.shape)
            twin.set_weights(block.get_weights())
            # The block's __call__ still sets the policy's autocast scope, which the twin's variables honour.
            block.call = twin.call
    return model


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks ab-inference", description=__doc__.split("\n")[0])
    parser.add_argument("--revision", default="HEAD~1", help="git revision whose encoder block is the baseline")
    parser.add_argument("--workload", default="infer_b16", choices=sorted(WORKLOADS))
    parser.add_argument("--batch", type=int, default=None, help="images a call (default: the workload's)")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--out", default=None, help="folder for ab-inference-<hardware>-<time>.jsonl and .md")
    args = parser.parse_args(argv)
    import keras
    import numpy as np

    from keras_vit.export.compute_precision import bfloat16_model

    classes = revision_classes(args.revision)
    w = workload(args.workload, {"batch": args.batch} if args.batch else {})
    model, _ = keras_model("keras_vit", w)
    rng = np.random.default_rng(0)
    for variable in model.weights:
        offset = 1.0 if variable.path.endswith("gamma") else 0.0
        variable.assign(rng.normal(offset, 0.02, variable.shape).astype("float32"))
    images = rng.random((w["batch"], w["image"], w["image"], w["channels"]), dtype="float32")
    copies = {"revision": with_revision(bfloat16_model(model), classes), "checkout": bfloat16_model(model)}
    log = ResultLog("ab-inference", args.out, argv)
    reference = np.asarray(model.predict_on_batch(images))
    for name, copy in copies.items():
        error = np.abs(np.asarray(copy.predict_on_batch(images)) - reference)
        log.add({"kind": "error", "copy": name, "max_abs": float(error.max()), "mean_abs": float(error.mean())})
        copy.predict_on_batch(images)
    seconds = {name: [] for name in copies}
    for round_index in range(args.rounds):
        order = list(copies) if round_index % 2 == 0 else list(copies)[::-1]
        for name in order:
            start = time.perf_counter()
            copies[name].predict_on_batch(images)
            seconds[name].append(time.perf_counter() - start)
    ratios = [r / c for r, c in zip(seconds["revision"], seconds["checkout"])]
    for name, taken in seconds.items():
        log.add({"kind": "speed", "copy": name, "images_per_s": [w["batch"] / s for s in taken]})
    lines = [f"{args.workload}, batch {w['batch']}, bfloat16 copies, {args.rounds} alternating rounds, "
             f"backend {keras.backend.backend()}:"]
    for name, taken in seconds.items():
        lines.append(f"  {name:8s} ({args.revision if name == 'revision' else 'this checkout'}): "
                     f"{w['batch'] / np.median(taken):.2f} img/s median")
    lines.append(f"  checkout / revision speed: {np.median(ratios):.3f}x (range {min(ratios):.3f}-{max(ratios):.3f})")
    log.summary("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
