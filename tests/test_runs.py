"""Training runs that never lose work or mislead: run-dir ownership, fingerprints, checks before
the first step, header and summary, evaluate agreeing with train, a fast --help."""

import dataclasses
import json
import os
import subprocess
import sys

import keras
import pytest

from keras_vit import cli
from keras_vit.training import trainer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _StopAtEpoch(keras.callbacks.Callback):
    """Interrupts fit at the start of `epoch`, as a crash would (the backup of the previous epoch is committed)."""

    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.epoch:
            raise KeyboardInterrupt


def _config(tmp_path, **changes):
    base = dict(variant="tiny", image_size=28, epochs=2, batch_size=32, max_train_examples=64, max_test_examples=32,
                jit_compile=False, verbose=0, run_dir=str(tmp_path / "run"), output_dir=None,
                model_overrides={"num_layers": 1})
    base.update(changes)
    return trainer.TrainConfig(**base)


def _crash_after_first_epoch(tmp_path, **changes):
    from keras_vit.training import callbacks as callbacks_lib

    # A backup at every epoch: the crash comes seconds into the run, before BACKUP_SECONDS.
    with pytest.MonkeyPatch.context() as patch, pytest.raises(KeyboardInterrupt):
        patch.setattr(callbacks_lib, "BACKUP_SECONDS", 0.0)
        trainer.train(_config(tmp_path, callbacks=[_StopAtEpoch(1)], **changes))
    assert json.loads((tmp_path / "run" / "backup" / "backup.json").read_text())["epoch"] == 1


def test_no_resume_keeps_unrelated_files_and_moves_the_backup_aside(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "precious.txt").write_text("keep")
    _crash_after_first_epoch(tmp_path)
    trainer.train(_config(tmp_path, resume=False, epochs=1))
    names = os.listdir(tmp_path / "run")
    assert (tmp_path / "run" / "precious.txt").read_text() == "keep"
    old_backup = [n for n in names if n.startswith("backup.old-")]
    assert len(old_backup) == 1 and "backup" not in names  # the finished run removed only its own backup
    assert json.loads((tmp_path / "run" / old_backup[0] / "backup.json").read_text())["epoch"] == 1
    assert any(n.startswith("history.old-") for n in names)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert "precious.txt" not in manifest["written"] and "history.csv" in manifest["written"]


def test_resuming_with_another_configuration_is_refused(tmp_path):
    _crash_after_first_epoch(tmp_path)
    with pytest.raises(ValueError, match=r"num_layers: 1 in the backup, 2 now.*--no-resume"):
        trainer.train(_config(tmp_path, model_overrides={"num_layers": 2}))
    assert (tmp_path / "run" / "backup" / "backup.json").is_file()  # left as it was


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--output-dir", "{file}"], "--output-dir="),
        (["--run-dir", "{file}"], "--run-dir="),
        (["--output-dir", "/proc/keras_vit_out"], "cannot write in '/proc'"),
        (["--output-dir", "{file}/sub"], "is a file, so the folder cannot be created"),
        (["--budget-minutes", "-1"], "--budget-minutes=-1.0"),
        (["--budget-minutes", "0"], "--budget-minutes=0.0"),
        (["--batch-size", "0"], "--batch-size=0"),
        (["--max-train-examples", "-5"], "--max-train-examples=-5"),
    ],
)
def test_bad_outputs_and_numbers_fail_before_training(flags, message, tmp_path, capsys):
    (tmp_path / "a_file").write_text("x")
    flags = [f.replace("{file}", str(tmp_path / "a_file")) for f in flags]
    argv = ["train", "--run-dir", str(tmp_path / "run"), "--output-dir", str(tmp_path / "out")] + flags
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_memory_estimate_refuses_an_oversized_step_with_numbers(tmp_path, capsys):
    # The crash: 224 px in patches of 4 is 3,137 tokens; at batch 256 the attention maps
    # alone need hundreds of GiB.
    argv = ["train", "--image-size", "224", "--patch-size", "4", "--batch-size", "256", "--max-train-examples", "256",
            "--run-dir", str(tmp_path / "run"), "--output-dir", str(tmp_path / "out")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "3,137 x 3,137 tokens" in err and "GiB" in err
    assert "Flags that would fit: --batch-size" in err and "--patch-size" in err
    assert not (tmp_path / "run" / "history.csv").exists()


class _ConfidentHead(keras.callbacks.Callback):
    """Gives the head large random weights after training: confident predictions, on which a
    label-smoothed loss and the plain cross-entropy differ clearly (on near-uniform ones they agree)."""

    def on_train_end(self, logs=None):
        kernel = self.model.get_layer("head").kernel
        kernel.assign(keras.random.normal(kernel.shape, stddev=3.0, seed=1))


def test_header_summary_and_evaluate_agree(tmp_path, capsys):
    # deit smooths its labels; the reported test loss must still be what `evaluate` reports.
    # The precision is named: `auto` depends on the machine (tests/test_machine.py forces each branch).
    config = _config(tmp_path, run_dir=None, epochs=1, recipe="deit", verbose=2, output_dir=str(tmp_path / "out"),
                     max_test_examples=64, callbacks=[_ConfidentHead()], precision="float32")
    result = trainer.train(config)
    out = capsys.readouterr().out
    assert out.startswith("Model:")  # the header comes before training
    header = out
    for line in ("Model:    tiny", "64 (train), test 64 (test); 10 classes", "precision float32 (given), XLA off",
                 str(tmp_path / "out" / "vit") + ".keras", "Resume:   new run"):
        assert line in header, line
    scores = trainer.evaluate(str(tmp_path / "out" / "vit.keras"), max_examples=64, batch_size=16)
    assert scores["loss"] == pytest.approx(result["test_loss"], abs=1e-4)
    assert scores["accuracy"] == pytest.approx(result["test_accuracy"], abs=1e-6)
    assert json.loads((tmp_path / "out" / "vit.json").read_text())["test_loss"] == result["test_loss"]
    # The summary prints the run's own loss; evaluate's agrees to 1e-4 above, which 4 decimals may round apart.
    assert f"(loss {result['test_loss']:.4f}" in trainer.format_summary(result)


def test_budget_summary_counts_the_partial_epoch(tmp_path):
    result = trainer.train(_config(tmp_path, run_dir=None, epochs=3, budget_seconds=1e-9))
    # The budget was spent at the first step: one (partial) epoch shows in the log, so one is reported.
    assert (result["epochs_done"], result["steps_done"], result["last_epoch_partial"]) == (1, 1, True)
    assert "for 1 epochs (1 steps, the last one partial)" in trainer.format_summary(result)


def test_help_imports_no_tensorflow_and_says_defaults_once():
    code = (
        "import sys, keras_vit.cli\n"
        "for argv in (['--help'], ['train', '--help'], ['evaluate', '--help'], ['export', '--help'],"
        " ['predict', '--help'], ['inspect', '--help']):\n"
        "    try:\n        keras_vit.cli.main(argv)\n    except SystemExit:\n        pass\n"
        "print('TF_IMPORTED' if 'tensorflow' in sys.modules or 'keras' in sys.modules else 'NO_TF')\n"
    )
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0 and result.stdout.strip().endswith("NO_TF"), result.stderr[-2000:]
    assert result.stderr == ""  # no TensorFlow log lines
    text = result.stdout
    assert "(default: True)" not in text and "(default: None)" not in text and ") (default:" not in text


def test_cli_choices_and_defaults_match_the_library():
    from keras_vit import choices
    from keras_vit.data.augment import PRESETS
    from keras_vit.training import distribute, recipes

    assert choices.RECIPES == tuple(recipes.RECIPES) and choices.AUGMENT_PRESETS == tuple(PRESETS)
    assert choices.PRECISIONS == distribute.PRECISIONS and choices.STRATEGIES == distribute.STRATEGIES
    args = cli.build_parser().parse_args(["train"])
    defaults = trainer.TrainConfig()
    for field in ("dataset", "train_split", "test_split", "recipe", "epochs", "precision", "strategy", "run_dir",
                  "output_dir", "name", "resume", "seed", "pooling", "attention_init", "stem", "channels", "scaling", "on_corrupt"):
        assert getattr(args, field) == getattr(defaults, field), field


def test_every_option_has_one_declaration_that_makes_the_config_the_flags_and_the_check():
    from keras_vit import train_options

    assert [f.name for f in dataclasses.fields(trainer.TrainConfig)] == list(train_options.OPTIONS)
    args = cli.build_parser().parse_args(["train", "--budget-minutes", "2", "--jit-compile", "off", "--quiet",
                                          "--variant", "ViT-Ti/16", "--num-layers", "2", "--test-split", ""])
    config = train_options.config_from_flags(args)
    assert (config.budget_seconds, config.jit_compile, config.verbose, config.variant, config.test_split) == (
        120, False, 2, "Ti16", None)
    assert config.model_overrides["num_layers"] == 2 and config.export  # the command exports unless --no-export
    with pytest.raises(ValueError, match=r"Invalid --budget-minutes=-0\.5\b"):  # the flag's own unit
        train_options.check_config(dataclasses.replace(config, budget_seconds=-30), name=train_options.flag_name)
    with pytest.raises(ValueError, match="Invalid budget_seconds=-30"):
        train_options.check_config(dataclasses.replace(config, budget_seconds=-30))
    with pytest.raises(ValueError, match=r"model_overrides keys \['depth'\]"):
        train_options.check_config(trainer.TrainConfig(model_overrides={"depth": 2}))


def test_a_recipe_and_an_augmentation_of_ones_own_reach_the_run(tmp_path):
    """TrainConfig takes a Recipe and an AugmentConfig object (what the benchmark probes pass in)."""
    import dataclasses

    from keras_vit.data import augment
    from keras_vit.training import recipes

    recipe = dataclasses.replace(recipes.get_recipe("compact"), name="mine", learning_rate=4e-3)
    erase = dataclasses.replace(augment.get_preset("flip"), erasing_probability=0.5)
    result = trainer.train(_config(tmp_path, epochs=1, recipe=recipe, augment=erase, run_dir=None))
    settings = result["settings"]
    assert (settings["recipe"], settings["augment"]) == ("mine", "custom(flip=True, erasing_probability=0.5)")
    assert settings["learning_rate"] == pytest.approx(recipe.learning_rate_for(32))


def test_model_arguments_a_stem_of_ones_own_and_padding_reach_the_run_through_the_config(tmp_path):
    """TrainConfig takes more ViT arguments, the conv stem's and the resize (what the benchmark probes
    once set by rebinding library globals); each enters the backup's fingerprint only when set."""
    import numpy as np

    from keras_vit.training import plan as plan_lib

    default = plan_lib.resolve(_config(tmp_path, run_dir=None))
    assert not {"vit_args", "stem_args", "resize"} & set(default.fingerprint())  # older backups still resume

    sincos = plan_lib.resolve(_config(tmp_path, run_dir=None, vit_args={"position_embedding": "sincos2d"}))
    assert sincos.fingerprint()["vit_args"] == {"position_embedding": "sincos2d"}
    learned, fixed = plan_lib.build_model(default), plan_lib.build_model(sincos)
    tokens = (28 // learned.vit_config["patch_size"]) ** 2 + 1  # no learned embedding of the patches and class token
    assert learned.count_params() - fixed.count_params() == tokens * learned.vit_config["hidden_size"]

    stem_args = {"filters": (16, 32), "strides": (2, 2)}
    stem = plan_lib.resolve(_config(tmp_path, run_dir=None, variant=None, stem="conv", stem_args=stem_args))
    assert stem.fingerprint()["stem_args"] == {"filters": [16, 32], "strides": [2, 2]}  # as the backup's JSON has it
    model = plan_lib.build_model(stem)
    assert model.get_layer("conv_stem").output_shape[-1] == 32  # the stem's own widths, stride 4 on 28 px
    assert stem.patch_reason.startswith("cells of the conv stem's 7x7 map")  # the patch follows the stem's stride

    # zero padding 28 -> 32 px instead of the resize, in every split's pipeline
    padded = trainer.train(_config(tmp_path, image_size=32, resize="pad", epochs=1, run_dir=None))
    assert padded["settings"]["resize"] == "pad"
    pipeline = trainer._pipeline(plan_lib.resolve(_config(tmp_path, image_size=32, resize="pad", run_dir=None)),
                                 default.test)
    images = next(iter(pipeline))[0].numpy()
    assert images.shape[1:] == (32, 32, 1) and np.abs(images[:, :2]).max() == 0 and np.abs(images[:, 2:30]).max() > 0


@pytest.mark.parametrize("changes, message", [
    ({"vit_args": {"num_layers": 2}}, r"vit_args keys \['num_layers'\]: the spec sets them"),
    ({"vit_args": {"depth": 2}}, r"vit_args keys \['depth'\]. Expected arguments of ViT"),
    ({"vit_args": "sincos2d"}, "Invalid vit_args='sincos2d'. Expected a dict"),
    ({"stem_args": {"kernel": 5}, "stem": "conv", "variant": None}, r"stem_args keys \['kernel'\]"),
    ({"stem_args": {"filters": (16,), "strides": (2,)}, "stem": "none", "variant": None},
     "stem_args=.* without the conv stem: pass stem='conv'"),
    ({"resize": "crop"}, "Invalid resize='crop'. Expected one of"),
    ({"weights": "ViT-Ti/16", "resize": "pad", "variant": None}, "Contradicting resize='pad' and weights="),
    ({"weights": "ViT-Ti/16", "vit_args": {"position_embedding": "sincos2d"}, "variant": None},
     "Contradicting vit_args=.* and weights="),
])
def test_bad_model_arguments_and_resize_are_refused_by_name(changes, message, tmp_path):
    from keras_vit.training import plan as plan_lib

    with pytest.raises(ValueError, match=message):
        plan_lib.resolve(_config(tmp_path, run_dir=None, **changes))


def test_a_recipe_with_a_moving_average_ends_the_run_with_the_averaged_weights(tmp_path):
    """Recipe.ema_momentum: `fit` swaps the average in, so the saved and scored model is the average."""
    import numpy as np

    from keras_vit.training import recipes

    class Start(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.weights = [w.copy() for w in self.model.get_weights()]

    moved = {}
    for momentum in (None, 0.999):
        start = Start()
        recipe = dataclasses.replace(recipes.get_recipe("compact"), name="mine", ema_momentum=momentum)
        result = trainer.train(_config(tmp_path, recipe=recipe, run_dir=None, callbacks=[start]))
        moved[momentum] = sum(float(np.abs(a - b).sum()) for a, b in zip(result["model"].get_weights(), start.weights))
    # after 4 steps an average of momentum 0.999 has hardly left the initial weights (measured: 4% as far)
    assert moved[0.999] < 0.1 * moved[None]
    with pytest.raises(ValueError, match="ema_momentum=1.5"):
        dataclasses.replace(recipes.get_recipe("compact"), ema_momentum=1.5)
    # a recipe of one's own enters the fingerprint whole: a backup without the average is not resumed
    from keras_vit.training import plan as plan_lib

    fingerprints = [plan_lib.resolve(_config(tmp_path, run_dir=None, recipe=dataclasses.replace(
        recipes.get_recipe("compact"), name="mine", ema_momentum=momentum))).fingerprint() for momentum in (None, 0.99)]
    assert fingerprints[0]["recipe"]["ema_momentum"] is None and fingerprints[1]["recipe"]["ema_momentum"] == 0.99


def test_the_header_shows_each_option_as_its_declaration_says(tmp_path):
    """Each option's part of the header is declared with it; the report's layout only orders the parts."""
    import types

    from keras_vit import train_options
    from keras_vit.training import plan as plan_lib, report

    placed = {name for _, names in report.LINES for name in names}
    for option in train_options.OPTIONS.values():
        if isinstance(option.header, str):  # shown within another option's part
            assert callable(train_options.OPTIONS[option.header].header), option.name
        elif callable(option.header):  # placed by the layout, or at the end of its flag group's line
            assert option.name in placed or option.flag.group in report.GROUP_LINES, option.name
    assert placed <= set(train_options.OPTIONS) | set(report.FACTS)

    run = plan_lib.resolve(_config(tmp_path, image_size=32, resize="pad", vit_args={"position_embedding": "sincos2d"},
                                   budget_seconds=600, run_dir=None))
    estimate = types.SimpleNamespace(total=2 ** 30)
    progress = types.SimpleNamespace(directory=None, state=None, finished=False)
    text = report.header(run, plan_lib.build_model(run), estimate, progress)
    lines = text.splitlines()
    assert [line.split(":")[0] for line in lines] == ["Model", "Data", "Training", "Budget", "Memory", "Outputs", "Resume"]
    assert "attention init mimetic, ViT arguments {'position_embedding': 'sincos2d'}" in lines[0]  # the budget's init
    assert "images 32x32x1 (given; grey, as read), resize pad, scaling unit" in lines[1]
    assert lines[2].endswith(", budget 10 min") and "2 epochs x 2 steps at batch 32 (given)" in lines[2]
    assert lines[5] == "Outputs:  run dir none; final model not saved"
    # an option the layout does not place goes at the end of its flag group's line
    unplaced = dataclasses.replace(train_options.OPTIONS["seed"], header=lambda plan: f", seed {plan.config.seed}")
    options = {**train_options.OPTIONS, "seed": unplaced}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(train_options, "OPTIONS", options)
        patch.setattr(train_options, "_OPTIONS", tuple(options.values()))
        assert report.header(run, plan_lib.build_model(run), estimate, progress).splitlines()[2].endswith(
            ", budget 10 min, seed 0")


def test_the_training_step_is_traced_once(tmp_path, monkeypatch):
    # Keras on TensorFlow creates a lazily built optimizer's variables inside the first trace of
    # the step, and a tf.function that creates variables is traced twice: 25 s of ViT-Ti/4's first
    # step on a 2-core CPU, taken from a 3-minute budget.
    traces = []
    train_step = keras.Model.train_step

    def counting(self, data):
        traces.append(1)
        return train_step(self, data)

    monkeypatch.setattr(keras.Model, "train_step", counting)
    result = trainer.train(_config(tmp_path, run_dir=None, epochs=2))
    assert result["steps_done"] == 4 and result["model"].optimizer.built
    assert len(traces) == 1


def test_a_fit_keeps_one_training_iterator_and_reads_a_small_validation_set_once(tmp_path, monkeypatch):
    # A new iterator each epoch cost 0.7 s of its start and end, and each validation pass 0.2 s
    # of a new one over its folder, where a small-data fine-tuning's epoch of 7 steps takes 1.1 s
    # (benchmarks/RESULTS.md section 17, "Epochs without their edges").
    import tensorflow as tf

    iterators = []
    dataset_iter = tf.data.Dataset.__iter__
    monkeypatch.setattr(tf.data.Dataset, "__iter__", lambda self: iterators.append(self) or dataset_iter(self))
    validation_batches = tf.Variable(0)
    make_pipeline = trainer.make_pipeline

    def counting(source, **kwargs):  # counts the batches that come out of the validation pipeline
        dataset = make_pipeline(source, **kwargs)
        if kwargs.get("training"):
            return dataset
        return dataset.map(lambda images, labels: (images + tf.cast(validation_batches.assign_add(1) * 0, images.dtype),
                                                   labels))

    monkeypatch.setattr(trainer, "make_pipeline", counting)
    fitted = {}
    run_on = trainer._run_on
    monkeypatch.setattr(trainer, "_run_on", lambda dataset, method, **kwargs: (
        fitted.setdefault(method.__name__, dataset), run_on(dataset, method, **kwargs))[1])
    result = trainer.train(_config(tmp_path, run_dir=None, epochs=3, max_test_examples=40, validation_split=None))
    assert result["epochs_done"] == 3 and result["steps_done"] == 6
    assert sum(dataset is fitted["fit"] for dataset in iterators) == 1
    assert int(validation_batches.numpy()) == 2 + 2  # 40 images at batch 32, once in fit; once more by the test score


def test_the_checkpoint_is_saved_once_a_minute_has_passed_and_when_training_ends(tmp_path, monkeypatch):
    # Saved every epoch, checkpoints/last.keras took 0.19 s of a 1.1 s epoch of a small-data
    # fine-tuning on 2 cores (benchmarks/RESULTS.md section 17, "Epochs without their edges");
    # the crash backup is still written every epoch.
    from keras_vit.training import callbacks as callbacks_lib

    clock = {"now": 0.0}
    monkeypatch.setattr(callbacks_lib.time, "perf_counter", lambda: clock["now"])
    saved = []
    monkeypatch.setattr(callbacks_lib, "save_model_atomic", lambda model, path: saved.append(clock["now"]))
    checkpoint = callbacks_lib.AtomicModelCheckpoint(str(tmp_path / "last.keras"), min_seconds=60)
    checkpoint.on_train_begin()
    for epoch in range(5):  # epochs of 25 s
        clock["now"] += 25.0
        checkpoint.on_epoch_end(epoch)
    checkpoint.on_train_end()
    assert saved == [75.0, 125.0]  # the first epoch end a minute after the start, then training's end
    with pytest.raises(ValueError, match=r"min_seconds=-1"):
        callbacks_lib.AtomicModelCheckpoint(str(tmp_path / "last.keras"), min_seconds=-1)


def test_a_runs_checkpoint_holds_the_last_epochs_model_and_is_saved_each_epoch_at_zero_seconds(tmp_path, monkeypatch):
    import numpy as np

    from keras_vit.training import callbacks as callbacks_lib

    saves = []
    save = callbacks_lib.save_model_atomic
    monkeypatch.setattr(callbacks_lib, "save_model_atomic", lambda model, path: (saves.append(path), save(model, path)))
    result = trainer.train(_config(tmp_path, epochs=3))
    assert len(saves) == 1  # a tiny run is over within the minute: saved when training ends
    loaded = keras.saving.load_model(tmp_path / "run" / "checkpoints" / "last.keras")
    for got, expected in zip(loaded.get_weights(), result["model"].get_weights()):
        np.testing.assert_array_equal(got, expected)
    monkeypatch.setattr(callbacks_lib, "CHECKPOINT_SECONDS", 0.0)
    saves.clear()
    trainer.train(_config(tmp_path, epochs=3, run_dir=str(tmp_path / "every")))
    assert len(saves) == 3


def test_the_crash_backup_waits_its_seconds_and_commits_the_last_epoch_when_training_ends(tmp_path, monkeypatch):
    # Saved every epoch, the backup took 0.16 s of a 1.1 s epoch of a small-data fine-tuning on 2
    # cores (benchmarks/RESULTS.md section 17); what a kill may lose is bounded instead.
    from keras_vit.training import callbacks as callbacks_lib

    clock = {"now": 0.0}
    monkeypatch.setattr(callbacks_lib.time, "perf_counter", lambda: clock["now"])
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    written = []
    backup = callbacks_lib.AtomicBackupAndRestore(str(tmp_path / "backup"), delete_checkpoint=False,
                                                  on_write=written.append, min_seconds=30)
    backup.set_model(model)
    backup.on_train_begin()
    committed = []
    for epoch in range(5):  # epochs of 12 s
        clock["now"] += 12.0
        backup.on_epoch_end(epoch)
        committed.append((backup.read_state() or {}).get("epoch"))
    assert committed == [None, None, 3, 3, 3]  # the first epoch end 30 s after the start
    backup.on_train_end()
    assert backup.read_state()["epoch"] == 5  # the last epoch, committed before the run's own commit
    assert sorted(os.listdir(tmp_path / "backup")) == ["backup.json", "epoch-00005.weights.h5"]
    assert sum(path.endswith(".weights.h5") for path in written) == 2
    with pytest.raises(ValueError, match=r"min_seconds=-1"):
        callbacks_lib.AtomicBackupAndRestore(str(tmp_path / "b"), min_seconds=-1)


def test_a_run_backs_up_on_the_default_clock_and_a_run_of_several_processes_every_epoch(tmp_path, monkeypatch):
    import types

    from keras_vit.training import callbacks as callbacks_lib

    config = types.SimpleNamespace(run_dir=str(tmp_path / "run"), budget_seconds=None, callbacks=())
    plan = types.SimpleNamespace(config=config, strategy=None, fingerprint=lambda: {})
    _, backup = trainer._callbacks(plan, progress=None, schedule=None)
    assert backup.min_seconds == callbacks_lib.BACKUP_SECONDS > 0
    monkeypatch.setattr(trainer, "_process_index", lambda strategy: 1)
    _, backup = trainer._callbacks(plan, progress=None, schedule=None)
    assert backup.min_seconds == 0
