"""Seconds per `model.fit` epoch outside its steps, with tf.data autotuning on and off.

`model.fit` makes a new iterator over the training data every epoch and one over the validation
data every validation pass, and deletes the old one. With tf.data's autotuning on, that deletion
waited for seconds after a model had kept the cores busy (issue 16's "every fit call or epoch adds
about 7 s"); `keras_vit.data.make_pipeline` turns autotuning off. This measures both settings on
the package's own pipelines (the shipped sample; `keras-vit train`'s default model, batch 256,
validation on the 2,000 test images every epoch), each setting in its own process, alternating:

- outside steps: per epoch (the first, which compiles, left out), its wall less the time inside
  training steps and validation batches (callbacks time them): iterator set-up and deletion;
- pipeline: images/s of the training pipeline alone (no model), one pass.

    python benchmarks/iterator_teardown.py [--rounds 2] [--epochs 6] [--train-examples 4096] [--out DIR]

Prints one JSON line per process and a table; --out also writes iterator_teardown-<time>.{jsonl,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from machine import cpu_info, cpu_jiffies, cpu_share, loadavg  # noqa: E402

SETTINGS = ("package", "autotune")  # package: make_pipeline as shipped; autotune: tf.data autotuning on


def _pipelines(setting, batch_size, train_examples):
    import tensorflow as tf

    from keras_vit.data.fashion_mnist import load_sample
    from keras_vit.data.pipeline import make_pipeline
    from keras_vit.data.sources import from_arrays

    (x_train, y_train), (x_test, y_test) = load_sample()
    train = make_pipeline(from_arrays(x_train[:train_examples], y_train[:train_examples]), image_size=28,
                          channels=1, batch_size=batch_size, training=True, augment="light", seed=0)
    test = make_pipeline(from_arrays(x_test, y_test), image_size=28, channels=1, batch_size=batch_size)
    if setting == "autotune":
        options = tf.data.Options()
        options.autotune.enabled = True
        train, test = train.with_options(options), test.with_options(options)
    return train, test


def worker(setting, epochs, batch_size, train_examples):
    """Per epoch of `model.fit` with validation: seconds outside its steps, and pipeline images/s."""
    import keras

    import keras_vit

    train, test = _pipelines(setting, batch_size, train_examples)
    autotune = train.options().autotune.enabled is not False  # None: tf.data's default, on
    rate_start = time.perf_counter()
    images = sum(int(batch.shape[0]) for batch, _ in train)
    pipeline_rate = images / (time.perf_counter() - rate_start)
    model = keras_vit.ViT(patch_size=7, hidden_size=128, num_layers=6, num_heads=4, mlp_dim=256,
                          input_shape=(28, 28, 1), num_classes=10)
    model.compile(optimizer="adamw", loss="categorical_crossentropy", jit_compile=True)

    class Clock(keras.callbacks.Callback):
        """Epoch walls and the seconds inside training steps and validation batches."""

        def __init__(self):
            super().__init__()
            self.epochs = []

        def on_epoch_begin(self, epoch, logs=None):
            self.epochs.append({"start": time.perf_counter(), "inside": 0.0})

        def _begin(self, batch, logs=None):
            self.batch_start = time.perf_counter()

        def _end(self, batch, logs=None):
            self.epochs[-1]["inside"] += time.perf_counter() - self.batch_start

        on_train_batch_begin = on_test_batch_begin = _begin
        on_train_batch_end = on_test_batch_end = _end

        def on_epoch_end(self, epoch, logs=None):
            self.epochs[-1]["wall"] = time.perf_counter() - self.epochs[-1]["start"]

    clock = Clock()
    model.fit(train, validation_data=test, epochs=epochs, verbose=0, callbacks=[clock])
    # The first epoch holds tracing and compilation: only the later ones are kept.
    outside = [e["wall"] - e["inside"] for e in clock.epochs[1:]]
    return {"setting": setting, "autotune": autotune, "outside_steps_s": outside,
            "epoch_s": [e["wall"] for e in clock.epochs[1:]], "pipeline_images_per_s": pipeline_rate}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=6, help="epochs per process; the first is not counted")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--train-examples", type=int, default=4096)
    parser.add_argument("--out", help="folder for iterator_teardown-<time>.jsonl and .md")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print("RESULT " + json.dumps(worker(args.worker, args.epochs, args.batch_size, args.train_examples)))
        return None
    name, _ = cpu_info()
    header = (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; CPU: {name}, {os.cpu_count()} cores; "
              f"load before: {loadavg()}\ncommand: python benchmarks/iterator_teardown.py "
              + " ".join(sys.argv[1:] if argv is None else argv))
    print(header, flush=True)
    results = []
    for round_index in range(args.rounds):
        for setting in SETTINGS:
            before = cpu_jiffies()
            proc = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--worker", setting, "--epochs", str(args.epochs),
                 "--batch-size", str(args.batch_size), "--train-examples", str(args.train_examples)],
                capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT))
            lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
            result = ({**json.loads(lines[-1][len("RESULT "):]), "cpu": cpu_share(before, cpu_jiffies())} if lines
                      else {"setting": setting, "error": " | ".join(proc.stderr.strip().splitlines()[-3:])})
            result["round"] = round_index
            results.append(result)
            print(json.dumps(result), flush=True)
    table = summarise(results)
    print("\n" + table)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        stem = os.path.join(args.out, time.strftime("iterator_teardown-%Y%m%d-%H%M%S", time.gmtime()))
        with open(stem + ".jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in results)
        with open(stem + ".md", "w") as f:
            f.write(header + "\n\n" + table + "\n")
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


if __name__ == "__main__":
    main()
