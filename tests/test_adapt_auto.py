"""`keras-vit train --weights --budget-minutes` (`--adapt auto`, issue 50): the probe, LP-FT, the decision
between them on held-out training images, and a header that describes the model built."""

import dataclasses

import numpy as np

from keras_vit.training import TrainConfig, recipes, train

from test_train_weights import _folder, _train, checkpoint  # noqa: F401 (a fixture)


def test_a_checkpoints_header_describes_its_model_and_says_the_scratch_rules_do_not_apply(checkpoint, tmp_path,
                                                                                          capsys):
    data = _folder(tmp_path / "data")
    assert _train(tmp_path, data, "--weights", checkpoint, "--scaling", "symmetric", "--budget-minutes", "0.2") == 0
    out = capsys.readouterr().out
    model_line = next(line for line in out.splitlines() if line.startswith("Model:"))
    # The tiny checkpoint pools its class token: the header said "pooling gap" and "attention init
    # mimetic", the budget's choices for a model from scratch that is not built.
    assert "pooling token (the checkpoint's)" in model_line and "mimetic" not in model_line, model_line
    budget_line = next(line for line in out.splitlines() if line.startswith("Budget:"))
    assert "mimetic" not in budget_line.split("do not apply")[0].split("rules for")[0]
    assert "the rules for a model from scratch" in budget_line and "do not apply" in budget_line
    assert "pooling gap" not in out
    training_line = next(line for line in out.splitlines() if line.startswith("Training:"))
    assert "recipe lpft" in training_line and "augment pad_crop" in training_line, training_line
    # The summary says which of probe and fine-tuned model the run kept, and on what figures.
    assert "Kept the probe: validation accuracy" in out or "Kept the fine-tuned model: validation accuracy" in out


def _config(tmp_path, data, checkpoint, budget_seconds=10, **fields):
    return TrainConfig(dataset=data, weights=checkpoint, scaling="symmetric", budget_seconds=budget_seconds,
                       jit_compile=False, run_dir=None, output_dir=None, verbose=0, **fields)


def test_auto_decides_on_a_held_out_share_of_the_training_images_never_the_test_split(checkpoint, tmp_path):
    data = _folder(tmp_path / "data", per_class=10)
    result = train(_config(tmp_path, data, checkpoint))
    # 30 training images: 3 held out (10%) for the decision, 27 fitted on; the test split only reports.
    assert result["num_train_examples"] == 27
    assert "held-out 10%" in result["data"]["validation"]
    decision = result["adapt_decision"]
    assert decision["kept"] in ("probe", "finetuned") and decision["probe_validation_accuracy"] is not None


def test_auto_keeps_the_probe_where_fine_tuning_scores_less_on_the_held_out_images(checkpoint, tmp_path):
    data = _folder(tmp_path / "data", per_class=10)
    # A rate that wrecks the backbone: fine-tuning then scores below the probe it started from.
    wrecking = dataclasses.replace(recipes.get_recipe("lpft"), name="wrecking", learning_rate=30.0, clip_norm=None,
                                   layer_decay=None, warmup_epochs=0)
    result = train(_config(tmp_path, data, checkpoint, budget_seconds=300, epochs=2, recipe=wrecking))
    decision = result["adapt_decision"]
    assert result["steps_done"] > 0, "the run must fine-tune for the decision to mean anything"
    assert decision["finetuned_validation_accuracy"] < decision["probe_validation_accuracy"], decision
    assert decision["kept"] == "probe"
    # The model that is returned (and saved) is the probe again: the colours separate the classes.
    assert result["test_accuracy"] == 1.0


def test_the_probe_alone_is_fitted_again_on_training_and_validation_images(checkpoint, tmp_path):
    data = _folder(tmp_path / "data", per_class=10)
    result = train(_config(tmp_path, data, checkpoint, adapt="probe"))
    # --adapt probe decides nothing: no share is held out beyond what the user asked for.
    assert result["adapt_decision"] is None and result["num_train_examples"] == 30
    assert np.isfinite(result["probe"]["l2"]) and result["probe"]["cv_accuracy"] == 1.0


def test_auto_fine_tunes_without_xla_on_tensorflow_where_compiling_costs_more_than_it_saves(checkpoint, tmp_path):
    import keras

    from keras_vit.training import plan as plan_lib

    data = _folder(tmp_path / "data", per_class=4)
    config = TrainConfig(dataset=data, weights=checkpoint, scaling="symmetric", budget_seconds=180, run_dir=None,
                         output_dir=None, verbose=0)
    plan = plan_lib.resolve(config)
    if keras.backend.backend() == "tensorflow":
        assert plan.jit_compile is False and "XLA off" in plan.adapt_reason
    # Given, it is kept; without a budget (plain fine-tuning) the machine's rule stands.
    assert plan_lib.resolve(dataclasses.replace(config, jit_compile=True)).jit_compile is True
    assert "XLA off" not in plan_lib.resolve(dataclasses.replace(config, budget_seconds=None)).adapt_reason
