"""`--adapt auto` killed with SIGKILL before or after it decides between probe and fine-tuning: the same
command again ends where the unbroken run would, with the decision made once and reported (issue 50).

The decision is forced one way (`trainer._compare` patched in the killed process, each call written
to a file), so what is checked is the resume, not the figures.
"""

import json
import os
import signal
import subprocess
import sys

import keras
import numpy as np

from test_train_weights import _folder, checkpoint  # noqa: F401 (a fixture)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# argv: kill point ("epochN": in epoch N's second batch; "export": in the TFLite export; "none"),
# "keep" or "probe" (the decision), the file of decision calls, then `keras-vit train`'s arguments.
KILLER = """
import os, signal, sys
from keras_vit import cli, export
from keras_vit.training import callbacks, trainer
from keras_vit.training.callbacks import AtomicBackupAndRestore as Backup

point, keep, calls, argv = sys.argv[1], sys.argv[2] == "keep", sys.argv[3], sys.argv[4:]
callbacks.BACKUP_SECONDS = 0.0  # a backup every epoch: these epochs take a fraction of a second

def compare(plan, prober, probed):
    with open(calls, "a") as f:
        f.write(f"{int(prober.model.optimizer.iterations.numpy())}\\n")
    figures = {"probe_validation_accuracy": probed.validation_accuracy, "finetuned_validation_accuracy": 0.5,
               "only_probe_right": 0 if keep else 3, "only_finetuned_right": 0, "sign_test_p": 1.0 if keep else 0.01}
    return figures, keep

trainer._compare = compare

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

if point.startswith("epoch"):
    epoch, on_batch = int(point[len("epoch"):]), Backup.on_train_batch_end
    Backup.on_train_batch_end = lambda self, batch, logs=None: (
        die() if self.epoch == epoch and batch == 1 else on_batch(self, batch, logs))
elif point == "export":
    export.tflite = die
sys.exit(cli.main(argv))
"""


def _run(tmp_path, point, decision, *arguments):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-c", KILLER, point, decision, str(tmp_path / "calls.txt"), *arguments],
                          capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=300)


def _command(tmp_path, checkpoint, *flags):
    # 30 training images, 3 held out for the decision: 27 at batch 4 are 6 steps an epoch, 24 in
    # 4 epochs, decided at the end of epoch 1 (step 12, half way).
    data = _folder(tmp_path / "data", per_class=10)
    return ["train", "--dataset", data, "--weights", checkpoint, "--scaling", "symmetric", "--budget-minutes", "5",
            "--epochs", "4", "--jit-compile", "off", "--run-dir", str(tmp_path / "run"),
            "--output-dir", str(tmp_path / "out"), "--name", "m", "--quiet", *flags]


def _calls(tmp_path):
    path = tmp_path / "calls.txt"
    return path.read_text().split() if path.exists() else []


def _pointer(tmp_path):
    return json.loads((tmp_path / "run" / "backup" / "backup.json").read_text())


def test_killed_before_and_after_its_decision_the_run_decides_once_at_the_same_step(checkpoint, tmp_path):
    command = _command(tmp_path, checkpoint, "--no-export")
    before = _run(tmp_path, "epoch1", "keep", *command)  # step 8: before the decision
    assert before.returncode == -signal.SIGKILL, before.stderr[-3000:]
    assert _calls(tmp_path) == [] and _pointer(tmp_path)["epoch"] == 1
    # Resumed from epoch 1: the probe is fitted again, so the decision comes at step 12 as it would have.
    after = _run(tmp_path, "epoch2", "keep", *command)  # step 14: after it
    assert after.returncode == -signal.SIGKILL, after.stderr[-3000:]
    assert "resuming from epoch 1 of 4" in after.stdout and "Probe:" in after.stdout
    assert "Decided:  after 12 steps" in after.stdout and _calls(tmp_path) == ["12"]
    pointer = _pointer(tmp_path)
    assert pointer["epoch"] == 2 and pointer["adapt_decision"]["kept"] == "finetuned", pointer
    assert pointer["adapt_decision"]["decided_at_step"] == 12
    # Resumed after the decision: not decided again, and no probe to fit; the summary reports the decision.
    done = _run(tmp_path, "none", "keep", *command)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming from epoch 2 of 4" in done.stdout and "Probe:" not in done.stdout and "Decided:" not in done.stdout
    assert _calls(tmp_path) == ["12"]
    summary = json.loads((tmp_path / "out" / "m.json").read_text())
    decision = summary["adapt_decision"]
    assert decision["kept"] == "finetuned" and decision["decided_at_step"] == 12, decision
    assert summary["steps_done"] == 24 and summary["validation_accuracy"] == 0.5
    assert "decided after 12 steps" in done.stdout and "before the run was resumed" in done.stdout, done.stdout


def test_killed_after_keeping_the_probe_the_run_resumes_to_the_probe_not_the_fine_tuning(checkpoint, tmp_path):
    command = _command(tmp_path, checkpoint)
    killed = _run(tmp_path, "export", "probe", *command)  # decided at step 12, the .keras written, killed in the export
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert _calls(tmp_path) == ["12"] and "Kept:     the probe" in killed.stdout
    pointer = _pointer(tmp_path)
    assert pointer["finished"] and pointer["adapt_decision"]["kept"] == "probe", pointer
    probe = [w.numpy() for w in keras.saving.load_model(tmp_path / "out" / "m.keras", compile=False).weights]
    done = _run(tmp_path, "none", "probe", *command)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _calls(tmp_path) == ["12"]  # the recorded decision, not a second one
    summary = json.loads((tmp_path / "out" / "m.json").read_text())
    decision = summary["adapt_decision"]
    assert decision["kept"] == "probe" and decision["decided_at_step"] == 12 and "refit_l2" in decision, decision
    # The model written is the probe the killed run wrote (the checkpoint's backbone), not the fine-tuning's weights.
    resumed = keras.saving.load_model(tmp_path / "out" / "m.keras", compile=False).weights
    for expected, weight in zip(probe, resumed):
        np.testing.assert_allclose(weight.numpy(), expected, atol=1e-5, err_msg=weight.path)
    assert sorted(os.listdir(tmp_path / "out" / "m")) == ["1"]  # the SavedModel version the killed run reserved
    assert (tmp_path / "out" / "m.tflite").is_file() and not (tmp_path / "run" / "backup").exists()
