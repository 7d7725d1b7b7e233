"""iterator-teardown: seconds per `model.fit` epoch outside its steps, with tf.data autotuning on and off.

`model.fit` makes a new iterator over the training data every epoch and one over the validation
data every validation pass, and deletes the old one. With tf.data's autotuning on, that deletion
waited for seconds after a model had kept the cores busy (issue 16's "every fit call or epoch adds
about 7 s"); `keras_vit.data.make_pipeline` turns autotuning off. This measures both settings on
the package's own pipelines (the shipped sample; `keras-vit train`'s default model, batch 256,
validation on the 2,000 test images every epoch), each setting in its own process, alternating:

- outside steps: per epoch (the first, which compiles, left out), its wall less the time inside
  training steps and validation batches (callbacks time them): iterator set-up and deletion;
- pipeline: images/s of the training pipeline alone (no model), one pass.

    python -m benchmarks iterator-teardown [--rounds 2] [--epochs 6] [--train-examples 4096] [--out DIR]

Prints one JSON line per process and a table; --out also writes iterator-teardown-<hardware>-<time>.{jsonl,md}.
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks import timing
from benchmarks.workers import ResultLog, run_worker
from benchmarks.workloads import WORKLOADS, keras_model

SETTINGS = ("package", "autotune")  # package: make_pipeline as shipped; autotune: tf.data autotuning on


def _pipelines(setting, batch_size, train_examples, test_examples=None):
    import tensorflow as tf

    from keras_vit.data.fashion_mnist import load_sample
    from keras_vit.data.pipeline import make_pipeline
    from keras_vit.data.sources import from_arrays

    (x_train, y_train), (x_test, y_test) = load_sample()
    train = make_pipeline(from_arrays(x_train[:train_examples], y_train[:train_examples]), image_size=28,
                          channels=1, batch_size=batch_size, training=True, augment="light", seed=0)
    test = make_pipeline(from_arrays(x_test[:test_examples], y_test[:test_examples]), image_size=28, channels=1,
                         batch_size=batch_size)
    if setting == "autotune":
        options = tf.data.Options()
        options.autotune.enabled = True
        train, test = train.with_options(options), test.with_options(options)
    return train, test


def worker(setting, epochs, batch_size, train_examples, test_examples=None, num_layers=None, jit_compile=True):
    """Per epoch of `model.fit` with validation: seconds outside its steps, and pipeline images/s.

    test_examples, num_layers (None: all 2,000 test images, the default model's blocks) and jit_compile
    (False: no XLA compilation of the steps) make smoke runs short.
    """
    import keras

    train, test = _pipelines(setting, batch_size, train_examples, test_examples)
    autotune = train.options().autotune.enabled is not False  # None: tf.data's default, on
    rate_start = time.perf_counter()
    images = sum(int(batch.shape[0]) for batch, _ in train)
    pipeline_rate = images / (time.perf_counter() - rate_start)
    workload = WORKLOADS["train_default"] if num_layers is None else dict(WORKLOADS["train_default"], layers=num_layers)
    model, _ = keras_model("keras_vit", workload)
    model.compile(optimizer="adamw", loss=keras.losses.CategoricalCrossentropy(from_logits=True), jit_compile=jit_compile)
    clock = timing.step_clock()
    model.fit(train, validation_data=test, epochs=epochs, verbose=0, callbacks=[clock])
    # The first epoch holds tracing and compilation: only the later ones are kept.
    outside = [e["wall"] - e["inside"] for e in clock.epochs[1:]]
    return {"setting": setting, "autotune": autotune, "outside_steps_s": outside,
            "epoch_s": [e["wall"] for e in clock.epochs[1:]], "pipeline_images_per_s": pipeline_rate}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks iterator-teardown", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=6, help="epochs per process; the first is not counted")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--train-examples", type=int, default=4096)
    parser.add_argument("--out", help="folder for iterator-teardown-<hardware>-<time>.jsonl and .md")
    args = parser.parse_args(argv)
    log = ResultLog("iterator-teardown", args.out, argv)
    results = []
    for round_index in range(args.rounds):
        for setting in SETTINGS:
            result = run_worker("benchmarks.iterator_teardown:worker",
                                {"setting": setting, "epochs": args.epochs, "batch_size": args.batch_size,
                                 "train_examples": args.train_examples})
            result = {"setting": setting, **result, "round": round_index}
            results.append(result)
            log.add(result)
    log.summary(summarise(results))
    return results


def summarise(results):
    """A markdown table: per setting, seconds per epoch outside its steps (median, max, all) and pipeline images/s."""
    lines = ["| setting | tf.data autotune | epoch s (median) | outside steps s: median | max | all "
             "| pipeline alone img/s (median) |",
             "|---|---|---|---|---|---|---|"]
    for setting in SETTINGS:
        rows = [r for r in results if r.get("setting") == setting and "outside_steps_s" in r]
        if not rows:
            continue
        times = [t for r in rows for t in r["outside_steps_s"]]
        epoch = statistics.median(t for r in rows for t in r["epoch_s"])
        rate = statistics.median(r["pipeline_images_per_s"] for r in rows)
        lines.append(f"| {setting} | {'on' if rows[0]['autotune'] else 'off'} | {epoch:.2f} | {statistics.median(times):.2f} | "
                     f"{max(times):.2f} | {' '.join(f'{t:.2f}' for t in times)} | {rate:.0f} |")
    lines += [f"FAILED {r['setting']} round {r['round']}: {r['error']}" for r in results if "error" in r]
    return "\n".join(lines)
