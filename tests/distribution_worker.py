"""Runs in a subprocess of tests/test_distribution.py, with 8 host CPU devices (XLA_FLAGS set by
the caller before JAX starts); prints one JSON line of what it measured.

    python tests/distribution_worker.py mesh FOLDER     # (a)-(d), the giant, a short fit's losses
    python tests/distribution_worker.py fit_losses PROCESS_ID NUM_PROCESSES COORDINATOR
"""

import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

# A ViT whose every split dimension divides a model axis of 4: 4 heads, MLP 64, 8 classes.
SMALL = dict(num_heads=4, num_classes=8, image_size=16, classifier_activation=None)
STEPS, BATCH = 4, 16


def data(count=STEPS * BATCH, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(0, 1, (count, 16, 16, 3)).astype("float32"), (np.arange(count) % 8).astype("int32")


def build(distribution, weights=None, **overrides):
    import keras

    from keras_vit import ViT

    scope = distribution.scope() if distribution is not None else _null()
    with scope:
        model = ViT("tiny", **{**SMALL, **overrides})
        if weights is not None:
            model.set_weights(weights)
        model.compile(
            optimizer=keras.optimizers.AdamW(1e-3, weight_decay=0.05),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            jit_compile=True,
        )
    return model


def _null():
    import contextlib

    return contextlib.nullcontext()


def fit(model, distribution, x, y, batch_size=BATCH):
    scope = distribution.scope() if distribution is not None else _null()
    with scope:
        history = model.fit(x, y, batch_size=batch_size, epochs=1, shuffle=False, verbose=0)
    return history.history["loss"]


def mesh_checks():
    import keras

    from keras_vit import distribution as dist

    out = {"devices": len(keras.distribution.list_devices())}
    keras.utils.set_random_seed(0)
    x, y = data()
    start = [w.copy() for w in build(None).get_weights()]

    # (a) same weights after STEPS steps as on one device.
    reference = build(None, start)
    fit(reference, None, x, y)
    expected = reference.get_weights()
    out["max_abs_diff"] = {}
    plans = {"data_parallel 8x1": dist.data_parallel(), "model_parallel 2x4": dist.model_parallel("2x4"),
             "model_parallel 1x8": dist.model_parallel("1x8")}
    models = {}
    for name, distribution in plans.items():
        model = build(distribution, start)
        fit(model, distribution, x, y)
        out["max_abs_diff"][name] = max(float(np.max(np.abs(a - b))) for a, b in zip(model.get_weights(), expected))
        models[name] = (model, distribution)
    out["weight_scale"] = max(float(np.max(np.abs(w))) for w in expected)
    out["largest_update"] = max(float(np.max(np.abs(a - b))) for a, b in zip(expected, start))

    # (b) every variable's sharding, and the slots' of its optimizer.
    model, distribution = models["model_parallel 2x4"]
    out["shardings"] = {}
    for variable in list(model.variables) + list(model.optimizer.variables):
        shard = variable.value.addressable_shards[0].data.shape
        out["shardings"][variable.path] = {
            "shape": list(variable.shape), "spec": list(dist.sharding_of(variable)), "shard_shape": list(shard),
            "rule": list(dist.layout_of(variable.path, tuple(variable.shape), 4)),
        }

    # (c) per-device bytes of weights + AdamW slots as the model axis grows (a wider model).
    out["bytes_per_device"] = {}
    for model_size in (1, 2, 4, 8):
        distribution = dist.model_parallel((8 // model_size, model_size))
        wide = build(distribution, hidden_size=64, num_heads=8, mlp_dim=256)
        with distribution.scope():
            wide.optimizer.build(wide.trainable_variables)
        variables = list(wide.variables) + list(wide.optimizer.variables)
        out["bytes_per_device"][model_size] = dist.bytes_per_device(variables)
        out["total_bytes"] = sum(int(np.prod(v.shape)) * 4 for v in variables)

    # (d) a checkpoint of the sharded model loads on one device, and one device's into a mesh.
    folder = sys.argv[2]
    model, distribution = models["model_parallel 2x4"]
    sharded_weights = model.get_weights()
    model.save_weights(os.path.join(folder, "sharded.weights.h5"))
    model.save(os.path.join(folder, "sharded.keras"))
    single = build(None)
    single.load_weights(os.path.join(folder, "sharded.weights.h5"))
    loaded = keras.saving.load_model(os.path.join(folder, "sharded.keras"))
    out["sharded_to_single"] = all(np.array_equal(a, b) for a, b in zip(single.get_weights(), sharded_weights))
    out["sharded_keras_to_single"] = all(np.array_equal(a, b) for a, b in zip(loaded.get_weights(), sharded_weights))
    out["single_device_after_load"] = sorted({str(d) for v in single.variables for d in v.value.devices()})
    reference.save_weights(os.path.join(folder, "single.weights.h5"))
    mesh_model = build(distribution)
    with distribution.scope():
        mesh_model.load_weights(os.path.join(folder, "single.weights.h5"))
    out["single_to_sharded"] = all(np.array_equal(a, b) for a, b in zip(mesh_model.get_weights(), expected))
    out["specs_after_load"] = {
        v.path: list(dist.sharding_of(v)) for v in mesh_model.variables
    }
    # The one-process run the two-process test compares with.
    out["fit_losses"] = fit_losses()

    # The largest giant, one block at its widths, built on a 1x8 mesh: each variable is created split.
    out["giants"] = {}
    for variant in ("e14",):
        from keras_vit import ViT

        distribution = dist.model_parallel("1x8")
        with distribution.scope():
            giant = ViT(variant, num_layers=1, num_classes=1000)
        total = sum(int(np.prod(v.shape)) * 4 for v in giant.variables)
        out["giants"][variant] = {"total_bytes": total, "bytes_per_device": dist.bytes_per_device(giant.variables),
                                  "params": giant.count_params()}
        del giant
    return out


def fit_losses(process_id=None, num_processes=None, coordinator=None):
    """The losses of 6 steps on a 4x2 mesh, over one process's 8 devices or two processes' 4 each."""
    import keras

    from keras_vit import distribution as dist

    if num_processes is not None:
        dist.initialize(coordinator, num_processes, process_id)
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    x, y = data(2 * 32)
    start = build(None).get_weights()
    distribution = dist.model_parallel("4x2")
    model = build(distribution, start)
    # Whole 32-image batches: each process's share of a batch can be any half of it and the step is the same.
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
    with distribution.scope():
        history = model.fit(dataset, epochs=3, shuffle=False, verbose=0)
    import jax

    return {"losses": history.history["loss"], "processes": jax.process_count(), "devices": jax.device_count(),
            "local_devices": jax.local_device_count(), "mesh": dist.describe(distribution)}


if __name__ == "__main__":
    case = sys.argv[1]
    if case == "mesh":
        result = mesh_checks()
    else:
        args = sys.argv[2:]
        result = fit_losses(int(args[0]), int(args[1]), args[2]) if args else fit_losses()
    print("RESULT " + json.dumps(result), flush=True)
