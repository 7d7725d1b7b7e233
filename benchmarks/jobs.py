"""The measurements that run in a worker process (`benchmarks.workers.run_worker`), shared by
compare, backends and step: one Keras model trained or run by the one timing engine, timm the
same way, and the machine's matmul roofline.
"""

from __future__ import annotations

import os

from benchmarks import timing
from benchmarks.workloads import compile_for_training, keras_model, random_batch, repeated_batch, timm_model, vit_arguments
from benchmarks.workloads import without_autotuning, workload


def _versions(backend):
    import keras

    module = __import__(backend)
    return f"keras {keras.__version__}, {backend} {getattr(module, '__version__', '?')}"


def keras_job(impl, workload_name, steps, jit=True, precision="float32", data="repeated", warm_short=False,
              fit_seconds=None, overrides=None, progress=False):
    """Figures of `impl` (a `workloads.KERAS_IMPLS` name) on a workload under KERAS_BACKEND.

    Training: `timing.train_figures` over `model.fit` epochs of (short, long) = `steps` steps, on
    `data`: "repeated" (one in-memory batch, tf.data without autotuning), "numpy" (arrays passed to
    fit) or "tf.data" (the arrays through tf.data). Inference: `predict_on_batch`, median of 5 calls.
    """
    import keras
    import numpy as np

    w = workload(workload_name, overrides)
    why = None
    if precision == "auto":
        precision, why = auto_precision(impl, w)
    precision, jit = resolve_setting(precision, jit, w["hidden"])
    keras.config.set_dtype_policy(precision)
    model, version = keras_model(impl, w)
    backend = keras.backend.backend()
    version = f"{version} ({_versions(backend)})"
    setting = {"precision": precision, "jit": jit, **({"auto": why} if why else {})}
    if not w["train"]:
        model.compile(jit_compile=jit)
        x, _ = random_batch(w)
        median = inference_step_s(lambda: model.predict_on_batch(x))
        return {"version": version, "step_s": median, "images_per_s": w["batch"] / median, **setting}
    compile_for_training(model, jit_compile=jit)
    short, long = steps
    if data == "repeated":
        feed = repeated_batch(w)
    else:
        rng = np.random.default_rng(0)
        x = rng.random((w["batch"] * max(short, long), w["image"], w["image"], w["channels"]), dtype="float32")
        y = rng.integers(0, w["classes"], len(x))

        def feed(n):
            if data == "numpy":
                return dict(x=x[: n * w["batch"]], y=y[: n * w["batch"]], batch_size=w["batch"], shuffle=False)
            import tensorflow as tf

            ds = tf.data.Dataset.from_tensor_slices((x[: n * w["batch"]], y[: n * w["batch"]]))
            return dict(x=without_autotuning(ds.batch(w["batch"]).prefetch(2)))

    run = timing.keras_epochs(model, feed, fit_seconds=fit_seconds, progress=progress)
    return {"version": version, "versions": _versions(backend), **setting,
            **timing.train_figures(run, w["batch"], short, long, warm_short=warm_short)}


def inference_step_s(call, warm=3, calls=10):
    """Median seconds of `calls` calls of `call` after `warm` untimed ones.

    oneDNN creates and caches its kernels over the first calls: after one warm call, the median of
    five calls of one bfloat16 set-up varied 2x between processes (ViT-B/16 on an AMX Xeon).
    """
    run = timing.loop_epochs(call)
    run(warm)
    return timing.median_range(run(calls).step_s)[0]


def auto_precision(impl, w):
    """(dtype policy, why) that `precision="auto"` picks for workload `w`, as the command would pick it.

    Training: `keras-vit train`'s choice for the workload's model and batch (on a CPU with native
    bfloat16, a trial of that model). Inference: `keras-vit predict`'s for the float32 model
    (`keras_vit.export.predict.inference_precision`, whose trial times the model's own copies).
    """
    import keras

    from keras_vit import precision_workloads
    from keras_vit.export.predict import inference_precision
    from keras_vit.training import distribute

    if w["train"]:
        trial = precision_workloads.training_workload(vit_arguments(w), w["image"], w["channels"], w["batch"])
        return distribute.choose_precision("auto", width=w["hidden"], workload=trial)
    keras.config.set_dtype_policy("float32")
    precision, why = inference_precision(keras_model(impl, w)[0], "auto")
    return {"bfloat16": "mixed_bfloat16"}.get(precision, precision), why


def resolve_setting(precision, jit, width):
    """(dtype policy, jit_compile) of a Keras job: "auto" and "bfloat16" as keras_vit resolves them.

    precision "auto" is what `keras-vit train --precision auto` picks for a model of token width
    `width` on this machine and backend; "bfloat16" means "mixed_bfloat16". jit None is the
    backend's default for that precision (TensorFlow: XLA for float32 only on CPU).
    """
    from keras_vit.training import distribute

    precision = {"bfloat16": "mixed_bfloat16"}.get(precision, precision)
    if precision == "auto":
        precision = distribute.resolve_precision("auto", width=width)
    if jit is None:
        jit = distribute.default_jit_compile(precision)
    return precision, jit


def timm_training_step(w, precision="float32"):
    """(step function, model, images, timm version): one AdamW training step of timm's ViT on workload `w`'s
    random batch, PyTorch eager on CPU; precision "bfloat16" runs it under `torch.autocast` (timm's own way)."""
    import torch

    model, timm_version = timm_model(w)
    x, y = random_batch(w)
    x, y = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(), torch.from_numpy(y)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        optimizer.zero_grad(set_to_none=True)
        with autocast(precision):
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()

    return step, model, x, timm_version


def autocast(precision):
    """timm's mixed precision on CPU: `torch.autocast` to bfloat16, or nothing for float32."""
    import torch

    if precision not in ("float32", "bfloat16"):
        raise SystemExit(f"timm precision={precision!r}: expected 'float32' or 'bfloat16'")
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bfloat16")


def timm_job(workload_name, steps, threads=None, warm_short=True, overrides=None, precision="float32"):
    """Figures of timm's ViT (PyTorch eager, AdamW) on a workload, timed like `keras_job`."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    w = workload(workload_name, overrides)
    step, model, x, timm_version = timm_training_step(w, precision)
    version = f"{timm_version} (torch {torch.__version__}, eager, {torch.get_num_threads()} threads)"
    if not w["train"]:
        model.eval()
        with torch.no_grad(), autocast(precision):
            median = inference_step_s(lambda: model(x))
        return {"version": version, "step_s": median, "images_per_s": w["batch"] / median}
    short, long = steps
    return {"version": version, **timing.train_figures(timing.loop_epochs(step), w["batch"], short, long, warm_short)}


def roofline_job(size=3072, repeats=10):
    """The machine's float32 matmul peak (best library) in this process."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    from benchmarks.matmul_peak import library_gflops

    return {"size": size, **library_gflops(size, repeats)}
