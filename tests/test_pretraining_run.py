"""`keras-vit pretrain` (issue 53): a tiny run whose output `train --weights` adapts, resume, and bad input."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import keras

from keras_vit import cli
from keras_vit.pretraining import hf, mae_run, run

TINY = ["--patch-size", "4", "--hidden-size", "16", "--num-layers", "1", "--num-heads", "2", "--mlp-dim", "32",
        "--decoder", "test", "--jit-compile", "off", "--quiet"]


def _folder(root, count=8, size=16, channels=(3,), sub=None):
    folder = os.path.join(root, sub) if sub else root
    os.makedirs(folder, exist_ok=True)
    rng = np.random.RandomState(0)
    for i in range(count):
        c = channels[i % len(channels)]
        pixels = tf.constant(rng.randint(0, 256, (size, size, c)).astype("uint8"))
        tf.io.write_file(os.path.join(folder, f"{i}.png"), tf.io.encode_png(pixels))
    return root


def _train_adapts(checkpoint, tmp_path, capsys):
    """`keras-vit train --weights checkpoint` on 2 classes of 4 images of 16 px exits 0 and saves; the folder."""
    labelled = str(tmp_path / "labelled")
    for name in ("a", "b"):
        _folder(labelled, count=4, size=16, sub=name)
    code = cli.main(["train", "--weights", checkpoint, "--dataset", labelled, "--epochs", "1", "--batch-size", "4",
                     "--run-dir", str(tmp_path / "train_run"), "--output-dir", str(tmp_path / "saved"), "--no-export",
                     "--jit-compile", "off", "--quiet"])
    assert code == 0, capsys.readouterr()
    assert os.path.exists(tmp_path / "saved" / "vit.keras")
    return labelled


def test_pretrain_writes_a_checkpoint_that_train_adapts(tmp_path, capsys):
    data = _folder(str(tmp_path / "images"), count=8, sub="any_class")  # a class folder: its name is ignored
    out, runs = str(tmp_path / "out"), str(tmp_path / "run")
    code = cli.main(["pretrain", "--dataset", data, "--batch-size", "4", "--epochs", "1", "--output-dir", out,
                     "--run-dir", runs] + TINY)
    printed = capsys.readouterr().out
    assert code == 0, printed
    for label in ("Model:", "Data:", "Training:", "Choices:", "Outputs:", "Resume:"):
        assert label in printed
    assert "8 unlabeled images" in printed and "16 patches, 4 seen" in printed
    # One pass over 8 images: the run says how few that is for MAE, and what 20 CPU minutes gave.
    assert "2 steps, 1 pass over the 8 images" in printed, printed
    assert "Few passes: 1 over the images" in printed and "adapted below a model trained from scratch" in printed
    assert sorted(os.listdir(out)) == ["config.json", "model.safetensors", "preprocessor_config.json"]
    if "matplotlib" in printed or os.path.exists(os.path.join(runs, mae_run.FIGURE)):
        assert os.path.getsize(os.path.join(runs, mae_run.FIGURE)) > 0
    # The folder is a checkpoint: train adapts it as it is (its scaling and size from its own files).
    _train_adapts(out, tmp_path, capsys)


@pytest.mark.parametrize("method", ["mae", "dino", "simclr"])
def test_a_run_killed_mid_epoch_then_before_its_output_resumes_and_writes_it(tmp_path, monkeypatch, capsys, method):
    from keras_vit.pretraining import dino_run, simclr_run
    from keras_vit.training import callbacks as callbacks_lib

    images = np.random.RandomState(0).randint(0, 256, (8, 16, 16, 3)).astype("uint8")
    own = dict(decoder="test") if method == "mae" else dict(method=method, head="test")
    config = run.PretrainConfig(dataset=images, batch_size=4, epochs=2, model={"patch_size": 4, "hidden_size": 16,
                                "num_layers": 1, "num_heads": 2, "mlp_dim": 32}, jit_compile=False,
                                run_dir=str(tmp_path / "run"), output_dir=str(tmp_path / "out"), verbose=0, figure=False,
                                **own)

    class Kill(keras.callbacks.Callback):  # the process dies in the second epoch, after its first step
        def on_train_batch_end(self, batch, logs=None):
            if int(keras.ops.convert_to_numpy(self.model.optimizer.iterations)) == 3:
                raise KeyboardInterrupt

    def with_kill(*args, **kwargs):
        made = make_callbacks(*args, **kwargs)
        return made[:-1] + [Kill()] + made[-1:]

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    make_callbacks = callbacks_lib.make_callbacks
    monkeypatch.setattr(callbacks_lib, "make_callbacks", with_kill)
    monkeypatch.setattr(callbacks_lib, "BACKUP_SECONDS", 0.0)  # a backup at every epoch: the kill comes within seconds
    with pytest.raises(KeyboardInterrupt):
        run.pretrain(config)
    monkeypatch.setattr(callbacks_lib, "make_callbacks", make_callbacks)
    # Then it dies again, trained, before writing its output.
    monkeypatch.setattr(*{"mae": (hf, "save_mae_hf"), "dino": (dino_run, "save"), "simclr": (simclr_run, "save")}[method],
                        killed)
    with pytest.raises(KeyboardInterrupt):
        run.pretrain(run.PretrainConfig(**{**config.__dict__, "verbose": 1}))
    # The second epoch ran again from the first's backup: 2 + 2 steps, not 3 + 2.
    assert "resuming from epoch 1" in capsys.readouterr().out
    assert not os.path.exists(tmp_path / "out")
    monkeypatch.undo()
    result = run.pretrain(run.PretrainConfig(**{**config.__dict__, "verbose": 1}))
    assert "pre-training had finished" in capsys.readouterr().out
    written = "model.safetensors" if method == "mae" else "model.keras"
    assert result["steps_done"] == 4 and os.path.isfile(tmp_path / "out" / written)
    assert not os.path.exists(tmp_path / "run" / "backup")


@pytest.mark.parametrize("args, flag", [
    (["--batch-size", "16"], "--batch-size=16"),
    (["--mask-ratio", "1.5"], "--mask-ratio=1.5"),
    (["--mask-ratio", "0.97"], "--mask-ratio=0.97"),
    (["--image-size", "18"], "--image-size=18"),
])
def test_bad_arguments_exit_2_with_one_line(tmp_path, capsys, args, flag):
    data = _folder(str(tmp_path / "images"), count=8)
    code = cli.main(["pretrain", "--dataset", data, "--run-dir", str(tmp_path / "r"), "--output-dir",
                     str(tmp_path / "o")] + TINY + args)
    error = capsys.readouterr().err.strip()
    assert code == 2 and flag in error and "\n" not in error, error
    assert not os.path.exists(tmp_path / "o")


@pytest.mark.parametrize("count, channels, message", [
    (1, (3,), "holds 1 image"),
    (4, (1, 3), "--channels 3"),
])
def test_bad_folders_exit_2_with_one_line(tmp_path, capsys, count, channels, message):
    data = _folder(str(tmp_path / "images"), count=count, channels=channels)
    code = cli.main(["pretrain", "--dataset", data, "--output-dir", str(tmp_path / "o"), "--run-dir",
                     str(tmp_path / "r")] + TINY)
    error = capsys.readouterr().err.strip()
    assert code == 2 and "--dataset" in error and message in error and "\n" not in error, error


DINO_TINY = ["--method", "dino", "--head", "test", "--hidden-size", "16", "--num-layers", "1", "--num-heads", "2",
             "--mlp-dim", "32", "--jit-compile", "off", "--quiet"]


def test_dino_writes_the_teachers_backbone_that_train_and_knn_read(tmp_path, capsys):
    data = _folder(str(tmp_path / "images"), count=8, size=16)
    out = str(tmp_path / "out")
    code = cli.main(["pretrain", "--dataset", data, "--batch-size", "4", "--epochs", "1", "--output-dir", out,
                     "--run-dir", str(tmp_path / "run"), "--local-views", "2"] + DINO_TINY)
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "DINO (self-distillation)" in printed and "16 prototypes" in printed
    assert "2 global views of each image and 2 local ones of 8 px" in printed and "XLA" in printed
    assert "Few passes: 1 over the images, where DINO's" in printed
    assert sorted(os.listdir(out)) == ["model.keras", "pretraining.json"]
    # The checkpoint's record says how it was made, its views included.
    with open(os.path.join(out, "pretraining.json")) as f:
        settings = json.load(f)["settings"]
    assert (settings["local_views"], settings["local_size"], settings["batch_size"]) == (2, 8, 4)
    saved = keras.saving.load_model(os.path.join(out, "model.keras"), compile=False)
    assert saved.vit_config["pooling"] == "token" and not saved.vit_config["include_top"]
    labelled = _train_adapts(out, tmp_path, capsys)
    capsys.readouterr()
    code = cli.main(["knn", out, "--dataset", labelled, "--k", "3", "--validation-split", "0.25"])
    assert code == 0, capsys.readouterr()


SIMCLR_TINY = ["--method", "simclr", "--head", "test"] + DINO_TINY[4:]


def test_simclr_on_smaller_views_writes_the_backbone_at_its_own_size_that_train_adapts(tmp_path, capsys):
    data = _folder(str(tmp_path / "images"), count=8, size=16)
    out = str(tmp_path / "out")
    code = cli.main(["pretrain", "--dataset", data, "--batch-size", "4", "--epochs", "1", "--output-dir", out,
                     "--run-dir", str(tmp_path / "run"), "--patch-size", "4", "--view-size", "8"] + SIMCLR_TINY)
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "SimCLR (contrastive)" in printed and "projection head 16 wide to 8" in printed
    assert "views of 8 px (given), through the backbone's layers at its 16 px" in printed
    assert "crops of 14%-100% of the image at 8 px" in printed and "the backbone as model.keras" in printed
    assert "Few passes: 1 over the images, where SimCLR's" in printed
    assert sorted(os.listdir(out)) == ["model.keras", "pretraining.json"]
    with open(os.path.join(out, "pretraining.json")) as f:
        record = json.load(f)
    assert (record["method"], record["settings"]["view_size"], record["settings"]["temperature"]) == ("simclr", 8, 0.2)
    saved = keras.saving.load_model(os.path.join(out, "model.keras"), compile=False)
    assert saved.input_shape == (None, 16, 16, 3) and not saved.vit_config["include_top"]
    _train_adapts(out, tmp_path, capsys)


def test_dino_on_small_images_pretrains_the_conv_stem_model_train_builds(tmp_path):
    images = np.random.RandomState(0).randint(0, 256, (8, 28, 28, 1)).astype("uint8")
    config = run.PretrainConfig(dataset=images, batch_size=4, epochs=1, method="dino", head="test", jit_compile=False,
                                run_dir=None, output_dir=None, verbose=0, budget_seconds=60, local_views=6)
    result = run.pretrain(config)
    student = result["model"].student
    # The stem's stride tiles 32 px, not 28: resized, as train does; its blocks are the budget's.
    assert student.vit_config["backbone"] is not None or student.get_layer("conv_stem") is not None
    assert student.input_shape == (None, 32, 32, 1) and result["steps_done"] >= 1
    # DINO's multi-crop, asked for: local views of 16 px, two of the stem's 8 px cells a side.
    assert (result["model"].local_views, result["model"].local_size) == (6, 16)
    assert result["settings"]["local_views"] == 6


@pytest.mark.parametrize("args, flag", [
    (["--method", "dino", "--mask-ratio", "0.5"], "--mask-ratio=0.5"),
    (["--method", "simclr", "--decoder", "test"], "--decoder='test'"),
    (["--method", "dino", "--view-size", "8"], "--view-size=8"),
    (["--view-size", "8"], "--view-size=8"),
    (["--method", "simclr", "--local-views", "2"], "--local-views=2"),
    # 16 px images: views of 6 px are no whole 4 px patches; 0 is no side.
    (["--method", "simclr", "--patch-size", "4", "--view-size", "6"], "--view-size=6"),
    (["--method", "simclr", "--view-size", "0"], "--view-size=0"),
    (["--head", "small"], "--head='small'"),
    (["--method", "dino", "--decoder", "test"], "--decoder='test'"),
    (["--local-views", "2"], "--local-views=2"),
    # 16 px images on 16 px patches hold no smaller view of whole tokens.
    (["--method", "dino", "--local-views", "2", "--patch-size", "16"], "--local-views=2"),
    (["--method", "dino", "--local-views", "-1"], "--local-views=-1"),
])
def test_mae_and_dino_flags_are_refused_with_the_other_method(tmp_path, capsys, args, flag):
    data = _folder(str(tmp_path / "images"), count=8)
    code = cli.main(["pretrain", "--dataset", data, "--run-dir", str(tmp_path / "r"), "--output-dir",
                     str(tmp_path / "o"), "--quiet"] + args)
    error = capsys.readouterr().err.strip()
    assert code == 2 and flag in error and "\n" not in error, error
    assert not os.path.exists(tmp_path / "o")


def test_dino_continues_a_checkpoint_and_refuses_a_classifier(tmp_path):
    import keras_vit

    images = np.random.RandomState(0).randint(0, 256, (8, 16, 16, 3)).astype("uint8")
    tiny = dict(patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, image_size=16, preprocessing="unit")
    features, classifier = str(tmp_path / "features.keras"), str(tmp_path / "classifier.keras")
    keras_vit.ViT(**tiny, include_top=False).save(features)
    keras_vit.ViT(**tiny, num_classes=3).save(classifier)
    config = run.PretrainConfig(dataset=images, batch_size=4, epochs=1, method="dino", head="test", weights=features,
                                jit_compile=False, run_dir=None, output_dir=str(tmp_path / "out"), verbose=0)
    result = run.pretrain(config)
    start = keras.saving.load_model(features)
    saved = keras.saving.load_model(str(tmp_path / "out" / "model.keras"))
    assert saved.vit_config["hidden_size"] == 16 and result["steps_done"] == 2
    # Continued from the checkpoint's weights, not from a new model: the teacher is still close to them.
    kernel = "embedding/kernel"
    moved = np.abs(_value(saved, kernel) - _value(start, kernel)).max()
    assert moved <= 0.05 * np.abs(_value(start, kernel)).max()
    with pytest.raises(ValueError, match="weights=.*classifier.keras.*without its ViT configuration"):
        run.pretrain(run.PretrainConfig(**{**config.__dict__, "weights": classifier, "output_dir": None}))


def _value(model, path):
    return next(np.asarray(keras.ops.convert_to_numpy(w)) for w in model.weights if w.path == path)


@pytest.mark.parametrize("method, flags", [("mae", TINY), ("dino", DINO_TINY)])
def test_an_output_folder_holding_other_files_is_never_replaced_without_overwrite(tmp_path, capsys, method, flags):
    data = _folder(str(tmp_path / "images"), count=8)
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("keep")
    if method == "dino":  # DINO writes its files into the folder: only its own model file stops it
        (out / "model.keras").write_text("someone's")
    code = cli.main(["pretrain", "--dataset", data, "--batch-size", "4", "--epochs", "1", "--output-dir", str(out),
                     "--run-dir", str(tmp_path / "run")] + flags)
    error = capsys.readouterr().err.strip()
    assert code == 2 and "--overwrite" in error and "\n" not in error, error
    assert (out / "precious.txt").read_text() == "keep" and sorted(os.listdir(out))[-1] == "precious.txt"


def test_the_flags_choices_are_the_tables_rows():
    # The parser names the rows itself (`keras-vit --help` imports no Keras); each table is the fact.
    # argparse has no public reader of a parser's options: its actions are read here.
    import argparse

    from keras_vit.commands import pretrain as command
    from keras_vit.pretraining import dino, mae, simclr

    parser = argparse.ArgumentParser()
    command.add(parser.add_subparsers())
    actions = {a.dest: a for sub in parser._subparsers._group_actions for p in sub.choices.values() for a in p._actions}
    assert tuple(actions["decoder"].choices) == tuple(mae.DECODERS)
    assert tuple(actions["head"].choices) == tuple(dino.HEADS) == tuple(simclr.HEADS)
    assert tuple(actions["method"].choices) == run.METHODS


def test_dino_continues_a_timm_hub_folder_at_the_scaling_its_files_state(tmp_path, capsys):
    """A checkpoint another program's layout holds (a timm Hub folder), not only a .keras feature model."""
    import keras_vit
    from keras_vit import weights

    images = np.random.RandomState(0).randint(0, 256, (8, 16, 16, 3)).astype("uint8")
    start = keras_vit.ViT(patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, image_size=16,
                          num_classes=3, preprocessing="imagenet")
    folder = str(tmp_path / "timm")
    weights.save_timm(start, folder)
    config = run.PretrainConfig(dataset=images, batch_size=4, epochs=1, method="dino", head="test", weights=folder,
                                jit_compile=False, run_dir=None, output_dir=str(tmp_path / "out"), verbose=1,
                                figure=False)
    result = run.pretrain(config)
    assert "scaling imagenet (" in capsys.readouterr().out  # read from the folder's pretrained_cfg
    saved = keras.saving.load_model(str(tmp_path / "out" / "model.keras"))
    assert result["steps_done"] == 2 and saved.vit_config["preprocessing"] == "imagenet"
    assert not saved.vit_config["include_top"]
    kernel = "embedding/kernel"
    moved = np.abs(_value(saved, kernel) - _value(start, kernel)).max()
    assert moved <= 0.05 * np.abs(_value(start, kernel)).max()  # continued from the folder's weights


@pytest.mark.parametrize("accelerator, budget, local_views, expected, reason", [
    ("cpu", 300, 0, False, "a budget under 10 min"),
    ("cpu", 1200, 6, False, "with local views"),
    ("cpu", None, 6, False, "with local views"),
    ("gpu", 1200, 6, True, "default"),
    ("cpu", 1200, 0, True, "default"),
])
def test_xla_is_off_on_a_tensorflow_cpu_for_short_budgets_and_local_views(monkeypatch, accelerator, budget,
                                                                          local_views, expected, reason):
    from keras_vit import machine

    monkeypatch.setattr(machine, "detect", lambda *args, **kwargs: machine.Machine(
        accelerator=accelerator, gpu_capability=8 if accelerator == "gpu" else None))
    jit, why = run.choose_jit_compile(None, "float32", budget, local_views)
    assert jit is expected and reason in why, why
    assert run.choose_jit_compile(True, "float32", budget, local_views) == (True, "given")
