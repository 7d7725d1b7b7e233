"""Images/s of model.fit training steps of a ViT on 28x28x1 inputs for one precision/XLA set-up.

Used for the README's precision/XLA table and the attention speed-up in RESULTS.md. Command
(one set-up per process, run back to back):

    python benchmarks/train_step_speed.py POLICY JIT PATCH HIDDEN LAYERS BATCH [STEPS [IMPL]]
    e.g. python benchmarks/train_step_speed.py float32 1 7 128 6 256
         python benchmarks/train_step_speed.py float32 1 4 128 6 256 40 keras_hub

POLICY is a Keras dtype policy, JIT 1/0 for jit_compile. Random data from an in-memory
tf.data pipeline; three warm-up steps (tracing, compilation), then STEPS (default 40) timed
steps, each timed alone: the median step gives images/s (single steps on a shared 2-core
machine vary by +-20%, the median is stable to a few percent). IMPL "keras_hub" times
keras-hub's `ViTBackbone` (same sizes, class token, a 10-class Dense head) instead of
keras_vit, for a same-machine comparison (needs `pip install keras-hub`).
"""

import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_vit  # noqa: E402
from compare import without_autotuning  # noqa: E402


class StepTimer(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.times = []

    def on_train_batch_begin(self, batch, logs=None):
        self.start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.times.append(time.perf_counter() - self.start)


def main(argv):
    policy, jit = argv[0], argv[1] == "1"
    patch, hidden, layers, batch = (int(a) for a in argv[2:6])
    steps = int(argv[6]) if len(argv) > 6 else 40
    impl = argv[7] if len(argv) > 7 else "keras_vit"
    keras.config.set_dtype_policy(policy)
    if impl == "keras_hub":
        import keras_hub

        backbone = keras_hub.models.ViTBackbone(
            image_shape=(28, 28, 1), patch_size=patch, num_layers=layers, num_heads=4, hidden_dim=hidden,
            mlp_dim=2 * hidden,
        )
        logits = keras.layers.Dense(10, dtype="float32")(backbone.output[:, 0])
        model = keras.Model(backbone.input, logits)
    elif impl == "keras_vit":
        model = keras_vit.ViT(patch_size=patch, hidden_size=hidden, num_layers=layers, num_heads=4,
                              mlp_dim=2 * hidden, input_shape=(28, 28, 1), num_classes=10)
    else:
        raise SystemExit(f"Unknown IMPL={impl!r}: expected keras_vit or keras_hub.")
    model.compile(optimizer=keras.optimizers.AdamW(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=jit)
    rng = np.random.default_rng(0)
    x = rng.random((batch * 8, 28, 28, 1), dtype="float32")
    y = rng.integers(0, 10, batch * 8)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch, drop_remainder=True).cache().repeat().prefetch(4)
    data = without_autotuning(data)
    timer = StepTimer()
    model.fit(data, steps_per_epoch=steps + 3, epochs=1, verbose=0, callbacks=[timer])
    times = np.array(timer.times[3:])
    print(f"{impl} {policy} jit={jit} patch={patch} D={hidden} L={layers} B={batch}: "
          f"{batch / np.median(times):.0f} img/s (median of {len(times)} steps, {np.median(times) * 1e3:.0f} ms/step; "
          f"mean {batch / times.mean():.0f} img/s), params={model.count_params()}")


if __name__ == "__main__":
    main(sys.argv[1:])
