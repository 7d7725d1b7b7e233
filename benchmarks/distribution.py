"""Per-device memory and step time of data vs model parallel training on JAX, and the giants' plans.

    python -m benchmarks distribution --devices 8 --steps 10

Sets XLA_FLAGS=--xla_force_host_platform_device_count=DEVICES before JAX starts (so on a CPU
machine it makes DEVICES host devices; on a GPU/TPU machine it uses the accelerators found and
--devices only matters for CPU). For one ViT it trains `--steps` AdamW steps per plan: one
device, data parallel (Nx1), and model parallel meshes (batch x model), and prints the bytes of
weights + optimizer slots on the fullest device (measured from the arrays' shards) and the
median step time after compilation. Then the parameters of ViT-g/14, G/14 and e/14 (from 1- and
2-block builds) and what weights + AdamW state need per device on each mesh of 8 devices.

Host CPU devices share the machine's cores, so CPU step times show what the collectives cost,
not a speed-up; on accelerators each device computes on its own.
"""

import argparse
import os
import sys
import time


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks distribution", description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=8, help="host CPU devices (default: 8)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per plan (default: 10)")
    parser.add_argument("--batch-size", type=int, default=32, help="global batch (default: 32)")
    parser.add_argument("--hidden-size", type=int, default=512)
    parser.add_argument("--num-heads", type=int, default=8)
    parser.add_argument("--mlp-dim", type=int, default=2048)
    parser.add_argument("--num-layers", type=int, default=4)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--patch-size", type=int, default=8)
    parser.add_argument("--no-giants", dest="giants", action="store_false", help="skip the giants' counts")
    args = parser.parse_args(argv)
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={args.devices}"
    os.environ.setdefault("KERAS_BACKEND", "jax")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    import jax
    import keras
    import numpy as np

    from benchmarks.machine import cpu_info, loadavg
    from keras_vit import ViT, configs
    from keras_vit import distribution as dist

    devices = len(jax.devices())
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; JAX {jax.__version__}, Keras {keras.__version__}; "
          f"{devices} {jax.devices()[0].platform} devices; CPU {cpu_info()[0]} ({os.cpu_count()} cores), "
          f"bf16 flags {cpu_info()[1] or 'none'}; load {loadavg()}")
    model_kwargs = dict(hidden_size=args.hidden_size, num_heads=args.num_heads, mlp_dim=args.mlp_dim,
                        num_layers=args.num_layers, patch_size=args.patch_size, image_size=args.image_size,
                        num_classes=1000, classifier_activation=None)
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (args.batch_size, args.image_size, args.image_size, 3)).astype("float32")
    y = rng.integers(0, 1000, args.batch_size).astype("int32")
    plans = [("one device", None), (f"data_parallel {devices}x1", dist.data_parallel())]
    plans += [(f"model_parallel {devices // m}x{m}", dist.model_parallel((devices // m, m)))
              for m in (2, 4, 8) if devices % m == 0 and m <= devices]
    print(f"ViT D{args.hidden_size} {args.num_heads} heads MLP {args.mlp_dim} x{args.num_layers} layers, "
          f"{args.image_size}px patch {args.patch_size}, AdamW, global batch {args.batch_size}, float32")
    print("| plan | weights + AdamW slots per device | median step (s) | vs one device |")
    print("|---|---|---|---|")
    baseline = None
    for name, distribution in plans:
        scope = distribution.scope() if distribution is not None else _null()
        with scope:
            model = ViT(**model_kwargs)
            model.compile(optimizer=keras.optimizers.AdamW(1e-4),
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=True)
            model.optimizer.build(model.trainable_variables)
            held = dist.bytes_per_device(list(model.variables) + list(model.optimizer.variables))
            model.train_on_batch(x, y)  # compiles
            times = []
            for _ in range(args.steps):
                start = time.perf_counter()
                loss = model.train_on_batch(x, y)
                float(np.asarray(loss))  # waits for the step
                times.append(time.perf_counter() - start)
        step = float(np.median(times))
        baseline = baseline or step
        print(f"| {name} | {held / 2**20:,.2f} MiB | {step:.3f} | {step / baseline:.2f}x |", flush=True)
        del model
        keras.utils.clear_session()
    if not args.giants:
        return 0
    print("\n| variant | parameters (1000 classes) | weights + grads + AdamW per device, mesh " +
          " | ".join(f"{8 // m}x{m}" for m in (1, 2, 4, 8)) + " |")
    print("|---|---|" + "---|" * 4)
    for variant in ("H14", "g14", "G14", "e14"):
        row = configs.VARIANTS[variant]
        one, two = (ViT(variant, num_layers=n, num_classes=1000).count_params() for n in (1, 2))
        params = one + (row.num_layers - 1) * (two - one)
        keras.utils.clear_session()
        per_mesh = " | ".join(f"{params * 16 / m / 2**30:.1f} GiB" for m in (1, 2, 4, 8))
        print(f"| {row.description} | {params:,} | {per_mesh} |", flush=True)
    return 0


def _null():
    import contextlib

    return contextlib.nullcontext()


if __name__ == "__main__":
    sys.exit(main())
