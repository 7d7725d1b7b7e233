"""CPU speed of keras_vit against keras-hub, timm and the matmul roofline, side by side in one run.

Every measurement runs in its own process; implementations alternate within each round, so a
change in the machine's load hits all of them alike. Workloads (issue 16):

- infer_b16: ViT-B/16 at 224 px, inference, batch 8 (Keras: XLA; timm: eager, no_grad).
- train_ti4: ViT-Ti/4 at 32 px, batch 128, AdamW. Three `model.fit` epochs: SHORT steps (its
  wall, tracing and compilation included, is "first fit"), SHORT again, then LONG. One step =
  the median of the LONG epoch's single steps (a callback times each); the issue's definition,
  (LONG wall - warm SHORT wall) / (LONG - SHORT), is kept as step_s_by_difference in the JSON
  (it swings wildly when the machine's load changes between the two epochs). "fit overhead" =
  the warm SHORT epoch's wall minus its steps. timm: a plain loop, timed the same way.
- train_default: the same for `keras-vit train`'s default model (patch 7, D 128, 6 layers,
  4 heads, MLP 256, 28x28x1, 10 classes) at the default batch of 256.

The roofline is FLOPs (matrix products counted from the shapes, `vit_flops`; x3 for training)
over the machine's float32 matmul peak: the best 3072^3 rate of XLA, TensorFlow's oneDNN, NumPy
and PyTorch (benchmarks/matmul_peak.py's `library_gflops`), measured in its own process in every
round. Each figure is printed with its ratio to keras_vit's and to the roofline, with /proc/stat busy and steal shares (benchmarks/machine.py):
on a shared machine, ratios of figures taken side by side are what carries over.

    python benchmarks/compare.py [--workloads infer_b16,train_ti4,train_default]
        [--impls keras_vit,keras_hub,timm] [--rounds 3] [--steps 10,40] [--out DIR]
        [--torch-threads N]

timm's figure needs a quiet machine: PyTorch's OpenMP threads wait for each other after every
operation, so when other jobs hold a core, timm with one thread per core ran 7.8x slower than
with one thread (benchmarks/torch_threads.py, RESULTS.md); TensorFlow's thread pool does not
collapse that way. --torch-threads sets torch.set_num_threads; the threads used are printed.

Needs `pip install -e .[bench]` (keras-hub) and, optionally, `pip install --no-deps timm`
(timm imports torchvision; where none matching torch is installed, empty stand-in modules are
used: a ViT needs nothing from it). An implementation that is not installed is skipped.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # machine.py imports keras_vit, and so TensorFlow

from machine import cpu_info, cpu_jiffies, cpu_share, loadavg  # noqa: E402

WORKLOADS = {
    "infer_b16": dict(patch=16, hidden=768, layers=12, heads=12, mlp=3072, image=224, channels=3, classes=1000,
                      batch=8, train=False),
    "train_ti4": dict(patch=4, hidden=192, layers=12, heads=3, mlp=768, image=32, channels=3, classes=10,
                      batch=128, train=True),
    "train_default": dict(patch=7, hidden=128, layers=6, heads=4, mlp=256, image=28, channels=1, classes=10,
                          batch=256, train=True),
}
# keras_vit_unfused: keras_vit with the explicit softmax attention instead of
# keras.ops.dot_product_attention (keras_vit.layers.self_attention.FUSED_ATTENTION).
IMPLS = ("keras_vit", "keras_vit_unfused", "keras_hub", "timm")
ARCH = ("patch", "hidden", "layers", "heads", "mlp", "image", "classes", "channels")


def vit_flops(patch, hidden, layers, heads, mlp, image, classes, channels=3):
    """Forward FLOPs of one image through a class-token ViT (2 per multiply-add, matrix products only).

    >>> round(vit_flops(16, 768, 12, 12, 3072, 224, 1000) / 1e9, 2)  # ViT-B/16
    35.13
    """
    del heads  # attention's FLOPs do not depend on the head count
    grid = (image // patch) ** 2
    tokens = grid + 1
    per_block = (
        2 * tokens * hidden * 3 * hidden  # query, key, value
        + 2 * 2 * tokens * tokens * hidden  # scores and context
        + 2 * tokens * hidden * hidden  # attention output
        + 2 * 2 * tokens * hidden * mlp  # the two MLP layers
    )
    return 2 * grid * patch * patch * channels * hidden + layers * per_block + 2 * hidden * classes


def _random_batch(w, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.random((w["batch"], w["image"], w["image"], w["channels"]), dtype="float32")
    return x, rng.integers(0, w["classes"], w["batch"])


def without_autotuning(dataset):
    """`dataset` without tf.data's autotuning, as keras_vit's own pipelines run.

    Deleting an autotuned iterator waited up to ~10 s after busy steps, and `fit` deletes one per
    epoch: that showed as "fit overhead" or slow epochs (benchmarks/iterator_teardown.py).
    """
    import tensorflow as tf

    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def repeated_batch(w, batch=None):
    """A tf.data pipeline repeating one in-memory batch of workload `w` (random unless given)."""
    import tensorflow as tf

    return without_autotuning(tf.data.Dataset.from_tensors(batch or _random_batch(w)).repeat().prefetch(2))


def keras_model(impl, w):
    import keras

    if impl == "keras_hub":
        import keras_hub

        backbone = keras_hub.models.ViTBackbone(
            image_shape=(w["image"], w["image"], w["channels"]), patch_size=w["patch"], num_layers=w["layers"],
            num_heads=w["heads"], hidden_dim=w["hidden"], mlp_dim=w["mlp"])
        logits = keras.layers.Dense(w["classes"], dtype="float32")(backbone.output[:, 0])
        return keras.Model(backbone.input, logits), keras_hub.__version__
    import keras_vit
    from keras_vit.layers import self_attention

    self_attention.FUSED_ATTENTION = impl != "keras_vit_unfused"
    model = keras_vit.ViT(patch_size=w["patch"], hidden_size=w["hidden"], num_layers=w["layers"],
                          num_heads=w["heads"], mlp_dim=w["mlp"], input_shape=(w["image"], w["image"], w["channels"]),
                          num_classes=w["classes"], classifier_activation=None)  # logits, as the loss expects
    return model, keras_vit.__version__


def keras_worker(impl, w, steps):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, ROOT)
    import keras
    import tensorflow as tf

    model, version = keras_model(impl, w)
    version = f"{version} (keras {keras.__version__}, TF {tf.__version__})"
    x, y = _random_batch(w)
    if not w["train"]:
        model.compile(jit_compile=True)
        model.predict_on_batch(x)
        times = []
        for _ in range(5):
            start = time.perf_counter()
            model.predict_on_batch(x)
            times.append(time.perf_counter() - start)
        return {"version": version, "images_per_s": w["batch"] / sorted(times)[2]}
    model.compile(optimizer=keras.optimizers.AdamW(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=True)
    data = repeated_batch(w, (x, y))

    class StepTimes(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            times.append(time.perf_counter() - self.start)

    times = []

    def fit_wall(n):
        times.clear()
        start = time.perf_counter()
        model.fit(data, steps_per_epoch=n, epochs=1, verbose=0, callbacks=[StepTimes()])
        return time.perf_counter() - start, list(times)

    return _train_figures(version, w, steps, fit_wall)


def _train_figures(version, w, steps, run):
    """Training figures from `run(n)` -> (wall seconds, per-step seconds) of an n-step epoch."""
    short, long = steps
    (first, _), (warm_short, short_times), (warm_long, long_times) = run(short), run(short), run(long)
    import statistics

    median = statistics.median(long_times)
    return {"version": version, "step_s": median, "images_per_s": w["batch"] / median,
            "step_s_by_difference": (warm_long - warm_short) / (long - short), "first_fit_s": first,
            "fit_overhead_s": warm_short - sum(short_times)}


def torchvision_stub():
    # timm imports torchvision's FrozenBatchNorm2d (and data transforms) at import time; a ViT
    # uses neither. Where no torchvision matching torch is installed, empty modules stand in.
    import importlib.abc
    import importlib.machinery
    import types

    def stand_in(name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Anything(name, (), {})

    class Anything(type):
        def __getattr__(cls, name):
            return stand_in(name)

        def __call__(cls, *args, **kwargs):
            return Anything("value", (), {})

    class Loader(importlib.abc.Loader):
        def create_module(self, spec):
            module = types.ModuleType(spec.name)
            module.__path__ = []
            module.__getattr__ = stand_in
            return module

        def exec_module(self, module):
            pass

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "torchvision" or name.startswith("torchvision."):
                return importlib.machinery.ModuleSpec(name, Loader(), is_package=True)
            return None

    sys.meta_path.insert(0, Finder())


def import_timm():
    try:
        import timm
    except (ImportError, RuntimeError):
        for name in [m for m in sys.modules if m.startswith(("timm", "torchvision"))]:
            del sys.modules[name]
        torchvision_stub()
        import timm
    return timm


def timm_worker(w, steps, threads=None):
    import torch

    if threads:
        torch.set_num_threads(threads)
    timm = import_timm()
    from timm.models.vision_transformer import VisionTransformer

    model = VisionTransformer(img_size=w["image"], patch_size=w["patch"], in_chans=w["channels"],
                              num_classes=w["classes"], embed_dim=w["hidden"], depth=w["layers"],
                              num_heads=w["heads"], mlp_ratio=w["mlp"] / w["hidden"])
    x, y = _random_batch(w)
    x, y = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(), torch.from_numpy(y)
    version = f"{timm.__version__} (torch {torch.__version__}, eager, {torch.get_num_threads()} threads)"
    if not w["train"]:
        model.eval()
        with torch.no_grad():
            model(x)
            times = []
            for _ in range(5):
                start = time.perf_counter()
                model(x)
                times.append(time.perf_counter() - start)
        return {"version": version, "images_per_s": w["batch"] / sorted(times)[2]}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()

    def loop_wall(n):
        times = []
        start = time.perf_counter()
        for _ in range(n):
            step_start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            optimizer.step()
            times.append(time.perf_counter() - step_start)
        return time.perf_counter() - start, times

    return _train_figures(version, w, steps, loop_wall)


def roofline_worker():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from matmul_peak import library_gflops

    return library_gflops(3072, 10)


def run_worker(args, timeout):
    before = cpu_jiffies()
    cmd = [sys.executable, os.path.abspath(__file__), "--worker"] + args
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")))
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    share = cpu_share(before, cpu_jiffies())
    for line in proc.stdout.splitlines()[::-1]:
        if line.startswith("RESULT "):
            return {**json.loads(line[len("RESULT "):]), "cpu": share}
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"error": " | ".join(tail)}


def available(impl):
    if impl == "keras_hub":
        module = "keras_hub"
    elif impl == "timm":
        module = "timm"
    else:
        return True
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _median_range(values):
    import statistics

    return statistics.median(values), min(values), max(values)


def roofline_summary(results):
    """(median machine peak in GFLOP/s, its summary line) of the roofline rounds in `results`; (None, None) if none."""
    rounds = [r for r in results if r.get("kind") == "roofline" and "gflops" in r]
    if not rounds:
        return None, None
    peak, low, high = _median_range([r["gflops"] for r in rounds])
    names = dict.fromkeys(name for r in rounds for name in r.get("by_library", {}))
    by_library = ", ".join(
        f"{name} {_median_range([r['by_library'][name] for r in rounds if name in r['by_library']])[0]:.0f}"
        for name in names)
    line = (f"matmul roofline (float32, 3072^3, the best library each round): {peak:.0f} GFLOP/s "
            f"(range {low:.0f}-{high:.0f} over {len(rounds)} rounds)"
            + (f"; medians by library: {by_library}" if by_library else ""))
    return peak, line


def summarise(results, workloads, impls):
    peak, line = roofline_summary(results)
    lines = [line] if line else []
    for name in workloads:
        w = WORKLOADS[name]
        flops = vit_flops(**{k: w[k] for k in ARCH}) * (3 if w["train"] else 1)
        limit = peak * 1e9 / flops if peak else None
        lines.append(f"\n{name}: batch {w['batch']}, {flops / 1e9:.2f} GFLOP/image"
                     + (f", roofline {limit:.1f} img/s" if limit else ""))
        header = "| implementation | img/s median (range) | vs keras_vit | vs roofline |"
        sep = "|---|---|---|---|"
        if w["train"]:
            header += " step s | first fit s | fit overhead s |"
            sep += "---|---|---|"
        lines += [header, sep]
        rows = {impl: [r for r in results if r.get("workload") == name and r.get("impl") == impl and "images_per_s" in r]
                for impl in impls}
        base = rows.get("keras_vit") and _median_range([r["images_per_s"] for r in rows["keras_vit"]])[0]
        for impl, rs in rows.items():
            if not rs:
                continue
            rate, low, high = _median_range([r["images_per_s"] for r in rs])
            line = (f"| {impl} {rs[0]['version']} | {rate:.1f} ({low:.1f}-{high:.1f}) | "
                    + (f"{rate / base:.2f}x | " if base else "? | ") + (f"{rate / limit:.0%} |" if limit else "? |"))
            if w["train"]:
                line += (f" {_median_range([r['step_s'] for r in rs])[0]:.3f} |"
                         f" {_median_range([r['first_fit_s'] for r in rs])[0]:.1f} |"
                         f" {_median_range([r['fit_overhead_s'] for r in rs])[0]:.2f} |")
            lines.append(line)
    shares = [r["cpu"] for r in results if r.get("cpu")]
    if shares:
        lines.append(f"\nCPU time during the workers (/proc/stat, all processes): busy "
                     f"{min(s['busy'] for s in shares):.0%}-{max(s['busy'] for s in shares):.0%}, steal "
                     f"{min(s['steal'] for s in shares):.0%}-{max(s['steal'] for s in shares):.0%}")
    for r in results:
        if "error" in r:
            lines.append(f"FAILED {r.get('workload', '')} {r.get('impl', r.get('kind'))} round {r['round']}: {r['error']}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--impls", default="keras_vit,keras_hub,timm")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", default="10,40", help="SHORT,LONG training steps per timed epoch")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per worker process")
    parser.add_argument("--torch-threads", type=int, help="torch.set_num_threads for timm (default: torch's, one per core)")
    parser.add_argument("--out", help="folder for compare-<time>.jsonl and .md")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        short, long = (int(s) for s in args.steps.split(","))
        if not 0 < short < long:
            raise ValueError
    except ValueError:
        parser.error(f"--steps={args.steps!r}: expected SHORT,LONG with 0 < SHORT < LONG, e.g. 10,40")
    if args.worker:
        kind = args.worker[0]
        if kind == "roofline":
            result = roofline_worker()
        else:
            impl, workload = kind, args.worker[1]
            w = WORKLOADS[workload]
            result = (timm_worker(w, (short, long), args.torch_threads) if impl == "timm"
                      else keras_worker(impl, w, (short, long)))
        print("RESULT " + json.dumps(result))
        return
    workloads, impls = args.workloads.split(","), args.impls.split(",")
    for flag, names, known in (("--workloads", workloads, WORKLOADS), ("--impls", impls, IMPLS)):
        unknown = [n for n in names if n not in known]
        if unknown:
            parser.error(f"{flag}={','.join(names)!r} names {unknown}; expected some of {list(known)}")
    missing = [impl for impl in impls if not available(impl)]
    impls = [impl for impl in impls if impl not in missing]
    name, bf16 = cpu_info()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    header = (f"{stamp}; CPU: {name}, {os.cpu_count()} cores, native bfloat16: {', '.join(bf16) or 'none'}; "
              f"load before: {loadavg()}\ncommand: python benchmarks/compare.py {' '.join(sys.argv[1:] if argv is None else argv)}"
              + (f"\nnot installed, skipped: {', '.join(missing)}" if missing else ""))
    print(header, flush=True)
    results = []
    out_path = None
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        out_path = os.path.join(args.out, time.strftime("compare-%Y%m%d-%H%M%S", time.gmtime()))
    for round_index in range(args.rounds):
        jobs = [({"kind": "roofline"}, ["roofline"])]
        jobs += [({"workload": wl, "impl": impl}, [impl, wl]) for wl in workloads for impl in impls]
        for tags, worker_args in jobs:
            extra = ["--torch-threads", str(args.torch_threads)] if args.torch_threads else []
            result = {**tags, "round": round_index,
                      **run_worker(worker_args + ["--steps", args.steps] + extra, args.timeout)}
            results.append(result)
            print(json.dumps(result), flush=True)
            if out_path:
                with open(out_path + ".jsonl", "a") as f:
                    f.write(json.dumps(result) + "\n")
    table = summarise(results, workloads, impls)
    print("\n" + table)
    if out_path:
        with open(out_path + ".md", "w") as f:
            f.write(header + "\n" + table + "\n")


if __name__ == "__main__":
    main()
