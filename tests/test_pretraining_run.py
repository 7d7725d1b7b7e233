"""`keras-vit pretrain` (issue 53): a tiny run whose output `train --weights` adapts, resume, and bad input."""

import os

import numpy as np
import pytest
import tensorflow as tf

import keras

from keras_vit import cli
from keras_vit.pretraining import hf, run

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
    if "matplotlib" in printed or os.path.exists(os.path.join(runs, run.FIGURE)):
        assert os.path.getsize(os.path.join(runs, run.FIGURE)) > 0
    # The folder is a checkpoint: train adapts it as it is (its scaling and size from its own files).
    labelled = str(tmp_path / "labelled")
    for name in ("a", "b"):
        _folder(labelled, count=4, sub=name)
    code = cli.main(["train", "--weights", out, "--dataset", labelled, "--epochs", "1", "--batch-size", "4",
                     "--run-dir", str(tmp_path / "train_run"), "--output-dir", str(tmp_path / "saved"), "--no-export",
                     "--jit-compile", "off", "--quiet"])
    assert code == 0, capsys.readouterr()
    assert os.path.exists(tmp_path / "saved" / "vit.keras")


def test_a_run_killed_mid_epoch_then_before_its_output_resumes_and_writes_it(tmp_path, monkeypatch, capsys):
    from keras_vit.training import callbacks as callbacks_lib

    images = np.random.RandomState(0).randint(0, 256, (8, 16, 16, 3)).astype("uint8")
    config = run.PretrainConfig(dataset=images, batch_size=4, epochs=2, model={"patch_size": 4, "hidden_size": 16,
                                "num_layers": 1, "num_heads": 2, "mlp_dim": 32}, decoder="test", jit_compile=False,
                                run_dir=str(tmp_path / "run"), output_dir=str(tmp_path / "out"), verbose=0, figure=False)

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
    with pytest.raises(KeyboardInterrupt):
        run.pretrain(config)
    monkeypatch.setattr(callbacks_lib, "make_callbacks", make_callbacks)
    monkeypatch.setattr(hf, "save_mae_hf", killed)  # then dies again, trained, before writing its output
    with pytest.raises(KeyboardInterrupt):
        run.pretrain(run.PretrainConfig(**{**config.__dict__, "verbose": 1}))
    # The second epoch ran again from the first's backup: 2 + 2 steps, not 3 + 2.
    assert "resuming from epoch 1" in capsys.readouterr().out
    assert not os.path.exists(tmp_path / "out")
    monkeypatch.undo()
    result = run.pretrain(run.PretrainConfig(**{**config.__dict__, "verbose": 1}))
    assert "pre-training had finished" in capsys.readouterr().out
    assert result["steps_done"] == 4 and os.path.isfile(tmp_path / "out" / "model.safetensors")
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
