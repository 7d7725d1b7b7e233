"""Generic checks every layer and every registered variant goes through.

A new layer joins the tests by adding a case to `tests/test_layers.py`; a new variant by being a
row of `keras_vit.configs.VARIANTS`.
"""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest

from keras_vit import backends
from keras_vit.configs import VARIANTS

# `pytestmark = ALL_BACKENDS` in a module (or on a test) runs it on TensorFlow, JAX and PyTorch.
ALL_BACKENDS = pytest.mark.backends("tensorflow", "jax", "torch")

POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")

# The tiny row of each model family (DeiT, DINOv2, ...): a family's new row joins every family test.
# NaFlex rows take patch sequences, not images, and have tests of their own (tests/test_naflex.py).
FAMILY_ROWS = tuple(name for name, row in VARIANTS.items()
                    if name.startswith("tiny_") and row.family != "vit" and not row.naflex)


def _one_row_per_structure():
    """The narrowest row of each structure (family, family fields, stem or none).

    A wider row of the same structure builds the same layers, under the same weight names, with
    larger weights. Tests of what a model's layers and names do (the `.keras` round trip and
    export, the mesh layout rules) take these rows: every row again would re-test the same
    layers at seconds a row (a .keras write of up to 130 MB for a block of width 1664; the round
    trip of the 39 other rows took 142 of the TensorFlow pass's worker-seconds, the layout rules'
    58 of JAX's). Every row is built at its full widths by the parameter-count test. Rotary
    settings and the attention pool's sizes build the same layers whatever their values.
    """
    from keras_vit.configs import FAMILY_FIELDS

    sized = ("rope", "pooling_heads", "pooling_mlp_dim")
    narrowest = {}
    for name, row in VARIANTS.items():
        fields = tuple(getattr(row, field) is not None if field in sized else repr(getattr(row, field))
                       for field in FAMILY_FIELDS)
        key = (row.family, row.stem is not None, fields)
        if key not in narrowest or row.hidden_size < VARIANTS[narrowest[key]].hidden_size:
            narrowest[key] = name
    return frozenset(narrowest.values())


STRUCTURE_ROWS = _one_row_per_structure()

# Train steps in tests are XLA-compiled where the backend compiles with XLA; PyTorch's stay eager
# (torch.compile spends minutes per model).
JIT_COMPILE = backends.current().COMPILER == "XLA"


def check_layer(layer_cls, init_kwargs, input_shape, call_kwargs=None):
    """Runs a layer through config round trip, symbolic and eager calls, mixed precision and a fit step."""
    call_kwargs = call_kwargs or {}
    layer = layer_cls(**init_kwargs)
    config = layer.get_config()
    for key, value in init_kwargs.items():
        assert config[key] == value, f"get_config()[{key!r}] = {config[key]!r}, expected {value!r}"
    clone = layer_cls.from_config(config)
    assert clone.get_config() == config

    # Symbolic call agrees with compute_output_shape.
    symbolic = layer_cls(**init_kwargs)(keras.Input(shape=input_shape[1:], batch_size=input_shape[0]), **call_kwargs)
    expected_shape = layer_cls(**init_kwargs).compute_output_shape(input_shape)
    assert tuple(symbolic.shape) == tuple(expected_shape)

    # Eager call gives that shape too, and the serialized copy computes the same thing.
    x = np.random.default_rng(0).normal(size=input_shape).astype("float32")
    y = layer(x, **call_kwargs)
    assert tuple(y.shape) == tuple(expected_shape)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    if not restored.built:
        restored.build(input_shape)
    restored.set_weights(layer.get_weights())
    np.testing.assert_allclose(to_numpy(restored(x, **call_kwargs)), to_numpy(y), atol=1e-6)

    for policy in POLICIES[1:]:
        mixed = layer_cls(**init_kwargs, dtype=policy)
        out = mixed(x, **call_kwargs)
        assert keras.backend.standardize_dtype(out.dtype) == mixed.compute_dtype, policy
        assert all(w.dtype == "float32" for w in mixed.weights), policy

    check_fit_step(layer_cls(**init_kwargs), input_shape, call_kwargs)


def check_fit_step(layer, input_shape, call_kwargs=None):
    """Trains a layer for one step (XLA-compiled where the backend has it) inside a small model; trainable weights must move."""
    inputs = keras.Input(shape=input_shape[1:])
    x = layer(inputs, **(call_kwargs or {}))
    x = keras.layers.Flatten()(x)
    outputs = keras.layers.Dense(2)(x)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", jit_compile=JIT_COMPILE)
    rng = np.random.default_rng(1)
    data = rng.normal(size=(4,) + tuple(input_shape[1:])).astype("float32")
    before = [w.numpy().copy() for w in layer.trainable_weights]
    history = model.fit(data, rng.normal(size=(4, 2)).astype("float32"), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    if before:
        moved = [not np.array_equal(b, w.numpy()) for b, w in zip(before, layer.trainable_weights)]
        assert any(moved), "no trainable weight of the layer changed after a fit step"


# Above this width one block is 25-68M parameters (ViT-g/G/e, DINOv2-g, PE-Core G).
GIANT_WIDTH = 1024


def reduced_variant_kwargs(variant, narrow=False):
    """Builder kwargs that keep a variant's widths but make it cheap: one block, 2x2 tokens.

    A hybrid also gets one unit per ResNet stage (same widths, strides and checkpoint names):
    its full-depth stem is built, never exported, by the parameter-count test. `narrow`: a giant
    (wider than GIANT_WIDTH) also gets 4 channels a head and an MLP of 8 a head: the same layers
    and weight names, for tests of those (a .keras round trip of PE-Core G/14's block took 25 s on
    JAX), never for tests of widths.
    """
    from keras_vit.configs import get_variant
    from keras_vit.models.resnet import BiTResNet

    row = get_variant(variant)
    kwargs = {"num_layers": 1, "image_size": 2 * row.pixel_patch_size, "num_classes": 5}
    if narrow and row.hidden_size > GIANT_WIDTH:  # the width must split into the variant's heads (g/14 has 24)
        kwargs.update(hidden_size=4 * row.num_heads, mlp_dim=8 * row.num_heads)
    if row.stem is not None:
        kwargs.update(backbone=BiTResNet((1,) * len(row.stem), row.stem_width), patch_size=row.patch_size)
    return kwargs


def sample_inputs(model, batch=2, seed=1):
    """Random inputs of a keras_vit model: images (batch, H, W, C), or a NaFlex model's padded patch sequences.

    A NaFlex batch has images of different patch grids around the stored one (one wider, one
    smaller), so padding is masked in every model the generic tests build.
    """
    rng = np.random.default_rng(seed)
    config = getattr(model, "vit_config", None) or {}
    if not config.get("naflex"):
        return rng.normal(size=(batch,) + tuple(model.input_shape[1:])).astype("float32")
    rows, cols = config["grid_size"]
    grids = [((rows, cols + 1), (max(rows - 1, 1), cols))[i % 2] for i in range(batch)]
    length = max(r * c for r, c in grids)
    patches = rng.normal(size=(batch, length, config["patch_size"] ** 2 * config["channels"])).astype("float32")
    for i, (r, c) in enumerate(grids):
        patches[i, r * c:] = 0.0
    return {"patches": patches, "spatial_shapes": np.array(grids, "int32")}


def to_numpy(x):
    """A backend tensor (a torch one may require grad) or array as a NumPy array of the same dtype."""
    return x if isinstance(x, np.ndarray) else keras.ops.convert_to_numpy(x)


def check_save_load_export(model, tmp_path, inputs):
    """`.keras` round trip with safe_mode and no custom_objects, then model.export; outputs must agree.

    On JAX and PyTorch the `.keras` round trip is all: Keras' SavedModel export from JAX (jax2tf)
    costs tens of seconds per model, and PyTorch has none; tests/test_export*.py cover exports.
    """
    expected = to_numpy(model(inputs))
    path = os.path.join(tmp_path, "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_array_equal(to_numpy(loaded(inputs)), expected)
    if keras.backend.backend() != "tensorflow":
        return
    export_dir = os.path.join(tmp_path, "export")
    model.export(export_dir, verbose=False)
    import tensorflow as tf

    reloaded = tf.saved_model.load(export_dir)  # keep a reference: its variables die with it
    served = reloaded.serve(tf.nest.map_structure(tf.constant, inputs))
    np.testing.assert_allclose(np.asarray(served), expected, atol=1e-5)
