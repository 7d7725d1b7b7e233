"""folder-pipeline: image-folder input pipeline: listing time, time to the first batch and first training step,
images/s of the pipeline alone, and peak memory, on a generated folder of small JPEGs.

Also, with --fashion-mnist DIR: the same small ViT trained for an equal time budget from the
Fashion-MNIST IDX files and from a folder of the same images written as PNGs class by class
(train/<class>/, test/<class>/), to show the folder trains as well (whole-set shuffle).

    python -m benchmarks folder-pipeline --files 10000 --files 50000
    python -m benchmarks folder-pipeline --fashion-mnist /work/shared/data/fashion-mnist --budget-minutes 3

Each --files size runs in its own process (so each peak RSS is its own); generated folders go
under a temporary folder and are deleted afterwards. Prints one JSON line per measurement
(written as JSONL under --out).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time

import numpy as np

from benchmarks.machine import loadavg
from benchmarks.workers import ResultLog, run_worker


def make_jpeg_folder(root, files, classes=10, size=32, variants=64, seed=0):
    """Writes `files` class-sorted JPEGs (size x size) as root/c<k>/<i>.jpg from `variants` encodings."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    encoded = [tf.io.encode_jpeg(rng.integers(0, 255, (size, size, 3), dtype=np.uint8)).numpy() for _ in range(variants)]
    for c in range(classes):
        os.makedirs(os.path.join(root, f"c{c}"), exist_ok=True)
    for i in range(files):
        c = i * classes // files
        with open(os.path.join(root, f"c{c}", f"{i:07d}.jpg"), "wb") as f:
            f.write(encoded[i % variants])


def measure_pipeline(files, batch_size=128, size=32, max_seconds=60.0):
    """One size: generate, list, first batch, first train step, pipeline images/s, peak RSS."""
    import keras
    import tensorflow as tf

    import keras_vit
    from keras_vit.data import make_pipeline, sources
    from keras_vit.training import DEFAULT_MODEL

    root = tempfile.mkdtemp(prefix="folder_pipeline_")
    try:
        make_jpeg_folder(root, files, size=size)
        rss_after_writing = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        start = time.perf_counter()
        source = sources.from_folder(root)
        listed = time.perf_counter() - start
        ds = make_pipeline(source, image_size=size, batch_size=batch_size, training=True, seed=0, scaling=None)
        iterator = iter(ds)
        images, labels = next(iterator)
        first_batch = time.perf_counter() - start
        model = keras_vit.ViT(**{**DEFAULT_MODEL, "patch_size": 4, "num_layers": 1}, input_shape=(size, size, 3),
                              num_classes=source.num_classes, classifier_activation=None)
        model.compile(optimizer="adam", loss=keras.losses.CategoricalCrossentropy(from_logits=True), jit_compile=False)
        model.train_on_batch(images, labels)
        first_step = time.perf_counter() - start
        count, t0 = 0, time.perf_counter()
        for images, _ in iterator:  # the rest of one epoch, pipeline alone
            count += int(images.shape[0])
            if time.perf_counter() - t0 > max_seconds:
                break
        seconds = time.perf_counter() - t0
        # What from_folder did before it streamed: every file decoded once before training.
        t0 = time.perf_counter()
        for path in source.files:
            with open(path, "rb") as f:
                tf.io.decode_image(f.read(), channels=3, expand_animations=False)
        upfront = time.perf_counter() - t0
        return {
            "files": files, "image": f"{size}x{size} JPEG", "batch_size": batch_size,
            "list_seconds": round(listed, 2), "first_batch_seconds": round(first_batch, 2),
            "first_step_seconds": round(first_step, 2), "pipeline_images_per_second": round(count / seconds),
            "pipeline_images_timed": count, "upfront_decode_seconds": round(upfront, 2),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "peak_rss_mb_before_listing": round(rss_after_writing / 1024), "tf": tf.__version__,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def write_png_folder(idx_dir, root):
    """Fashion-MNIST's IDX files as root/{train,test}/<class>/<i>.png, class by class."""
    import tensorflow as tf

    from keras_vit.data.fashion_mnist import CLASS_NAMES, read_idx_dataset

    for split, (images, labels) in zip(("train", "test"), read_idx_dataset(idx_dir)):
        for label, name in enumerate(CLASS_NAMES):
            folder = os.path.join(root, split, f"{label}_{name.replace('/', '-')}")
            os.makedirs(folder)
            for i in np.flatnonzero(labels == label):
                tf.io.write_file(os.path.join(folder, f"{i:05d}.png"), tf.io.encode_png(images[i][..., None]))


def train_once(dataset, budget_minutes, seed):
    from keras_vit.training import TrainConfig, train

    config = TrainConfig(
        dataset=dataset, channels=1, image_size=28, epochs=100, budget_seconds=budget_minutes * 60, seed=seed,
        run_dir=None, output_dir=None, verbose=0,
    )
    result = train(config)
    return {
        "dataset": dataset, "test_accuracy": round(result["test_accuracy"], 4), "epochs_done": result["epochs_done"],
        "images_per_second": result["images_per_second"], "train_seconds": result["train_seconds"],
        "data": result["data"],
    }


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks folder-pipeline", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, action="append", help="folder size(s) to measure, each in its own process")
    parser.add_argument("--max-seconds", type=float, default=60.0, help="time cap of the pipeline-alone pass")
    parser.add_argument("--fashion-mnist", metavar="DIR", help="Fashion-MNIST IDX folder: train from IDX and from PNGs")
    parser.add_argument("--budget-minutes", type=float, default=3.0, help="training budget of each Fashion-MNIST run")
    parser.add_argument("--rounds", type=int, default=1, help="alternating IDX/folder rounds")
    parser.add_argument("--out", help="folder for folder-pipeline-<hardware>-<time>.jsonl and .md")
    args = parser.parse_args(argv)
    log = ResultLog("folder-pipeline", args.out, argv)
    for files in args.files or []:
        result = run_worker("benchmarks.folder_pipeline:measure_pipeline", {"files": files, "max_seconds": args.max_seconds})
        log.add({**result, "load": loadavg()})
    if args.fashion_mnist:
        data = os.path.abspath(args.fashion_mnist)
        root = tempfile.mkdtemp(prefix="fashion_png_")
        try:
            start = time.perf_counter()
            write_png_folder(data, root)
            log.add({"wrote_png_folder_seconds": round(time.perf_counter() - start, 1)})
            for round_ in range(args.rounds):
                for dataset in (data, root) if round_ % 2 == 0 else (root, data):
                    kind = "png-folder" if dataset == root else "idx"
                    log.add({"kind": kind, "round": round_, **train_once(dataset, args.budget_minutes, seed=0),
                             "load": loadavg()})
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return 0
