"""`keras-vit train --weights --budget-minutes` (`--adapt auto`, issue 50): the probe, LP-FT, the decision
between them on held-out training images, and a header that describes the model built."""

import dataclasses
import types

import numpy as np
import pytest

from keras_vit.training import TrainConfig, train

from test_machine import trial_on  # noqa: F401 (a fixture)
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
    fields = {"verbose": 0, **fields}
    return TrainConfig(dataset=data, weights=checkpoint, scaling="symmetric", budget_seconds=budget_seconds,
                       jit_compile=False, run_dir=None, output_dir=None, **fields)


def test_auto_keeps_the_probe_where_fine_tuning_scores_clearly_less_on_the_held_out_images(checkpoint, tmp_path,
                                                                                           monkeypatch):
    from keras_vit.training import trainer

    data = _folder(tmp_path / "data", per_class=20)
    real_fit = trainer._fit

    def wrecking_fit(plan, progress, model, *args):
        # A fine-tuning that went wrong, for certain: every class answered as the next one. (A huge
        # rate did not reliably wreck these brightness-coded classes.)
        fitted = real_fit(plan, progress, model, *args)
        head = model.get_layer("head")
        kernel, bias = head.get_weights()
        head.set_weights([np.roll(kernel, 1, axis=1), np.roll(bias, 1)])
        return fitted

    monkeypatch.setattr(trainer, "_fit", wrecking_fit)
    # Enough held-out images (18) for a sign test to tell.
    result = train(_config(tmp_path, data, checkpoint, budget_seconds=300, epochs=1, validation_split=0.3))
    decision = result["adapt_decision"]
    assert result["steps_done"] > 0, "the run must fine-tune for the decision to mean anything"
    assert decision["finetuned_validation_accuracy"] < decision["probe_validation_accuracy"], decision
    assert decision["kept"] == "probe" and decision["sign_test_p"] < 0.05, decision
    # The pairs are the two accuracies' difference, image by image.
    lead = (decision["only_probe_right"] - decision["only_finetuned_right"]) / 18
    assert np.isclose(lead, decision["probe_validation_accuracy"] - decision["finetuned_validation_accuracy"])
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


def test_the_precision_trial_of_an_auto_run_times_its_steps_without_xla(checkpoint, tmp_path, monkeypatch, trial_on):
    """On a CPU with native bfloat16 the trial timed float32 with XLA, which the fine-tuning does not run."""
    from keras_vit import machine, precision_trial
    from keras_vit.training import plan as plan_lib

    monkeypatch.setattr(machine, "detect", lambda *args, **kwargs: machine.Machine(
        "cpu", cpu_flags=frozenset({"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})))
    timed = []

    def measure(workload, policies, seconds, backend=None):
        timed.append(workload)
        return [{"policy": policy, "label": policy, "seconds": [0.1] * 3} for policy in policies]

    monkeypatch.setattr(precision_trial, "measure_training", measure)
    data = _folder(tmp_path / "data", per_class=4)
    config = TrainConfig(dataset=data, weights=checkpoint, scaling="symmetric", budget_seconds=180, run_dir=None,
                         output_dir=None, verbose=0)
    plan = plan_lib.resolve(config)
    assert plan.jit_compile is False and [(w["jit_compile"], w["recipe"]) for w in timed] == [(False, "lpft")]


class _Prober:
    """A probe whose held-out figures are given: `_keep_the_better` reads nothing else of it."""

    def __init__(self, pairs, tuned_accuracy):
        self.pairs, self.tuned_accuracy, self.weights, self.refitted = pairs, tuned_accuracy, "probed weights", False

    def compare_on_validation(self):
        return (*self.pairs, self.tuned_accuracy)

    def refit_with_validation(self):
        self.refitted = True
        return types.SimpleNamespace(l2=1.0)


class _Model:
    def set_weights(self, weights):
        self.weights = weights


@pytest.mark.parametrize("pairs, kept", [((1, 0), "finetuned"), ((3, 2), "finetuned"), ((0, 0), "finetuned"),
                                         ((0, 4), "finetuned"), ((5, 0), "probe"), ((12, 3), "probe")])
def test_auto_throws_fine_tuning_away_only_where_the_probe_is_clearly_better(pairs, kept):
    # The weak backbone of RESULTS 17 fine-tuned to 0.60 against its probe's 0.64 on 25 held-out
    # images, one image, and the run threw the fine-tuning away (timm's LP-FT gained 5.6 points).
    import contextlib

    from keras_vit.training import trainer

    probe_accuracy = 0.64
    tuned_accuracy = probe_accuracy - (pairs[0] - pairs[1]) / 25
    plan = types.SimpleNamespace(adapt="probe_then_finetune", jit_compile=False, config=types.SimpleNamespace(verbose=0),
                                 strategy=types.SimpleNamespace(scope=contextlib.nullcontext))
    model, prober = _Model(), _Prober(pairs, tuned_accuracy)
    decision = trainer._keep_the_better(plan, model, prober, types.SimpleNamespace(validation_accuracy=probe_accuracy),
                                        True)
    assert decision["kept"] == kept, decision
    assert (decision["only_probe_right"], decision["only_finetuned_right"]) == pairs
    assert prober.refitted == (kept == "probe") and getattr(model, "weights", None) == (
        "probed weights" if kept == "probe" else None)


def test_the_sign_test_is_the_exact_binomial_tail():
    from scipy.stats import binomtest

    from keras_vit.training.probe import sign_test_p_value

    for wins, losses in [(0, 0), (1, 0), (5, 0), (6, 1), (3, 9), (12, 3), (40, 25)]:
        expected = binomtest(wins, wins + losses, 0.5, alternative="greater").pvalue if wins + losses else 1.0
        assert np.isclose(sign_test_p_value(wins, losses), expected, rtol=1e-12), (wins, losses)


def _decide_as(monkeypatch, keep):
    """`--adapt auto`'s midway decision made to go `keep`'s way, each call recorded with the steps it saw."""
    from keras_vit.training import trainer

    calls = []

    def compare(plan, prober, probed):
        calls.append(prober.model.optimizer.iterations.numpy().item())
        figures = {"probe_validation_accuracy": probed.validation_accuracy, "finetuned_validation_accuracy": 0.5,
                   "only_probe_right": 0 if keep else 3, "only_finetuned_right": 0, "sign_test_p": 1.0 if keep else 0.01}
        return figures, keep

    monkeypatch.setattr(trainer, "_compare", compare)
    return calls


def test_auto_decides_halfway_then_fine_tunes_on_the_held_out_images_too(checkpoint, tmp_path, monkeypatch, capsys):
    from keras_vit.training import trainer

    # Held out to the end, the decision's 10% cost 0.70 points on average over eight runs (RESULTS).
    calls = _decide_as(monkeypatch, keep=True)
    data = _folder(tmp_path / "data", per_class=10)
    result = train(_config(tmp_path, data, checkpoint, budget_seconds=300, epochs=4, verbose=1))
    out = capsys.readouterr().out
    decision = result["adapt_decision"]
    # 30 training images: 3 held out (10%) for the decision, 27 fitted on until then; the test split only reports.
    assert result["num_train_examples"] == 27 and "held-out 10%" in result["data"]["validation"]
    # 27 images at batch 4 (the small-data rule): 6 steps an epoch, 24 in all, decided at the end of epoch 2.
    assert calls == [12] and decision["decided_at_step"] == 12 and decision["kept"] == "finetuned", decision
    assert result["steps_done"] == 24
    assert "then the fine-tuning learns from it too" in next(line for line in out.splitlines() if "Weights:" in line
                                                                                                or "Adapt" in line)
    assert "Decided:  after 12 steps" in out and "its held-out images join the fine-tuning" in out
    assert "then the validation images joined the fine-tuning" in trainer.format_summary(result)
    # Its validation score is the decision's: after it the validation images were trained on.
    assert result["validation_accuracy"] == 0.5


def test_auto_stops_fine_tuning_midway_where_the_probe_is_clearly_better(checkpoint, tmp_path, monkeypatch):
    calls = _decide_as(monkeypatch, keep=False)
    data = _folder(tmp_path / "data", per_class=10)
    result = train(_config(tmp_path, data, checkpoint, budget_seconds=300, epochs=4))
    decision = result["adapt_decision"]
    assert calls == [12] and result["steps_done"] == 12
    assert decision["kept"] == "probe" and decision["decided_at_step"] == 12 and "refit_l2" in decision
    assert result["test_accuracy"] == 1.0  # the probe again: the colours separate the classes


def test_the_given_back_pipeline_serves_the_held_out_images_only_once_decided(checkpoint, tmp_path):
    from keras_vit.training import plan as plan_lib, run_dir, trainer

    data = _folder(tmp_path / "data", per_class=10)
    plan = plan_lib.resolve(_config(tmp_path, data, checkpoint, augment="none"))
    assert plan.given_back.count() == 30 and plan.validation.count() == 3
    progress = run_dir.RunProgress.open(None, plan.fingerprint(), False)
    prober = types.SimpleNamespace(model=None)
    dataset, midway = trainer._give_back(plan, trainer._pipeline(plan, plan.train, training=True), prober, None,
                                         None, progress)
    assert midway.total_steps == plan.epochs * plan.steps_per_epoch

    def images_seen(batches):
        return {images[i].numpy().tobytes() for images, _ in dataset.take(batches) for i in range(len(images))}

    def pixels(source):
        pipeline = trainer._pipeline(plan, source)
        return {images[i].numpy().tobytes() for images, _ in pipeline for i in range(len(images))}

    held = pixels(plan.validation)
    assert len(held) == 3 and not images_seen(40) & held
    midway.switch.assign(True)
    assert held <= images_seen(40)
    # A run resumed after its decision kept the fine-tuning fits no probe (test_adapt_resume.py): every image
    # from its start.
    resumed = dataclasses.replace(progress, state={"epoch": 1, "adapt_decision": {"kept": "finetuned"}})
    dataset, midway = trainer._give_back(plan, trainer._pipeline(plan, plan.train, training=True), None, None, None,
                                         resumed)
    assert midway is None and held <= images_seen(40)


@pytest.mark.parametrize("fields", [dict(validation_split=0.2), dict(max_train_examples=20), dict(adapt="finetune")])
def test_nothing_is_given_back_where_the_validation_images_are_not_the_decisions_own(checkpoint, tmp_path, fields):
    from keras_vit.training import plan as plan_lib

    data = _folder(tmp_path / "data", per_class=10)
    plan = plan_lib.resolve(_config(tmp_path, data, checkpoint, **fields))
    assert plan.given_back is None and "decides once" not in plan.adapt_reason


def test_a_resumed_run_goes_on_fine_tuning_whatever_its_probe_takes_this_time(checkpoint, tmp_path, monkeypatch):
    # Whether to fine-tune after the probe rests on the probe's measured seconds; a run resumed from a
    # fine-tuning backup fits its probe again (to decide), and a slower probe this time must not drop
    # the fine-tuning the killed run had started.
    from keras_vit.training import plan as plan_lib, run_dir, trainer

    data = _folder(tmp_path / "data", per_class=10)
    plan = plan_lib.resolve(_config(tmp_path, data, checkpoint, augment="none"))
    model, _ = trainer._compiled_model(plan)
    monkeypatch.setattr(plan_lib, "finetune_after_probe", lambda plan, probed: (False, "the budget is spent"))
    fresh = run_dir.RunProgress.open(None, plan.fingerprint(), False)
    assert trainer._probe(plan, model, fresh)[2] is False
    resumed = dataclasses.replace(fresh, state={"epoch": 1})
    prober, probed, finetune = trainer._probe(plan, model, resumed)
    assert finetune is True and probed is not None and prober.weights is not None
