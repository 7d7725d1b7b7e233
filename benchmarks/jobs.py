"""The measurements that run in a worker process (`benchmarks.workers.run_worker`), shared by
compare, backends and step: one Keras model trained or run by the one timing engine, timm the
same way, and the machine's matmul roofline.
"""

from __future__ import annotations

import os

from benchmarks import timing
from benchmarks.workloads import compile_for_training, keras_model, random_batch, repeated_batch, timm_model
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
    keras.config.set_dtype_policy(precision)
    model, version = keras_model(impl, w)
    backend = keras.backend.backend()
    version = f"{version} ({_versions(backend)})"
    if not w["train"]:
        model.compile(jit_compile=jit)
        x, _ = random_batch(w)
        run = timing.loop_epochs(lambda: model.predict_on_batch(x))
        run(1)
        median = timing.median_range(run(5).step_s)[0]
        return {"version": version, "step_s": median, "images_per_s": w["batch"] / median}
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
    return {"version": version, "versions": _versions(backend),
            **timing.train_figures(run, w["batch"], short, long, warm_short=warm_short)}


def timm_training_step(w):
    """(step function, model, images, timm version): one AdamW training step of timm's ViT on workload `w`'s
    random batch, PyTorch eager on CPU."""
    import torch

    model, timm_version = timm_model(w)
    x, y = random_batch(w)
    x, y = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(), torch.from_numpy(y)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        optimizer.step()

    return step, model, x, timm_version


def timm_job(workload_name, steps, threads=None, warm_short=True, overrides=None):
    """Figures of timm's ViT (PyTorch eager, AdamW) on a workload, timed like `keras_job`."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    w = workload(workload_name, overrides)
    step, model, x, timm_version = timm_training_step(w)
    version = f"{timm_version} (torch {torch.__version__}, eager, {torch.get_num_threads()} threads)"
    if not w["train"]:
        model.eval()
        with torch.no_grad():
            run = timing.loop_epochs(lambda: model(x))
            run(1)
            median = timing.median_range(run(5).step_s)[0]
        return {"version": version, "step_s": median, "images_per_s": w["batch"] / median}
    short, long = steps
    return {"version": version, **timing.train_figures(timing.loop_epochs(step), w["batch"], short, long, warm_short)}


def roofline_job(size=3072, repeats=10):
    """The machine's float32 matmul peak (best library) in this process."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    from benchmarks.matmul_peak import library_gflops

    return {"size": size, **library_gflops(size, repeats)}
