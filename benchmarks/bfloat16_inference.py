"""bfloat16: does inference in bfloat16 agree with float32 on real photos, and how much faster is it here?

For a `.keras` classifier and a folder of photos (JPEG/PNG, any size; resized as `predict` does):

- agreement: top-1 agreement and the largest and mean probability difference between the
  float32 model and its bfloat16 copy (`keras_vit.export.compute_precision.bfloat16_model`), for the Keras
  model (`load_predictor(precision=...)`) and for the SavedModel exported with
  `precision="bfloat16"` against the float32 one.
- speed: images/s at --batch of the Keras model (float32 + XLA as `predict` runs it, bfloat16
  through oneDNN) and of the two SavedModels run as TF Serving runs them (TF1 session, feed and
  fetch by name); the four alternate within each of --rounds rounds, in this process.

Without --model, ViT-B/16 with random weights measures speed only (its random probabilities say
nothing about agreement).

    python -m benchmarks bfloat16 --model run/vit.keras --images FOLDER [--max-images 1000] [--batch 8]
    python -m benchmarks bfloat16 --rounds 3        # ViT-B/16, speed only
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np

from benchmarks.export_report import session_runner
from benchmarks.machine import machine_record
from benchmarks.workers import ResultLog


def photos(folder, limit):
    """Paths of up to `limit` image files under `folder` (sorted, recursive)."""
    found = []
    for root, _, files in sorted(os.walk(folder)):
        found += [os.path.join(root, f) for f in sorted(files) if f.lower().endswith((".jpg", ".jpeg", ".png"))]
    if not found:
        raise SystemExit(f"--images {folder!r}: no .jpg/.png files found")
    step = max(len(found) // limit, 1)  # spread over the classes' folders
    return found[::step][:limit]


def agreement(reference, candidate):
    """Top-1 agreement, max and mean |difference| of two probability arrays."""
    diff = np.abs(reference - candidate)
    return {"top1_agreement": float(np.mean(reference.argmax(1) == candidate.argmax(1))),
            "max_abs_diff": float(diff.max()), "mean_abs_diff": float(diff.mean()), "images": len(reference)}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks bfloat16", description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="a .keras classifier (default: ViT-B/16, random weights, speed only)")
    parser.add_argument("--images", help="a folder of photos for the agreement (needs --model)")
    parser.add_argument("--max-images", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=5, help="timed calls per set-up and round")
    parser.add_argument("--out", help="folder for bfloat16-<hardware>-<time>.jsonl and .md")
    args = parser.parse_args(argv)
    if args.images and not args.model:
        parser.error("--images needs --model: random weights agree or disagree by chance")
    log = ResultLog("bfloat16", args.out, argv)
    # The B/16 and its two SavedModels take about 1 GB: removed when the run ends.
    with tempfile.TemporaryDirectory(prefix="bfloat16-") as work:
        _measure(args, log, work)


def _measure(args, log, work):
    """Times float32 against bfloat16 for the Keras predictor and the SavedModel, into `log`."""
    import keras

    import keras_vit
    from keras_vit import export

    path = args.model
    if path is None:
        path = os.path.join(work, "b16.keras")
        keras_vit.ViT("B16", num_classes=1000, preprocessing="imagenet").save(path)
    predictors = {p: export.load_predictor(path, precision=p) for p in ("float32", "bfloat16")}
    model = keras.saving.load_model(path)
    saved = {p: export.saved_model(model, os.path.join(work, f"sm_{p}"), precision=p) for p in ("float32", "bfloat16")}
    lines = [f"model: {os.path.basename(path)} ({model.count_params():,} parameters); batch {args.batch}"]
    if args.images:
        files = photos(args.images, args.max_images)
        keras_probs = {p: predictors[p].predict_files(files) for p in predictors}
        served = {p: export.load_predictor(saved[p]).predict_files(files) for p in saved}
        for name, result in (("Keras model", agreement(keras_probs["float32"], keras_probs["bfloat16"])),
                             ("SavedModel", agreement(served["float32"], served["bfloat16"]))):
            log.add({"kind": "agreement", "artefact": name, **result})
            lines.append(f"agreement, {name}: top-1 {result['top1_agreement']:.2%} of {result['images']} photos, "
                         f"max |dp| {result['max_abs_diff']:.4f}, mean |dp| {result['mean_abs_diff']:.5f}")
    shape = predictors["float32"].image_shape
    batch = np.random.default_rng(0).uniform(0, 255, (args.batch, *shape)).astype("float32")
    runners = {f"Keras {p}": (lambda p=p: predictors[p].predict(batch)) for p in predictors}
    runners.update({f"SavedModel {p} (TF Serving's way)": (lambda run=session_runner(saved[p]): run(batch))
                    for p in saved})
    for run in runners.values():
        run()
    rates = {name: [] for name in runners}
    for _ in range(args.rounds):
        for name, run in runners.items():
            times = []
            for _ in range(args.calls):
                start = time.perf_counter()
                run()
                times.append(time.perf_counter() - start)
            rates[name].append(args.batch / statistics.median(times))
    base = {kind: statistics.median(rates[f"{kind} float32" + (" (TF Serving's way)" if kind == "SavedModel" else "")])
            for kind in ("Keras", "SavedModel")}
    lines += ["", "| set-up | img/s median (range) | vs its float32 |", "|---|---|---|"]
    for name, values in rates.items():
        median = statistics.median(values)
        log.add({"kind": "speed", "setup": name, "images_per_s": values})
        lines.append(f"| {name} | {median:.2f} ({min(values):.2f}-{max(values):.2f}) | "
                     f"{median / base[name.split()[0]]:.2f}x |")
    record = machine_record()
    lines.append(f"\nCPU flags: {' '.join(record['flags'])}; load {record['load']}")
    log.summary("\n".join(lines))
