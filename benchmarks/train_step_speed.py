"""Images/s of model.fit training steps of a ViT on 28x28x1 inputs for one precision/XLA set-up.

Used for the README's precision/XLA table. Command (one set-up per process, run back to back):

    python benchmarks/train_step_speed.py POLICY JIT PATCH HIDDEN LAYERS BATCH
    e.g. python benchmarks/train_step_speed.py float32 1 7 128 6 256

POLICY is a Keras dtype policy, JIT 1/0 for jit_compile. Random data; one warm-up fit on two
batches, then one timed epoch of 20 batches.
"""

import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_vit  # noqa: E402

policy, jit = sys.argv[1], sys.argv[2] == "1"
patch, hidden, layers, batch = (int(a) for a in sys.argv[3:7])
keras.config.set_dtype_policy(policy)
model = keras_vit.ViT(patch_size=patch, hidden_size=hidden, num_layers=layers, num_heads=4, mlp_dim=2 * hidden,
                      input_shape=(28, 28, 1), num_classes=10)
model.compile(optimizer=keras.optimizers.AdamW(1e-3),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=jit)
x = np.random.rand(batch * 20, 28, 28, 1).astype("float32")
y = np.random.randint(0, 10, batch * 20)
model.fit(x[: batch * 2], y[: batch * 2], batch_size=batch, epochs=1, verbose=0)
start = time.perf_counter()
model.fit(x, y, batch_size=batch, epochs=1, verbose=0)
print(f"{policy} jit={jit} patch={patch} D={hidden} L={layers} B={batch}: "
      f"{len(x) / (time.perf_counter() - start):.0f} img/s, params={model.count_params()}")
