"""image-text: do keras_vit's CLIP, SigLIP and SigLIP 2 towers give transformers' answers on every backend and export, and how fast are they here?

On two-tower folders saved by transformers 5 with random weights and real-format tokenizer files
(the makers of tests/_image_text_fixtures.py at --size: "small" is CLIP B/32-like, text width 512,
vision 384, 4 blocks each; "tiny" the tests' towers):

- parity: token ids (exact), L2-normalised text and image embeddings and `logits_per_image` (max
  |difference|) of `keras_vit.ImageTextModel` against transformers (PyTorch, its PIL image
  processors) on photo-like images of several sizes and aspects, on the Keras backend of this
  process and, in child processes with KERAS_BACKEND set, on the other backends installed;
- exports: the zero-shot classifier's probabilities (CLIP softmax, SigLIP sigmoid) from its
  SavedModel (`serve_bytes`: PNG files, the processor in the graph), TFLite and ONNX (processed
  pixels) against transformers' zero-shot pipeline's (max |difference|);
- speed: ms per text of `encode_texts`, per image of `encode_images` and of the zero-shot
  classifier (the checkpoint's processor included), against transformers doing the same work
  (its tokenizer or processor included; the pipeline's labels tokenised once), the median of
  --rounds, one after the other in one run on this CPU.

    python -m benchmarks image-text --out benchmarks/results
    python -m benchmarks image-text --size tiny --kinds siglip --formats none --backends tensorflow --rounds 1
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

from benchmarks.workers import ResultLog

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KINDS = ("clip", "siglip", "siglip2")
BACKENDS = ("tensorflow", "jax", "torch")
FORMATS = ("saved_model", "tflite", "onnx")
LABELS = ["cat", "dog", "airplane", "red car", "tree"]
TEXTS = ["This is a photo of a cat.", "", "A DOG's toy, really?", "two people riding bicycles along a river at dusk",
         "naïve café — 東京", "a close-up photo of a plastic tree"] + [f"a photo of number {i}" for i in range(10)]
# Photo sizes (height, width): wide, tall, square, very tall (Pillow resizes its height first), small.
PHOTO_SIZES = ((240, 320), (320, 240), (256, 256), (400, 150), (120, 200), (300, 420), (210, 280), (330, 250))


def fixtures():
    """tests/_image_text_fixtures.py: the folders' makers and transformers' references, one definition for both."""
    # Loaded by path, so that the benchmark leaves the import path as it found it.
    spec = importlib.util.spec_from_file_location(
        "_image_text_fixtures", os.path.join(ROOT, "tests", "_image_text_fixtures.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def photos():
    """Photo-like uint8 images (shaded sky and ground, a dark disc, sensor noise) of `PHOTO_SIZES`."""
    made = []
    for seed, (height, width) in enumerate(PHOTO_SIZES):
        rng = np.random.default_rng(seed)
        rows, cols = np.mgrid[0:height, 0:width].astype("float64")
        sky = np.stack([90 + 0.3 * rows, 140 + 0.2 * rows, 220 - 0.3 * rows], axis=-1)
        ground = np.stack([60 + 0.4 * cols, 120 + 0.1 * cols, 40 + 0 * cols], axis=-1)
        image = np.where((rows > 0.5 * height + 9 * np.sin(cols / 17 + seed))[..., None], ground, sky)
        image[(rows - 0.4 * height) ** 2 + (cols - 0.6 * width) ** 2 < (0.15 * min(height, width)) ** 2] = [30, 25, 20]
        made.append(np.clip(image + rng.normal(0, 6, image.shape), 0, 255).astype("uint8"))
    return made


def median_seconds(run, rounds):
    """The median wall time of `run()` over `rounds` calls, after one untimed call (tracing, caches)."""
    run()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def keras_outputs(folder, texts, images, rounds, classify):
    """keras_vit's tokens, embeddings, logits and timings of one folder on this process's backend."""
    import keras

    import keras_vit
    from keras_vit.image_processor import process_images

    pair = keras_vit.ImageTextModel(weights=folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # texts past the context: said once, truncated as the reference does
        tokens = pair.tokenize(texts)
        out = {"input_ids": tokens["input_ids"], "attention_mask": tokens["attention_mask"],
               "text_embeds": pair.encode_texts(texts), "image_embeds": pair.encode_images(images),
               "logits": pair.logits(images, texts)}
        timing = {"encode_texts": median_seconds(lambda: pair.encode_texts(texts), rounds) / len(texts),
                  "encode_images": median_seconds(lambda: pair.encode_images(images), rounds) / len(images)}
    if classify:
        model = keras_vit.zeroshot_classifier(pair, LABELS)
        processor, size = model.vit_config["image_processor"], model.input_shape[1:3]

        def scores():
            return keras.ops.convert_to_numpy(model(process_images(images, processor, size), training=False))

        out["zeroshot"] = scores()
        timing["zeroshot"] = median_seconds(scores, rounds) / len(images)
    return pair, out, timing


def reference_outputs(fx, kind, folder, model, texts, images, rounds):
    """transformers' tokens (as its zero-shot pipeline tokenises), embeddings, logits, pipeline scores and timings."""
    import torch

    tokenizer = fx.reference_tokenizer(folder)
    kwargs = fx.pipeline_kwargs(kind)
    if kind == "clip":  # CLIP's tower takes 77 tokens: the reference truncates as open_clip does
        kwargs.update(truncation=True, max_length=77)

    def tokens_of(batch):
        return tokenizer(batch, return_tensors="pt", **kwargs)

    with torch.no_grad():
        tokens = tokens_of(texts)
        pixels = fx.reference_pixels(folder, images)
        result = model(**tokens, **pixels)
        labels = tokens_of([f"This is a photo of {label}." for label in LABELS])
        logits = model(**labels, **pixels).logits_per_image
        scores = (logits.softmax(-1) if kind == "clip" else logits.sigmoid()).numpy()

        def texts_run():
            out = model.get_text_features(**tokens_of(texts))
            return getattr(out, "pooler_output", out)

        def images_run():
            out = model.get_image_features(**fx.reference_pixels(folder, images))
            return getattr(out, "pooler_output", out)

        def pipeline_run():
            return model(**labels, **fx.reference_pixels(folder, images)).logits_per_image

        timing = {"encode_texts": median_seconds(texts_run, rounds) / len(texts),
                  "encode_images": median_seconds(images_run, rounds) / len(images),
                  "zeroshot": median_seconds(pipeline_run, rounds) / len(images)}
    out = {"input_ids": tokens["input_ids"].numpy(), "attention_mask": tokens["attention_mask"].numpy(),
           "text_embeds": result.text_embeds.numpy(), "image_embeds": result.image_embeds.numpy(),
           "logits": result.logits_per_image.numpy(), "zeroshot": scores}
    return out, timing


def compare(found, expected):
    """{"tokens": exact?, "<output>": max |difference|} of keras_vit's outputs against the reference's."""
    row = {"tokens": bool(all(np.array_equal(np.asarray(found[key]), np.asarray(expected[key]))
                              for key in ("input_ids", "attention_mask")))}
    for key in ("text_embeds", "image_embeds", "logits", "zeroshot"):
        if key in found:
            row[key] = float(np.abs(np.asarray(found[key], "float64") - expected[key]).max())
    return row


def export_differences(pair, images, expected, formats, work):
    """{format: max |difference|} of the zero-shot classifier's exports against the pipeline's scores."""
    import PIL.Image

    import keras_vit
    from keras_vit import export
    from keras_vit.image_processor import process_images

    model = keras_vit.zeroshot_classifier(pair, LABELS)
    pixels = process_images(images, model.vit_config["image_processor"], model.input_shape[1:3])
    folder = tempfile.mkdtemp(prefix=f"{pair.kind}-", dir=work)
    files = []
    for i, image in enumerate(images):
        files.append(os.path.join(folder, f"{i}.png"))
        PIL.Image.fromarray(image).save(files[-1])
    found = {}
    for fmt in formats:
        start = time.perf_counter()
        if fmt == "saved_model":
            scores = export.load_predictor(export.saved_model(model, os.path.join(folder, "serving"))).predict_files(files)
        else:
            path = getattr(export, fmt)(model, os.path.join(folder, f"zeroshot.{fmt}"), class_names=LABELS).path
            scores = export.load_predictor(path).predict(pixels)
        found[fmt] = {"max_abs_diff": float(np.abs(np.asarray(scores, "float64") - expected).max()),
                      "export_s": round(time.perf_counter() - start, 1)}
    return found


def child(work):
    """A child process on its own Keras backend: the keras_vit side of every folder in `work`, written beside."""
    import keras

    with open(os.path.join(work, "plan.json")) as f:
        plan = json.load(f)
    data = np.load(os.path.join(work, "inputs.npz"))
    images = [data[f"image_{i}"] for i in range(len(data.files))]
    for kind, folder in plan["folders"].items():
        _, out, timing = keras_outputs(folder, plan["texts"], images, plan["rounds"], kind != "siglip2")
        np.savez(os.path.join(work, f"{keras.backend.backend()}-{kind}.npz"), **out)
        with open(os.path.join(work, f"{keras.backend.backend()}-{kind}.json"), "w") as f:
            json.dump(timing, f)


def table(rows, timings):
    """The parity and the timing tables (markdown)."""
    lines = ["| backend | kind | tokens | text embeds | image embeds | logits | zero-shot scores |", "|---|---|---|---|---|---|---|"]
    for (backend, kind), row in rows.items():
        cells = [f"{row[key]:.1e}" if key in row else "-" for key in ("text_embeds", "image_embeds", "logits", "zeroshot")]
        lines.append(f"| {backend} | {kind} | {'exact' if row['tokens'] else 'DIFFER'} | " + " | ".join(cells) + " |")
    lines += ["", "| kind | who | encode_texts ms/text | encode_images ms/image | zero-shot ms/image |", "|---|---|---|---|---|"]
    for (who, kind), timing in timings.items():
        cells = [f"{1000 * timing[key]:.2f}" if key in timing else "-" for key in ("encode_texts", "encode_images", "zeroshot")]
        lines.append(f"| {kind} | {who} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks image-text", description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=("tiny", "small"), default="small")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"of {', '.join(KINDS)}")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="Keras backends (those installed run)")
    parser.add_argument("--formats", default=",".join(FORMATS), help="exports of the zero-shot classifier, or none")
    parser.add_argument("--rounds", type=int, default=5, help="timed calls per measurement (median)")
    parser.add_argument("--photos", type=int, default=len(PHOTO_SIZES), help="how many of the photos (a smoke run: 2)")
    parser.add_argument("--out", help="folder for image-text-<hardware>-<time>.jsonl and .md")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child)
    kinds = [kind for kind in args.kinds.split(",") if kind]
    formats = [] if args.formats == "none" else [fmt for fmt in args.formats.split(",") if fmt]
    for name, values, allowed in (("--kinds", kinds, KINDS), ("--formats", formats, FORMATS),
                                  ("--backends", args.backends.split(","), BACKENDS)):
        if not set(values) <= set(allowed):
            parser.error(f"{name}: expected a comma-separated subset of {', '.join(allowed)}")
    fx = fixtures()
    if fx.missing():
        raise SystemExit(fx.missing())
    log = ResultLog("image-text", args.out, argv)
    # The made checkpoints and the exports are the run's scratch: removed when it ends.
    with tempfile.TemporaryDirectory(prefix="image-text-") as work:
        _measure(args, kinds, formats, fx, log, work)
    return 0


def _measure(args, kinds, formats, fx, log, work):
    """The towers made in `work`, each checked on every backend and export against transformers, into `log`."""
    import keras

    images = photos()[:max(args.photos, 1)]
    folders, references, rows, timings = {}, {}, {}, {}
    here = keras.backend.backend()
    for kind in kinds:
        folders[kind] = os.path.join(work, kind)
        start = time.perf_counter()
        model = fx.MAKERS[kind](folders[kind], size=args.size)
        params = sum(p.numel() for p in model.parameters())
        references[kind], timings[("transformers", kind)] = reference_outputs(
            fx, kind, folders[kind], model, TEXTS, images, args.rounds)
        log.add({"kind": kind, "size": args.size, "parameters": params, "made_s": round(time.perf_counter() - start, 1)})
        pair, out, timings[(f"keras_vit {here}", kind)] = keras_outputs(
            folders[kind], TEXTS, images, args.rounds, kind != "siglip2")
        rows[(here, kind)] = compare(out, references[kind])
        log.add({"backend": here, "kind": kind, **rows[(here, kind)], "seconds": timings[(f"keras_vit {here}", kind)]})
        if kind != "siglip2" and formats:  # SigLIP 2's classifier takes square images its NaFlex processor never makes
            exports = export_differences(pair, images, references[kind]["zeroshot"], formats, work)
            log.add({"kind": kind, "exports": exports})
            for fmt, found in exports.items():
                rows[(fmt, kind)] = {"tokens": True, "zeroshot": found["max_abs_diff"]}
    others = [b for b in args.backends.split(",") if b != here and importlib.util.find_spec(b)]
    if others:
        np.savez(os.path.join(work, "inputs.npz"), **{f"image_{i}": image for i, image in enumerate(images)})
        with open(os.path.join(work, "plan.json"), "w") as f:
            json.dump({"folders": folders, "texts": TEXTS, "rounds": args.rounds}, f)
    for backend in others:
        env = dict(os.environ, KERAS_BACKEND=backend)
        done = subprocess.run([sys.executable, "-m", "benchmarks", "image-text", "--child", work], cwd=ROOT, env=env,
                              capture_output=True, text=True)
        if done.returncode != 0:
            log.add({"backend": backend, "error": done.stderr[-1500:]})
            continue
        for kind in kinds:
            found = dict(np.load(os.path.join(work, f"{backend}-{kind}.npz")))
            rows[(backend, kind)] = compare(found, references[kind])
            with open(os.path.join(work, f"{backend}-{kind}.json")) as f:
                timings[(f"keras_vit {backend}", kind)] = json.load(f)
            log.add({"backend": backend, "kind": kind, **rows[(backend, kind)], "seconds": timings[(f"keras_vit {backend}", kind)]})
    timings = dict(sorted(timings.items(), key=lambda item: (kinds.index(item[0][1]), item[0][0] != "transformers")))
    log.summary(f"{len(TEXTS)} texts, {len(images)} photos of sizes {list(PHOTO_SIZES[:len(images)])}, labels {LABELS}; "
                f"towers: --size {args.size}\n\n" + table(rows, timings))


if __name__ == "__main__":
    main()
