"""gpu-compare: ViT-B/16 training throughput and MFU on one GPU: keras_vit vs keras-hub vs timm, side by side.

Each implementation trains ViT-B/16 at 224 px (1000 classes, AdamW, sparse cross-entropy) on
random data already on the GPU, in bfloat16 mixed precision, in its own process:

- keras_vit and keras-hub: Keras 3 on the JAX backend (XLA), `mixed_bfloat16`,
  `jit_compile=True`; the first step through `model.train_on_batch`, then the jitted step with
  the state threaded through it as `model.fit` does (no per-step sync). keras_vit runs as
  shipped and with each attention path forced: `keras.ops.dot_product_attention` with flash
  attention where JAX finds it (cuDNN), the same in JAX's XLA form, and the explicit softmax.
- timm: PyTorch, `torch.autocast(bfloat16)`, `torch.compile`, fused AdamW, no per-step sync.

Implementations alternate in rounds. Model FLOPs are counted from the model's shapes
(workloads.vit_flops: every matrix product, attention's two included, forward x 3 for training) and
checked against PyTorch's FlopCounterMode on the timm model; MFU is against the dense bfloat16
peak of the data sheet (H100 SXM: 989 TFLOP/s) and against an 8192^3 bfloat16 matmul measured
in the same run. One command, printing a table last (and JSON lines under --out):

    python -m benchmarks gpu-compare [--batch 256] [--steps 20] [--rounds 1] [--out DIR]
        [--impls keras_vit,keras_vit_unfused,keras_hub,timm] [--profile]
    python -m benchmarks gpu-compare --workload tiny --batch 2 --steps 1 --impls keras_vit   # smoke run, CPU too

Keras runs on KERAS_BACKEND=jax (set for the workers unless given): the GPU image has JAX, not
TensorFlow. Implementations: keras_vit (as shipped), keras_vit_fused / keras_vit_unfused (attention
forced either way), keras_vit_fused_xla (keras.ops.dot_product_attention without flash),
keras_vit_cudnn (jax.nn.dot_product_attention(implementation="cudnn")), keras_vit_cudnn_pad16 /
keras_vit_cudnn_pad64 (the same with the 197 tokens padded to a multiple of 16 or 64 and the padding
masked by sequence lengths: cuDNN refused 197 tokens' gradient in JAX 0.11.2), keras_hub, timm.
"""

import argparse
import os
import time
import types

from benchmarks import timing
from benchmarks.workers import ResultLog, run_worker
from benchmarks.workloads import KERAS_IMPLS, TRAINING, architecture, compile_for_training
from benchmarks.workloads import keras_model, timm_model, vit_flops, workload

CUDNN_PADDED = {"keras_vit_cudnn_pad16": 16, "keras_vit_cudnn_pad64": 64}
IMPLS = (*KERAS_IMPLS, "keras_vit_fused_xla", "keras_vit_cudnn", *CUDNN_PADDED, "timm")
PROFILE = os.environ.get("GPU_COMPARE_PROFILE") == "1"  # print where each step's device time goes
PEAK_TFLOPS = {"H100": 989.4, "H200": 989.4}  # dense bfloat16, SXM data sheets


def _timed_windows(step, sync, steps, windows=3, warmup=3):
    """Seconds per step of `windows` runs of `steps` asynchronous steps, each ended by `sync()`."""
    run = timing.loop_epochs(step, sync=sync, time_steps=False)
    run(warmup)
    return [run(steps).wall_s / steps for _ in range(windows)]


def _print_top(title, totals, steps, top=18):
    total = sum(totals.values())
    print(f"PROFILE {title}: {total / steps / 1e6:.1f} ms/step of device time")
    for name, ns in sorted(totals.items(), key=lambda kv: -kv[1])[:top]:
        print(f"PROFILE   {ns / steps / 1e6:7.2f} ms {ns / total:6.1%}  {name[:110]}")


def _jax_profile(step, sync, steps=3):
    """Per-step device time of XLA ops and of kernels over `steps` profiled steps."""
    import collections
    import glob
    import tempfile

    import jax

    folder = tempfile.mkdtemp()
    with jax.profiler.trace(folder):
        for _ in range(steps):
            step()
        sync()
    from jax.profiler import ProfileData

    data = ProfileData.from_file(glob.glob(f"{folder}/**/*.xplane.pb", recursive=True)[0])
    ops, kernels = collections.Counter(), collections.Counter()
    for plane in data.planes:
        if not plane.name.startswith("/device:GPU"):
            continue
        for line in plane.lines:
            target = ops if line.name == "XLA Ops" else kernels if line.name.startswith("Stream") else None
            if target is not None:
                for event in line.events:
                    target[event.name] += event.duration_ns
    _print_top("XLA ops", ops, steps)
    _print_top("kernels", kernels, steps)


def _padded_cudnn_attention(query, key, value, bias=None, mask=None, scale=None, is_causal=False, multiple=16,
                            **unused):
    """keras_vit's padded cuDNN attention (`keras_vit.backends.jax.flash_attention`) at another token multiple."""
    from keras_vit.backends.jax import flash_attention

    if bias is not None or mask is not None:
        raise ValueError("the padded cuDNN attention takes no bias or mask")
    return flash_attention(query, key, value, scale, is_causal, multiple=multiple)


def keras_worker(impl, batch, steps, workload_name="train_b16"):
    import keras
    import numpy as np

    keras.config.set_dtype_policy("mixed_bfloat16")
    c = workload(workload_name)
    if impl in ("keras_vit_fused_xla", "keras_vit_cudnn", *CUDNN_PADDED):
        import functools

        import jax

        from keras_vit.layers import self_attention

        self_attention.ops = types.SimpleNamespace(**vars(keras.ops))
        self_attention.ops.dot_product_attention = (
            functools.partial(keras.ops.dot_product_attention, flash_attention=False) if impl == "keras_vit_fused_xla"
            else functools.partial(_padded_cudnn_attention, multiple=CUDNN_PADDED[impl]) if impl in CUDNN_PADDED
            else functools.partial(jax.nn.dot_product_attention, implementation="cudnn"))
        impl = "keras_vit_fused"
    model, version = keras_model(impl, c)
    compile_for_training(model, jit_compile=True)
    import jax

    rng = np.random.default_rng(0)
    x = jax.device_put(rng.random((batch, c["image"], c["image"], c["channels"]), dtype="float32"))
    y = jax.device_put(rng.integers(0, c["classes"], batch))
    start = time.perf_counter()
    model.train_on_batch(x, y)
    first = time.perf_counter() - start
    # Then the loop model.fit runs (keras/src/backend/jax/trainer.py): the state stays on the
    # device, threaded through the jitted step, with no per-step sync or variable write-back.
    # Private Keras API, for a benchmark only: fit's own loop cannot be timed without its syncs.
    state = [model._get_jax_state(trainable_variables=True, non_trainable_variables=True,
                                  optimizer_variables=True, metrics_variables=True, purge_model_variables=False)]
    out = [None]

    def step():
        out[0], state[0] = model.train_function(state[0], iter([(x, y, None)]))

    sync = lambda: jax.block_until_ready((out[0], state[0]))  # noqa: E731
    times = _timed_windows(step, sync, steps)
    if PROFILE:
        _jax_profile(step, sync)
    try:  # whether keras.ops.dot_product_attention finds cuDNN flash attention for these shapes
        from keras.src.backend.jax.nn import _can_use_flash_attention

        tokens = (c["image"] // c["patch"]) ** 2 + 1
        q = jax.numpy.zeros((batch, tokens, c["heads"], c["hidden"] // c["heads"]), "bfloat16")
        flash = bool(_can_use_flash_attention(q, q, q, None))
    except Exception as error:
        flash = f"unknown ({type(error).__name__})"
    return {"version": f"{version} (keras {keras.__version__}, jax {jax.__version__})", "flash_attention": flash,
            "params": model.count_params(), "first_step_s": first, "step_s": times,
            "device": str(jax.devices()[0].device_kind)}


def timm_worker(batch, steps, workload_name="train_b16", compile_model=True):
    import torch

    c = workload(workload_name)
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    model, timm_version = timm_model(c, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=cuda)
    loss_fn = torch.nn.CrossEntropyLoss()
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(torch.zeros(1, c["channels"], c["image"], c["image"], device=device))
    forward_flops = counter.get_total_flops()
    compiled = torch.compile(model) if compile_model else model
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.rand(batch, c["channels"], c["image"], c["image"], device=device, generator=gen)
    y = torch.randint(0, c["classes"], (batch,), device=device, generator=gen)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = loss_fn(compiled(x), y)
        loss.backward()
        optimizer.step()

    start = time.perf_counter()
    step()
    first = time.perf_counter() - start
    times = _timed_windows(step, torch.cuda.synchronize if cuda else (lambda: None), steps)
    if PROFILE and cuda:
        import collections

        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                step()
            torch.cuda.synchronize()
        kernels = collections.Counter()
        for event in prof.events():
            if event.device_type == torch.autograd.DeviceType.CUDA:
                kernels[event.name] += int(event.device_time * 1e3)  # us -> ns
        _print_top("kernels", kernels, 3)
    return {"version": f"{timm_version} (torch {torch.__version__})", "params": sum(p.numel() for p in model.parameters()),
            "first_step_s": first, "step_s": times, "counted_forward_flops": forward_flops,
            "device": torch.cuda.get_device_name() if cuda else "cpu"}


def matmul_peak():
    """Measured bfloat16 TFLOP/s of an 8192^3 product through PyTorch (median of 10 after 3)."""
    import torch

    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return 2 * n**3 / times[len(times) // 2] / 1e12


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks gpu-compare", description=__doc__.split("\n")[0])
    parser.add_argument("--workload", default="train_b16", choices=TRAINING)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=20, help="steps per timed window (3 windows)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--impls", default=",".join(i for i in IMPLS if i != "keras_vit_cudnn"))
    parser.add_argument("--timeout", type=int, default=240, help="seconds per worker process")
    parser.add_argument("--out", default=None, help="folder for gpu-compare-<gpu>-<time>.jsonl and .md")
    parser.add_argument("--profile", action="store_true", help="print each worker's top XLA ops and kernels")
    args = parser.parse_args(argv)
    impls = args.impls.split(",")
    unknown = sorted(set(impls) - set(IMPLS))
    if unknown:
        parser.error(f"--impls={args.impls!r} names {unknown}; expected some of {list(IMPLS)}")
    log = ResultLog("gpu-compare", args.out, argv, gpu=True)
    w = workload(args.workload)
    flops = vit_flops(**architecture(w))
    try:
        peak = matmul_peak()
    except Exception as error:  # no CUDA torch here: MFU against the data sheet only
        print(f"matmul peak not measured: {error}")
        peak = None
    print(f"model forward FLOPs/image (counted from shapes): {flops / 1e9:.2f} G; measured bf16 matmul peak: "
          f"{peak and round(peak)} TFLOP/s", flush=True)
    env = {"KERAS_BACKEND": os.environ.get("KERAS_BACKEND", "jax"), "PYTHONUNBUFFERED": "1",
           "XLA_PYTHON_CLIENT_MEM_FRACTION": os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.9"),
           **({"GPU_COMPARE_PROFILE": "1"} if args.profile else {})}
    results = []
    for round_index in range(args.rounds):
        for impl in impls:
            target = "benchmarks.gpu_compare:" + ("timm_worker" if impl == "timm" else "keras_worker")
            kwargs = {"batch": args.batch, "steps": args.steps, "workload_name": args.workload}
            if impl != "timm":
                kwargs["impl"] = impl
            result = {"impl": impl, "batch": args.batch,
                      **run_worker(target, kwargs, env=env, timeout=args.timeout, echo=("PROFILE ",)), "round": round_index}
            results.append(result)
            log.add(result)
    summary = {}
    for impl in impls:
        ok = [r for r in results if r["impl"] == impl and "step_s" in r]
        if ok:
            median, fastest, slowest = timing.median_range(t for r in ok for t in r["step_s"])
            summary[impl] = (median, fastest, slowest, ok[-1])
    device = next((r["device"] for _, _, _, r in summary.values()), "?")
    sheet = next((v for k, v in PEAK_TFLOPS.items() if k in device), None)
    reference = summary.get("timm")
    lines = [f"{args.workload} {w['image']} px training, batch {args.batch}, bf16, {device}; "
             f"forward {flops / 1e9:.2f} GFLOP/image x3",
             "| implementation | img/s (median, range) | step ms | MFU vs data sheet | vs measured matmul | vs timm | first step s |",
             "|---|---|---|---|---|---|---|"]
    for impl, (median, fastest, slowest, r) in summary.items():
        rate = args.batch / median
        achieved = 3 * flops * rate / 1e12
        mfu = f"{achieved / sheet:.1%}" if sheet else "?"
        vs_peak = f"{achieved / peak:.1%}" if peak else "?"
        vs_timm = f"{reference[0] / median:.2f}x" if reference else "?"
        lines.append(f"| {impl} {r['version']} | {rate:.0f} ({args.batch / slowest:.0f}-{args.batch / fastest:.0f}) | "
                     f"{median * 1e3:.1f} | {mfu} | {vs_peak} | {vs_timm} | {r['first_step_s']:.0f} |")
    for r in results:
        if "error" in r:
            lines.append(f"{r['impl']} round {r['round']}: FAILED: {r['error']}")
    if reference and "counted_forward_flops" in reference[3]:
        lines.append(f"timm FlopCounterMode forward: {reference[3]['counted_forward_flops'] / 1e9:.2f} GFLOP/image "
                     f"(shapes count: {flops / 1e9:.2f})")
    log.summary("\n".join(lines))
    return results
