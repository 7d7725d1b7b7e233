"""keras_vit's AdamW: Keras' AdamW's arithmetic, weight decay at each layer's own rate, the exclusions kept."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.pretraining import run as pretraining_run
from keras_vit.pretraining.mae import build_mae
from keras_vit.training import optimizers, recipes

from helpers import ALL_BACKENDS


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


def _model():
    keras.utils.set_random_seed(0)
    return keras_vit.ViT("tiny", num_classes=3, image_size=8)


def _apply(optimizer, variables, gradients):
    optimizer.apply([keras.ops.convert_to_tensor(g) for g in gradients], variables)
    return [_numpy(v) for v in variables]


@ALL_BACKENDS
def test_adamw_without_layer_factors_updates_as_keras_adamw():
    """The fused TensorFlow update (and the generic one elsewhere) against keras.optimizers.AdamW, three steps."""
    model = _model()
    excluded = recipes.no_decay_variables(model)
    rng = np.random.default_rng(0)
    gradients = [[rng.normal(size=v.shape).astype("float32") for v in model.trainable_variables] for _ in range(3)]
    start = [_numpy(v) for v in model.trainable_variables]
    results = []
    for optimizer in (keras.optimizers.AdamW(1e-2, weight_decay=0.3, beta_2=0.95),
                      optimizers.LayerDecayAdamW(1e-2, weight_decay=0.3, beta_2=0.95)):
        variables = [keras.Variable(value) for value in start]
        optimizer.exclude_from_weight_decay(var_list=[variables[i] for i, v in enumerate(model.trainable_variables)
                                                      if any(v is e for e in excluded)])
        for step in gradients:
            after = _apply(optimizer, variables, step)
        results.append(after)
    for keras_value, ours, first in zip(*results, start):
        np.testing.assert_allclose(ours, keras_value, rtol=1e-5, atol=1e-7)
    assert any(not np.allclose(value, first) for value, first in zip(results[1], start))


@ALL_BACKENDS
def test_weight_decay_follows_each_layers_rate_and_skips_the_excluded():
    """With no gradient only the decay moves a variable: by rate x layer factor x decay, none where excluded."""
    model = _model()
    scales = optimizers.layer_learning_rate_scales(model, 0.5)
    optimizer = optimizers.LayerDecayAdamW(0.1, weight_decay=0.5, layer_scales=scales)
    optimizer.exclude_from_weight_decay(var_list=recipes.no_decay_variables(model))
    variables = {v.path: v for v in model.trainable_variables}
    before = {path: _numpy(v) for path, v in variables.items()}
    _apply(optimizer, list(variables.values()), [np.zeros(v.shape, "float32") for v in variables.values()])
    for path, factor in (("embedding/kernel", 0.125), ("encoderblock_1/attention/query/kernel", 0.5),
                         ("head/kernel", 1.0)):
        np.testing.assert_allclose(_numpy(variables[path]), before[path] * (1 - 0.1 * factor * 0.5), rtol=1e-6,
                                   err_msg=path)
    for path in ("embedding/bias", "encoderblock_0/norm1/gamma", "embedding/class_token"):
        np.testing.assert_array_equal(_numpy(variables[path]), before[path], err_msg=path)


def test_masked_autoencoders_biases_norms_and_mask_token_are_not_decayed():
    """Pre-training's optimizer: a second exclusion call used to replace the first, decaying biases and norms."""
    model = build_mae(image_size=16, patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
                      decoder="test", seed=0)
    model(np.zeros((1, 16, 16, 3), "float32"))
    optimizer = recipes.make_optimizer(pretraining_run.recipe(), model, 0.1)
    variables = list(model.trainable_variables)
    before = [_numpy(v) for v in variables]
    _apply(optimizer, variables, [np.zeros(v.shape, "float32") for v in variables])
    moved = {v.path.rsplit("/", 1)[-1] for v, first in zip(variables, before) if not np.array_equal(_numpy(v), first)}
    assert moved == {"kernel"}


def test_the_optimizer_saves_and_reloads_with_its_decay_and_factors(tmp_path):
    model = _model()
    model.compile(recipes.make_optimizer(recipes.get_recipe("lpft"), model, 1e-3), "categorical_crossentropy")
    recipes.build_optimizer_variables(model)
    model.save(tmp_path / "m.keras")
    restored = keras.saving.load_model(tmp_path / "m.keras").optimizer
    assert isinstance(restored, optimizers.LayerDecayAdamW)
    assert restored.decoupled_weight_decay == 0.05 and restored.weight_decay is None
    assert restored.layer_scales == model.optimizer.layer_scales


def test_exclusions_are_refused_once_built():
    optimizer = optimizers.LayerDecayAdamW(1e-3)
    optimizer.build([keras.Variable(np.zeros(2, "float32"))])
    with pytest.raises(ValueError, match="called on a built optimizer"):
        optimizer.exclude_from_weight_decay(var_names=["bias"])


def test_the_recipes_adamw_builds_a_short_update_graph_on_tensorflow():
    """The first step's trace and graph optimisation grow with the update's operations: Keras' AdamW
    with a schedule built 53 a variable here (its decay pass evaluates the schedule per variable)."""
    import tensorflow as tf

    if keras.backend.backend() != "tensorflow":
        pytest.skip("a TensorFlow graph")
    model = _model()
    recipe = recipes.get_recipe("lpft")
    optimizer = recipes.make_optimizer(recipe, model, recipes.make_schedule(recipe, 32, 7, 30))
    variables = model.trainable_variables
    optimizer.build(variables)
    gradients = [tf.zeros(v.shape) for v in variables]
    graph = tf.function(lambda: optimizer.apply(gradients, variables)).get_concrete_function().graph
    assert len(graph.get_operations()) / len(variables) < 35
