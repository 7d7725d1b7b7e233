"""dino-step: what does a DINO step cost with local views, with and without XLA, on this machine? (issue 53)

The 20-minute budget's DINO model (conv stem + 4 blocks of width 128, head "small", batch 256, 2
global views of 32 px) on random pixels: the median seconds of a training step for each set-up
(local views, their side, XLA or not), then the conv stem alone, forward and backward on
1,536 images, at 32 and 16 px with and without XLA. Each set-up in this process, one after another.

    python -m benchmarks dino-step [--steps 16] [--setups 0:16:xla,0:16:none,6:16:xla,6:16:none]
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def step_seconds(local_views, local_size, jit_compile, steps=16, batch=256):
    """Median seconds of a `SelfDistillation` training step (the first 4 left out: compilation)."""
    import keras
    import tensorflow as tf

    from keras_vit.models.spec import ModelSpec, build_spec
    from keras_vit.pretraining.dino import SelfDistillation

    spec = ModelSpec(variant=None, architecture=dict(patch_size=1, hidden_size=128, num_layers=4, num_heads=4,
                                                     mlp_dim=256), image_size=32, channels=3, stem=True,
                     attention_init="mimetic")
    model = SelfDistillation(build_spec(spec, None), head="small", local_views=local_views,
                             local_size=local_size if local_views else None)
    model.compile(optimizer=keras.optimizers.AdamW(1e-4), jit_compile=jit_compile)
    rng = np.random.RandomState(0)
    views = rng.rand(batch, 2, 32, 32, 3).astype("float32") * 255
    if local_views:
        views = {"global": views, "local": rng.rand(batch, local_views, local_size, local_size, 3).astype("float32") * 255}
    times = []

    class Timer(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            times.append(time.perf_counter() - self.start)

    model.fit(tf.data.Dataset.from_tensors(views).repeat(), steps_per_epoch=steps, epochs=1, verbose=0,
              callbacks=[Timer()])
    return float(np.median(times[4:]))


def stem_seconds(size, jit_compile, images=1536, repeats=5):
    """Mean seconds of the conv stem's forward and backward pass on `images` images of `size` px."""
    import tensorflow as tf

    from keras_vit.models import stems

    stem = stems.conv_stem(channels=3)
    x = tf.constant(np.random.RandomState(0).rand(images, size, size, 3).astype("float32"))

    @tf.function(jit_compile=jit_compile)
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(stem(x, training=True) ** 2)
        return tape.gradient(loss, stem.trainable_variables)

    step(x)
    start = time.perf_counter()
    for _ in range(repeats):
        step(x)
    return (time.perf_counter() - start) / repeats


def main(argv=None):
    import sys

    from benchmarks.machine import header

    parser = argparse.ArgumentParser(prog="python -m benchmarks dino-step", description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--setups", default="0:16:xla,0:16:none,6:16:xla,6:16:none",
                        help="LOCAL_VIEWS:LOCAL_SIZE:xla|none, comma-separated")
    parser.add_argument("--no-stem", action="store_true", help="skip the conv stem's timings")
    args = parser.parse_args(argv)
    print(header("python -m benchmarks dino-step " + " ".join(sys.argv[2:] if argv is None else argv)))
    for setup in args.setups.split(","):
        local, size, xla = setup.split(":")
        seconds = step_seconds(int(local), int(size), xla == "xla", args.steps)
        print(f"DINO step, {local} local views of {size} px, {'XLA' if xla == 'xla' else 'no XLA'}: "
              f"median {seconds:.3f} s", flush=True)
    if not args.no_stem:
        for size in (32, 16):
            for jit in (True, False):
                print(f"conv stem forward+backward, 1,536 images of {size} px, {'XLA' if jit else 'no XLA'}: "
                      f"{stem_seconds(size, jit):.3f} s", flush=True)


if __name__ == "__main__":
    main()
