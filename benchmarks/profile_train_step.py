"""Where the time of an XLA-compiled ViT training step goes on CPU, per compiled operation.

Runs a few `model.fit` steps of a small ViT (28x28x1 inputs) under the TensorFlow profiler and
sums the XLA CPU runtime's per-operation events (thunks) by kind and by operation, with the
HLO shape of the slowest ones (read from an XLA dump). Not a test; used to find the per-sample
kernel gradients of keras.layers.MultiHeadAttention (see RESULTS.md).

    python benchmarks/profile_train_step.py [--patch 7 --hidden 128 --layers 6 --batch 256 --steps 6]
"""

import argparse
import collections
import glob
import os
import re
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
DUMP = tempfile.mkdtemp(prefix="xla_dump_")
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={DUMP} --xla_dump_hlo_as_text").strip()
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402

import keras_vit  # noqa: E402


def thunk_times(logdir):
    """{operation name: (total ms, count)} of the XLA CPU thunks in a profile."""
    path = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)[0]
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    times, counts = collections.Counter(), collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            if "Eigen" not in line.name:  # XLA's intra-op threads run the thunks
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if "::" in name or name.startswith("end:"):
                    continue
                times[name] += event.duration_ps / 1e9
                counts[name] += 1
    return times, counts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for flag, default in (("patch", 7), ("hidden", 128), ("layers", 6), ("batch", 256), ("steps", 6), ("top", 20)):
        parser.add_argument(f"--{flag}", type=int, default=default)
    args = parser.parse_args(argv)
    model = keras_vit.ViT(patch_size=args.patch, hidden_size=args.hidden, num_layers=args.layers, num_heads=4,
                          mlp_dim=2 * args.hidden, input_shape=(28, 28, 1), num_classes=10,
                          classifier_activation=None)  # logits, as the loss below expects
    model.compile(optimizer=keras.optimizers.AdamW(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=True)
    rng = np.random.default_rng(0)
    x = rng.random((args.batch * args.steps, 28, 28, 1), dtype="float32")
    y = rng.integers(0, 10, args.batch * args.steps)
    model.fit(x[: args.batch * 2], y[: args.batch * 2], batch_size=args.batch, epochs=1, verbose=0)
    logdir = tempfile.mkdtemp(prefix="profile_")
    tf.profiler.experimental.start(logdir)
    model.fit(x, y, batch_size=args.batch, epochs=1, verbose=0)
    tf.profiler.experimental.stop()

    times, counts = thunk_times(logdir)
    hlo = ""
    for path in glob.glob(os.path.join(DUMP, "*one_step_on_data*cpu_after_optimizations.txt")):
        with open(path) as f:
            hlo += f.read()
    total = sum(times.values())
    print(f"{args.steps} steps of batch {args.batch}: {total:.0f} ms of thunk time ({total / args.steps:.0f} ms per step)")
    kinds, kind_counts = collections.Counter(), collections.Counter()
    for name, ms in times.items():
        kind = re.sub(r"([._]\d+)+$", "", name)
        kinds[kind] += ms
        kind_counts[kind] += counts[name]
    print("\nby kind (ms per step, share):")
    for kind, ms in kinds.most_common(args.top):
        print(f"  {ms / args.steps:8.1f}  {ms / total:6.1%}  {kind_counts[kind] // args.steps:4d}/step  {kind}")
    print("\nslowest operations (ms per step, HLO shape):")
    for name, ms in times.most_common(args.top):
        match = re.search(r"%" + re.escape(name) + r" = (\S+) (\w+)\(", hlo)
        shape = f"{match.group(1)} {match.group(2)}" if match else ""
        print(f"  {ms / args.steps:8.1f}  {name:28s} {shape}")


if __name__ == "__main__":
    main()
