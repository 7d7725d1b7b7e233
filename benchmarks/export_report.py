"""export-report: size, latency and agreement of every export format, as markdown sections.

For a small ViT trained on the shipped Fashion-MNIST sample: file size, latency per image
(batch 1, this CPU), test accuracy and top-1 agreement with the Keras float32 model, for the
SavedModel and each TFLite quantization. For ViT-B/16 (224 px, random weights): size and
latency only.

    python -m benchmarks export-report            # both parts, ~15-30 min
    python -m benchmarks export-report --skip-b16  # small model only
    python -m benchmarks export-report --serving   # SavedModel size and latency only

--serving writes its own section: for Ti/16 and B/16 (random weights) the SavedModel's
`variables/` bytes against the float32 weights, and `serving_default` at batch 1 and 8 run the
way TF Serving runs it (TF1 loader, session fed by SignatureDef tensor names), with and without
jit_compile, against `model.predict_on_batch` of the same model compiled with XLA, the three
called in turn within each round.
    python -m benchmarks export-report --ti16-only # Ti/16 TFLite vs ONNX vs Keras, ~3 min
    python -m benchmarks export-report --skip-b16 --epochs 1 --runs 5 --calibration 16 --max-test 64   # smoke run

Each section is printed; --out writes it as export-report-<part>-<hardware>-<time>.md with the rows
as JSONL, and --results FILE also replaces the same section of a markdown file.

TFLite files run with ai_edge_litert's Interpreter (XNNPACK, --threads threads). The machine's
`uptime` load averages are recorded next to the latencies, since other jobs share the CPU.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

import keras
import numpy as np
import tensorflow as tf

import keras_vit
from benchmarks.machine import machine_record
from benchmarks.workers import ResultLog
from keras_vit import export
from keras_vit.data import fashion_mnist
from keras_vit.export import _common

SECTION = "## Export: SavedModel and TFLite"
SERVING_SECTION = "## SavedModel serving: size and latency against Keras with XLA"


def load():
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def time_per_image(fn, image, runs, warmup=3):
    for _ in range(warmup):
        fn(image)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn(image)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def tflite_runner(path, threads):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=path, num_threads=threads)
    runner = interpreter.get_signature_runner("serving_default")
    output = interpreter.get_signature_list()["serving_default"]["outputs"][0]
    return lambda image: runner(images=image)[output]


def onnx_runner(path, threads):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return lambda image: session.run(None, {"images": image})[0]


def train_small(epochs, seed):
    (x_train, y_train), (x_test, y_test) = fashion_mnist.load_sample()
    keras.utils.set_random_seed(seed)
    model = keras_vit.ViT(
        patch_size=7, hidden_size=64, num_layers=4, num_heads=4, mlp_dim=128,
        input_shape=(28, 28, 1), num_classes=10, preprocessing="unit", name="vit_fashion_small",
        classifier_activation=None,  # logits: the report compares them with each export's
    )
    model.compile(
        optimizer=keras.optimizers.AdamW(2e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    start = time.time()
    model.fit(x_train[..., None].astype("float32"), y_train, epochs=epochs, batch_size=64, verbose=2)
    print(f"trained {epochs} epochs in {time.time() - start:.0f} s", flush=True)
    return model, x_train[..., None].astype("float32"), x_test[..., None].astype("float32"), y_test


def small_model_rows(args, work):
    model, x_train, x_test, y_test = train_small(args.epochs, args.seed)
    x_test, y_test = x_test[: args.max_test], y_test[: args.max_test]
    logits = np.asarray(model.predict(x_test, verbose=0, batch_size=256))
    reference = logits.argmax(-1)
    rows = [("Keras .keras (float32)", None, _common.file_size(save(model, work)), None, np.mean(reference == y_test), 1.0, "")]
    base = os.path.join(work, "serving")
    path = export.saved_model(model, base, class_names=fashion_mnist.CLASS_NAMES)
    signature = tf.saved_model.load(path).signatures["serving_default"]
    probabilities = np.concatenate(
        [signature(images=tf.constant(x_test[i : i + 500]))["probabilities"].numpy() for i in range(0, len(x_test), 500)]
    )
    np.testing.assert_allclose(probabilities, tf.nn.softmax(logits).numpy(), atol=1e-5)
    seconds = time_per_image(lambda image: signature(images=image), tf.constant(x_test[:1]), args.runs)
    rows.append(("SavedModel serving_default", "float32", _common.file_size(path), seconds,
                 np.mean(probabilities.argmax(-1) == y_test), np.mean(probabilities.argmax(-1) == reference), load()))
    for quantization in export.QUANTIZATIONS:
        file = os.path.join(work, f"small_{quantization}.tflite")
        result = export.tflite(model, file, quantization, representative_data=x_train[:args.calibration],
                               calibration_samples=args.calibration)
        run = tflite_runner(file, args.threads)
        outputs = np.concatenate([run(x_test[i : i + 1]) for i in range(len(x_test))])
        if quantization == "none":
            error = float(np.max(np.abs(outputs - tf.nn.softmax(logits).numpy())))
            print(f"TFLite float32 max |probability - Keras| = {error:.2e}", flush=True)
        seconds = time_per_image(run, x_test[:1], args.runs)
        predicted = outputs.argmax(-1)
        rows.append((f"TFLite {quantization}", quantization, result.size_bytes, seconds,
                     np.mean(predicted == y_test), np.mean(predicted == reference), load()))
        print(rows[-1], result.ops, flush=True)
    result = export.onnx(model, os.path.join(work, "small.onnx"))
    run = onnx_runner(result.path, args.threads)
    predicted = np.concatenate([run(x_test[i : i + 500]) for i in range(0, len(x_test), 500)]).argmax(-1)
    rows.append(("ONNX (onnxruntime)", "float32", result.size_bytes, time_per_image(run, x_test[:1], args.runs),
                 np.mean(predicted == y_test), np.mean(predicted == reference), load()))
    return rows


def save(model, work):
    path = os.path.join(work, "small.keras")
    model.save(path)
    return path


def b16_rows(args, work):
    model = keras_vit.ViT_B16(num_classes=1000, preprocessing="symmetric")
    rng = np.random.default_rng(0)
    image = rng.uniform(0, 255, (1, 224, 224, 3)).astype("float32")
    rows = []
    base = os.path.join(work, "b16_serving")
    path = export.saved_model(model, base)
    signature = tf.saved_model.load(path).signatures["serving_default"]
    seconds = time_per_image(lambda x: signature(images=x), tf.constant(image), args.b16_runs, warmup=1)
    rows.append(("SavedModel serving_default (see note)", "float32", _common.file_size(path), seconds, None, None, load()))
    shutil.rmtree(base)
    calibration = rng.uniform(0, 255, (8, 224, 224, 3)).astype("float32")
    for quantization in export.QUANTIZATIONS:
        file = os.path.join(work, f"b16_{quantization}.tflite")
        start = time.time()
        result = export.tflite(model, file, quantization, representative_data=calibration, calibration_samples=8)
        print(f"B16 {quantization}: converted in {time.time() - start:.0f} s, ops {result.ops}", flush=True)
        seconds = time_per_image(tflite_runner(file, args.threads), image, args.b16_runs, warmup=1)
        rows.append((f"TFLite {quantization}", quantization, result.size_bytes, seconds, None, None, load()))
        print(rows[-1], flush=True)
        os.remove(file)
    result = export.onnx(model, os.path.join(work, "b16.onnx"))
    seconds = time_per_image(onnx_runner(result.path, args.threads), image, args.b16_runs, warmup=1)
    rows.append(("ONNX (onnxruntime)", "float32", result.size_bytes, seconds, None, None, load()))
    os.remove(result.path)
    return rows


def session_runner(path):
    """serving_default of a SavedModel as TF Serving runs it: TF1 loader, feed and fetch by name."""
    graph = tf.Graph()
    session = tf.compat.v1.Session(graph=graph)
    signature = tf.compat.v1.saved_model.loader.load(session, ["serve"], path).signature_def["serving_default"]
    run = session.make_callable(signature.outputs["probabilities"].name, [signature.inputs["images"].name])
    return run


def serving_rows(args, work):
    """Size of variables/ and batch-1/8 latency ratios for each variant in args.serving_variants."""
    rows = []
    rng = np.random.default_rng(0)
    for variant in args.serving_variants:
        model = keras_vit.ViT(variant, num_classes=1000, preprocessing="symmetric")
        for weight in model.weights:
            weight.assign(rng.normal(0, 0.02, weight.shape).astype("float32"))
        model.compile(jit_compile=True)
        weight_bytes = 4 * sum(int(np.prod(weight.shape)) for weight in model.weights)
        runners = {"Keras predict_on_batch (XLA)": model.predict_on_batch}
        sizes = {}
        for jit in (False, True):
            path = export.saved_model(model, os.path.join(work, f"{variant}_serving"), jit_compile=jit)
            sizes[jit] = _common.file_size(os.path.join(path, "variables"))
            runners[f"SavedModel serving_default, jit_compile={jit}"] = session_runner(path)
        print(f"{variant}: weights {weight_bytes:,} B, variables/ {sizes}", flush=True)
        size = model.input_shape[1]
        for batch in (1, 8):
            x = rng.uniform(0, 255, (batch, size, size, 3)).astype("float32")
            expected = tf.nn.softmax(model.predict_on_batch(x)).numpy()
            for name, run in runners.items():
                out = run(x)
                if name.startswith("SavedModel"):
                    np.testing.assert_allclose(out, expected, atol=2e-4)
                run(x)  # warm-up (XLA compiles on the first call of a shape)
            times = {name: [] for name in runners}
            for _ in range(args.serving_rounds):
                for name, run in runners.items():
                    start = time.perf_counter()
                    run(x)
                    times[name].append(time.perf_counter() - start)
            keras_times = times["Keras predict_on_batch (XLA)"]
            for name, values in times.items():
                ratios = [t / k for t, k in zip(values, keras_times)]
                rows.append((variant, batch, name, statistics.median(values), statistics.median(ratios), min(ratios),
                             max(ratios), sizes[name.endswith("True")] if name.startswith("SavedModel") else None,
                             weight_bytes, load()))
                print(rows[-1], flush=True)
        shutil.rmtree(os.path.join(work, f"{variant}_serving"), ignore_errors=True)
    return rows


def serving_table(rows):
    lines = ["| model | batch | how | median latency / batch | ratio to Keras XLA: median (min-max) | variables/ / float32 weights | load (1/5/15 min) |",
             "|---|---|---|---|---|---|---|"]
    for variant, batch, name, seconds, ratio, low, high, size, weight_bytes, machine_load in rows:
        stored = "" if size is None else f"{size / 1e6:.2f} MB / {weight_bytes / 1e6:.2f} MB = {size / weight_bytes:.3f}x"
        lines.append(f"| {variant} | {batch} | {name} | {seconds * 1e3:.1f} ms | {ratio:.2f} ({low:.2f}-{high:.2f}) | {stored} | {machine_load} |")
    return "\n".join(lines)


def serving_main(args, argv):
    work = tempfile.mkdtemp(prefix="export_report_serving_")
    try:
        started = load()
        rows = serving_rows(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    command = "python -m benchmarks export-report " + " ".join(argv if argv is not None else sys.argv[2:])
    text = f"""{SERVING_SECTION}

Command: `{command.strip()}`; {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC;
{_cpu()}, {os.cpu_count()} CPU cores
shared with other jobs, load at start {started};
TensorFlow {tf.__version__}, Keras {keras.__version__}. Random weights, 1000 classes, scaling inside.
SavedModel: `keras_vit.export.saved_model`, run as TF Serving runs it (TF1 loader, `serve` tag,
session fed and fetched by SignatureDef tensor names). Keras: `model.predict_on_batch` after
`compile(jit_compile=True)`. Each round calls the three in turn on the same batch;
{args.serving_rounds} rounds after a warm-up, ratio = that call's time / the Keras call's time in
the same round.

{serving_table(rows)}
"""
    publish(text, args, argv, "serving", SERVING_SECTION, rows)
TI16_SECTION = "## Export: ViT-Ti/16 TFLite and ONNX against Keras (issue 14)"


def ti16_section(args, work, rounds=5, calls=10):
    """ViT-Ti/16 with random weights (head too): float32 TFLite and ONNX against Keras, side by side."""
    keras.utils.set_random_seed(args.seed)
    model = keras_vit.ViT("Ti/16", num_classes=1000, preprocessing="imagenet")
    rng = np.random.default_rng(args.seed)
    head = model.get_layer("head")
    head.set_weights([rng.normal(0, 0.05, w.shape).astype("float32") for w in head.get_weights()])
    x = rng.uniform(0, 255, (8, 224, 224, 3)).astype("float32")
    logits = np.asarray(model.predict(x, verbose=0))  # the model's preprocessing layer scales [0, 255]
    expected = tf.nn.softmax(logits).numpy()
    files = {
        "TFLite float32 (LiteRT, XNNPACK)": (export.tflite(model, os.path.join(work, "ti16.tflite")), tflite_runner),
        "ONNX (onnxruntime, CPU)": (export.onnx(model, os.path.join(work, "ti16.onnx")), onnx_runner),
    }
    runners = {name: make(result.path, args.threads) for name, (result, make) in files.items()}
    lines = ["| format | size | max abs error, probabilities | max abs error, log-probabilities | top-1 agreement | latency / image, median of rounds (min-max) |",
             "|---|---|---|---|---|---|"]
    times = {name: [] for name in runners}
    for name, run in runners.items():
        run(x[:1])  # warm-up
    for _ in range(rounds):  # alternate the formats so both see the same machine load
        for name, run in runners.items():
            start = time.perf_counter()
            for _ in range(calls):
                run(x[:1])
            times[name].append((time.perf_counter() - start) / calls)
    for name, run in runners.items():
        probabilities = np.concatenate([run(x[i : i + 1]) for i in range(len(x))])
        error = float(np.abs(probabilities - expected).max())
        log_error = float(np.abs(np.log(probabilities) - np.log(expected)).max())
        agreement = float(np.mean(probabilities.argmax(-1) == expected.argmax(-1)))
        t = times[name]
        lines.append(f"| {name} | {files[name][0].size_bytes / 1e6:.2f} MB | {error:.1e} | {log_error:.1e} | "
                     f"{agreement * 100:.0f}% | {statistics.median(t) * 1e3:.1f} ms ({min(t) * 1e3:.1f}-{max(t) * 1e3:.1f}) |")
    ratio = [a / b for a, b in zip(*times.values())]
    return "\n".join(lines), ratio


def table(rows, with_accuracy):
    head = "| format | size | latency / image | load (1/5/15 min) |"
    rule = "|---|---|---|---|"
    if with_accuracy:
        head = "| format | size | latency / image | test accuracy | top-1 agreement with Keras | load (1/5/15 min) |"
        rule = "|---|---|---|---|---|---|"
    lines = [head, rule]
    for name, _, size, seconds, accuracy, agreement, machine_load in rows:
        cells = [name, f"{size / 1e6:.2f} MB" if size >= 1e5 else f"{size / 1e3:.1f} kB",
                 "" if seconds is None else f"{seconds * 1e3:.2f} ms"]
        if with_accuracy:
            cells += [f"{accuracy * 100:.2f}%", f"{agreement * 100:.2f}%"]
        cells.append(machine_load)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cpu():
    """CPU model and its vector/bfloat16 flags, as the preamble of every timing asks."""
    record = machine_record()
    return f"{record['cpu']} (flags: {' '.join(record['flags']) or 'none'})"


def publish(text, args, argv, part, section, rows=()):
    """Prints a finished section; --out keeps it (and its rows as JSONL), --results replaces it in that file."""
    log = ResultLog("export-report", args.out, argv, tag=part)
    for row in rows:
        log.add({"part": part, "row": [None if v is None else (v if isinstance(v, (str, int)) else float(v)) for v in row]},
                echo=False)
    log.summary(text)
    if args.results:
        write_section(text, args.results, section)
        print(f"wrote {args.results}")


def write_section(text, path, section=SECTION):
    old = open(path).read() if os.path.isfile(path) else "# Benchmark results\n"
    pattern = re.compile(re.escape(section) + r".*?(?=\n## |\Z)", re.S)
    new = pattern.sub(lambda _: text.rstrip("\n"), old) if pattern.search(old) else old.rstrip("\n") + "\n\n" + text
    with open(path, "w") as f:
        f.write(new.rstrip("\n") + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks export-report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=200, help="timed runs per small-model file")
    parser.add_argument("--b16-runs", type=int, default=5, help="timed runs per ViT-B/16 file")
    parser.add_argument("--threads", type=int, default=2, help="LiteRT interpreter threads")
    parser.add_argument("--calibration", type=int, default=200, help="int8 calibration images")
    parser.add_argument("--skip-b16", action="store_true")
    parser.add_argument("--ti16-only", action="store_true", help="only the Ti/16 TFLite/ONNX/Keras comparison")
    parser.add_argument("--results", help="markdown file whose section to replace (e.g. a scratch copy of RESULTS.md)")
    parser.add_argument("--out", help="folder for export-report-<part>-<hardware>-<time>.md and .jsonl")
    parser.add_argument("--max-test", type=int, help="judge the small model on the first N test images (smoke runs)")
    parser.add_argument("--serving", action="store_true", help="only the SavedModel size and latency section")
    parser.add_argument("--serving-variants", nargs="+", default=["Ti16", "B16"], help="variants for --serving")
    parser.add_argument("--serving-rounds", type=int, default=10, help="timed rounds per batch size for --serving")
    args = parser.parse_args(argv)
    if args.serving:
        serving_main(args, argv)
        return

    work = tempfile.mkdtemp(prefix="export_report_")
    if args.ti16_only:
        try:
            started = load()
            rows, ratio = ti16_section(args, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        text = f"""{TI16_SECTION}

Command: `python -m benchmarks export-report --ti16-only`;
{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; {_cpu()}, {os.cpu_count()} CPU cores shared
with other jobs (load at start {started}); TensorFlow {tf.__version__}, Keras {keras.__version__}.
ViT-Ti/16, 224 px, 1000 classes, random weights (head included), imagenet scaling inside both
files; 8 random images, batch 1, {args.threads} threads. Both files output probabilities; errors
are against softmax of the Keras float32 logits. Latency: 5 rounds of 10 calls, the formats
alternated within each round; TFLite/ONNX time ratio per round: median {statistics.median(ratio):.2f}
(min {min(ratio):.2f}, max {max(ratio):.2f}).

{rows}
"""
        publish(text, args, argv, "ti16", TI16_SECTION)
        return
    try:
        started = load()
        small = small_model_rows(args, work)
        large = [] if args.skip_b16 else b16_rows(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    command = "python -m benchmarks export-report " + " ".join(argv if argv is not None else sys.argv[2:])
    text = f"""{SECTION}

Command: `{command.strip()}`; {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC;
{_cpu()}, {os.cpu_count()} CPU cores shared with other jobs
(load at start {started}); TensorFlow {tf.__version__}, Keras {keras.__version__}. Latency: median of
batch-1 calls (SavedModel: `serving_default` through `tf.saved_model.load`; TFLite:
ai_edge_litert Interpreter, XNNPACK, {args.threads} threads). Exported models take [0, 255]
pixels (scaling inside). int8: every matmul, convolution, GELU and softmax in int8, LayerNorm statistics and residual
adds/muls in float (the default `float_ops`), float32 input/output, calibrated on
{args.calibration} training images.

Small ViT (patch 7, D 64, 4 layers, 4 heads, MLP 128, 28x28x1, {args.epochs} epochs on the shipped
8,000-image sample), judged on {min(args.max_test or 2000, 2000):,} of the sample's 2,000 test images:

{table(small, True)}
"""
    if large:
        text += f"""
ViT-B/16 (224 px, 1000 classes, random weights; size and latency only, median of {args.b16_runs} runs):

{table(large, False)}

The SavedModel stores each variable once (see "{SERVING_SECTION}").
"""
    publish(text, args, argv, "formats", SECTION, small + large)
