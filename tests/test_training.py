"""Recipes (weight-decay exclusions, schedules), batch-size rules and the time budget."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.training import callbacks, distribute, recipes

from helpers import ALL_BACKENDS  # noqa: E402

pytestmark = ALL_BACKENDS

NO_DECAY_SUFFIXES = ("/bias", "/gamma", "/beta", "/position_embedding", "/class_token")


def _decayed_paths(recipe_name):
    """Paths of the variables one optimizer step with zero gradients shrinks (pure weight decay)."""
    model = keras_vit.ViT("tiny", num_classes=3)
    for variable in model.trainable_variables:
        variable.assign(np.ones(variable.shape, variable.dtype))
    optimizer = recipes.make_optimizer(recipes.get_recipe(recipe_name), model, 1.0)
    variables = model.trainable_variables
    optimizer.apply([keras.ops.zeros(v.shape) for v in variables], variables)
    return {v.path for v in variables if float(np.min(keras.ops.convert_to_numpy(v))) < 1.0}, {v.path for v in variables}


def test_deit_weight_decay_excludes_biases_norms_position_embedding_class_token():
    decayed, every = _decayed_paths("deit")
    expected = {p for p in every if not p.endswith(NO_DECAY_SUFFIXES)}
    assert decayed == expected
    assert "embedding/kernel" in decayed and "head/kernel" in decayed
    assert "encoderblock_0/attention/query/kernel" in decayed
    for kept in ("embedding/position_embedding", "embedding/class_token", "encoder_norm/gamma",
                 "encoderblock_1/mlp_dense_0/bias", "encoderblock_0/attention/query/bias"):
        assert kept in every and kept not in decayed


def test_anchor_recipe_decays_every_variable():
    decayed, every = _decayed_paths("anchor")
    assert decayed == every


def test_recipes_and_schedule():
    assert recipes.get_recipe("deit").learning_rate_for(256) == pytest.approx(2.5e-4)
    with pytest.raises(ValueError, match="recipe='adam'"):
        recipes.get_recipe("adam")
    schedule = recipes.make_schedule(recipes.get_recipe("deit"), 512, steps_per_epoch=10, epochs=100)
    assert schedule.warmup_steps == 50 and float(schedule(50)) == pytest.approx(5e-4)
    assert float(schedule(1000)) == pytest.approx(5e-6)  # min ratio 0.01
    restored = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(schedule))
    assert float(restored(500)) == pytest.approx(float(schedule(500)))
    finetune = recipes.make_optimizer(recipes.get_recipe("finetune"), None, schedule)
    assert isinstance(finetune, keras.optimizers.SGD) and finetune.global_clipnorm == 1.0


def test_batch_size_must_divide_over_replicas():
    class TwoReplicas:
        num_replicas_in_sync = 2

    assert distribute.global_batch_size(64, TwoReplicas()) == 64
    with pytest.raises(ValueError, match="batch_size=33.*divisible by the 2 replicas"):
        distribute.global_batch_size(33, TwoReplicas())
    with pytest.raises(ValueError, match="strategy='horovod'"):
        distribute.get_strategy("horovod")
    with pytest.raises(ValueError, match="precision='float8'"):
        distribute.resolve_precision("float8")


# The machine-dependent defaults (precision, jit_compile, memory) are tested per branch in test_machine.py.


def test_default_strategy_is_one_replica_on_every_backend():
    strategy = distribute.get_strategy("default")
    with strategy.scope():
        model = keras_vit.ViT("tiny", image_size=8, num_classes=2, num_layers=1)
    assert strategy.num_replicas_in_sync == 1 and model.count_params() > 0


@pytest.mark.backends("jax", "torch")
@pytest.mark.parametrize("name", ["mirrored", "tpu"])
def test_tf_distribute_strategies_are_refused_on_other_backends(name):
    backend = keras.backend.backend()
    with pytest.raises(ValueError, match=f"strategy='{name}' needs tf.distribute on KERAS_BACKEND=tensorflow; the Keras backend '{backend}'"):
        distribute.get_strategy(name)


@pytest.mark.backends("torch")
@pytest.mark.parametrize("name", ["data_parallel", "model_parallel"])
def test_mesh_strategies_are_refused_on_pytorch(name):
    with pytest.raises(ValueError, match=f"strategy='{name}' needs keras.distribution on KERAS_BACKEND=jax; the Keras backend 'torch'"):
        distribute.get_strategy(name)


def test_time_budget_stops_and_fits_the_cosine():
    model = keras_vit.ViT("tiny", image_size=8, num_classes=2, num_layers=1)
    schedule = recipes.WarmupCosine(1e-3, total_steps=1000, warmup_steps=0)
    model.compile(optimizer=keras.optimizers.AdamW(schedule), loss="mse", jit_compile=False)
    budget = callbacks.TimeBudget(0.0, steps_per_epoch=4, schedule=schedule)
    x, y = np.zeros((16, 8, 8, 3), "float32"), np.zeros((16, 2), "float32")
    history = model.fit(x, y, batch_size=4, epochs=5, callbacks=[budget], verbose=0)
    assert len(history.epoch) == 1 and budget.steps_done == 1 and budget.epochs_done == 0
    assert float(schedule.total_steps.value) == 1.0  # no whole epoch fits any more
    assert schedule.get_config()["total_steps"] == 1.0


def _fit_on_a_fake_clock(monkeypatch, seconds, schedule, first_epoch_pace, pace, resumed_at=0, validation=None):
    """Fits a tiny model (4 steps per epoch) with a TimeBudget on a clock that advances
    `first_epoch_pace` seconds per step during the first epoch and `pace` after it; the
    optimizer starts at step `resumed_at`, as after a restore from a backup. `validation`
    seconds, if given, pass in the validation pass at each epoch end."""
    clock = {"now": 0.0}
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: clock["now"])
    budget = callbacks.TimeBudget(seconds, steps_per_epoch=4, schedule=schedule)

    class Tick(keras.callbacks.Callback):  # listed first, so the budget reads the advanced clock
        def on_train_batch_end(self, batch, logs=None):
            clock["now"] += first_epoch_pace if budget.steps_done < 4 else pace

        def on_test_end(self, logs=None):
            clock["now"] += validation or 0.0

    model = keras_vit.ViT("tiny", image_size=8, num_classes=2, num_layers=1)
    optimizer = keras.optimizers.AdamW(schedule) if schedule is not None else "sgd"
    model.compile(optimizer=optimizer, loss="mse", jit_compile=False)
    model.optimizer.iterations.assign(resumed_at)
    x, y = np.zeros((16, 8, 8, 3), "float32"), np.zeros((16, 2), "float32")
    history = model.fit(x, y, batch_size=4, epochs=5, callbacks=[Tick(), budget], verbose=0,
                        validation_data=(x[:4], y[:4]) if validation else None)
    budget.clock_at_end = clock["now"]
    return budget, history, model


def test_time_budget_plans_steps_to_use_the_whole_budget(monkeypatch):
    """1 s per step: 10 s of budget are 10 steps, the last epoch partial."""
    schedule = recipes.WarmupCosine(1e-3, total_steps=1000, warmup_steps=0)
    budget, history, model = _fit_on_a_fake_clock(monkeypatch, 10.0, schedule, 1.0, 1.0)
    assert budget.steps_done == 10 and budget.epochs_done == 2 and len(history.epoch) == 3
    assert budget.planned_steps == 10 and schedule.get_config()["total_steps"] == 10.0
    assert int(model.optimizer.iterations.numpy()) == 10


def test_time_budget_replans_when_the_pace_changes(monkeypatch):
    """2 s per step in the first epoch (compilation), then 1 s: the plan made after epoch 1
    (3 more steps) is revised during epoch 2, so all 14 s are used: 4 + 6 steps."""
    schedule = recipes.WarmupCosine(1e-3, total_steps=1000, warmup_steps=0)
    budget, _, _ = _fit_on_a_fake_clock(monkeypatch, 14.0, schedule, 2.0, 1.0)
    assert budget.steps_done == 10 and schedule.get_config()["total_steps"] == 10.0


def test_time_budget_without_a_schedule_runs_until_the_time_is_spent(monkeypatch):
    budget, _, _ = _fit_on_a_fake_clock(monkeypatch, 14.0, None, 2.0, 1.0)
    assert budget.steps_done == 10 and budget.epochs_done == 2


def test_time_budget_fits_the_cosine_of_a_resumed_run(monkeypatch):
    """The schedule counts optimizer steps: a run resumed at step 100 ends its cosine at 110."""
    schedule = recipes.WarmupCosine(1e-3, total_steps=1000, warmup_steps=0)
    budget, _, model = _fit_on_a_fake_clock(monkeypatch, 10.0, schedule, 1.0, 1.0, resumed_at=100)
    assert budget.steps_done == 10 and int(model.optimizer.iterations.numpy()) == 110
    assert schedule.get_config()["total_steps"] == 110.0


def test_time_budget_keeps_time_for_the_validation_passes(monkeypatch):
    """1 s per step and 1 s of validation at each epoch end (the last, partial one included):
    14 s are 4 + 1, 4 + 1, 3 + 1 s, so the run with its validation ends on time."""
    schedule = recipes.WarmupCosine(1e-3, total_steps=1000, warmup_steps=0)
    budget, history, _ = _fit_on_a_fake_clock(monkeypatch, 14.0, schedule, 1.0, 1.0, validation=1.0)
    assert budget.clock_at_end <= 14.0, budget.clock_at_end
    assert budget.steps_done == 11 and len(history.epoch) == 3 and "val_loss" in history.history
    assert schedule.get_config()["total_steps"] == 11.0


def test_time_budget_reserves_validation_only_for_the_epochs_fit_has_left(monkeypatch):
    """5 epochs of 4 s + 5 s of validation take 45 s of a 60 s budget: all run. Reserving a
    validation pass for every epoch the remaining time could hold (13) would stop after one."""
    schedule = recipes.WarmupCosine(1e-3, total_steps=1000, warmup_steps=0)
    budget, history, _ = _fit_on_a_fake_clock(monkeypatch, 60.0, schedule, 1.0, 1.0, validation=5.0)
    assert budget.steps_done == 20 and len(history.epoch) == 5 and budget.clock_at_end <= 60.0
