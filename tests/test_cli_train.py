"""`keras-vit train` and `keras-vit evaluate`: a tiny end-to-end run and one-line errors for bad input."""

import os
import subprocess
import sys

import pytest

from keras_vit import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_train_then_evaluate_tiny(tmp_path, capsys):
    out_dir = tmp_path / "saved"
    code = cli.main([
        "train", "--variant", "tiny", "--image-size", "28", "--epochs", "1", "--batch-size", "64",
        "--max-train-examples", "256", "--max-test-examples", "128", "--jit-compile", "off",
        "--run-dir", str(tmp_path / "run"), "--output-dir", str(out_dir), "--name", "m", "--quiet",
    ])
    assert code == 0
    out = capsys.readouterr().out
    assert "Test accuracy:" in out and "for 1 epochs" in out
    labels = (out_dir / "m.labels.txt").read_text().splitlines()
    assert len(labels) == 10 and labels[0] == "T-shirt/top"
    # The deployable exports come with the run, and find the class names on their own.
    assert (out_dir / "m" / "1" / "saved_model.pb").is_file()
    from keras_vit import export

    predictor = export.load_predictor(str(out_dir / "m.tflite"))
    assert predictor.class_names == tuple(labels)
    assert cli.main(["evaluate", str(out_dir / "m.keras"), "--max-examples", "128"]) == 0
    assert "accuracy" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--variant", "X99"], "variant='X99'"),
        (["train", "--dataset", "no_such_dataset_xyz"], "dataset='no_such_dataset_xyz'"),
        (["train", "--epochs", "0"], "--epochs=0"),
        (["train", "--stem", "conv", "--tokenizer", "shifted"], "--stem='conv' and --tokenizer='shifted'"),
        (["train", "--dataset", "{empty}"], "no class sub-folders"),
        (["train", "--dataset", "./missing/folder"], "not found"),
        # The name was joined to --output-dir only when saving: training ran first, then half the files were written.
        (["train", "--name", "sub/../y"], "--name='sub/../y'. Expected a file name without folders"),
        (["train", "--name", ".."], "--name='..'"),
        (["evaluate", "missing.keras"], "model='missing.keras'"),
        (["evaluate", "missing.keras", "--batch-size", "0"], "--batch-size=0"),
    ],
)
def test_bad_input_is_one_line_exit_2(argv, message, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    argv = [a.replace("{empty}", str(tmp_path / "empty")) for a in argv]
    assert cli.main(argv + (["--run-dir", str(tmp_path / "run")] if argv[0] == "train" else [])) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and "Traceback" not in err


def test_evaluate_checks_its_numbers_in_the_library_before_reading_the_model():
    from keras_vit.training import trainer

    for kwargs, message in (({"batch_size": 0}, "batch_size=0"), ({"max_examples": -1}, "max_examples=-1"),
                            ({"validation_split": 1.5}, "validation_split=1.5")):
        with pytest.raises(ValueError, match=message):
            trainer.evaluate("missing.keras", **kwargs)


def test_bad_input_subprocess_has_no_traceback():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    result = subprocess.run([sys.executable, "-m", "keras_vit.cli", "train", "--variant", "nope"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "keras-vit train: error: " in result.stderr
    assert "--help" not in result.stdout


def test_train_refuses_to_replace_a_saved_model_without_overwrite(tmp_path, capsys):
    """A new run whose <output-dir>/<name>.keras exists stops before training; a resumed run rewrites its own files
    (tests/test_training_resume.py)."""
    out_dir = tmp_path / "saved"
    out_dir.mkdir()
    (out_dir / "m.keras").write_bytes(b"precious")
    argv = ["train", "--variant", "tiny", "--image-size", "28", "--num-layers", "1", "--epochs", "1",
            "--max-train-examples", "32", "--max-test-examples", "32", "--jit-compile", "off", "--no-export",
            "--run-dir", str(tmp_path / "run"), "--output-dir", str(out_dir), "--name", "m", "--quiet"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "m.keras' already exists" in err[0] and "(--overwrite)" in err[0], err
    assert (out_dir / "m.keras").read_bytes() == b"precious" and not (tmp_path / "run").exists()
