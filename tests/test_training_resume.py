"""A training process killed with SIGKILL at an awkward moment loses nothing: the same command
again finishes the run, each epoch appears once in history.csv, and unrelated files stay.

Kill points: mid-epoch (with the backup on its default clock, and every epoch), between an
epoch's CSV row and its backup, and during the export after training. The kill comes from inside
the process at an exact point (a patched method); the last run is the plain command.
"""

import csv
import json
import os
import signal
import subprocess
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EPOCHS = 3

# Runs `keras_vit.cli.main(argv)` with a SIGKILL planted at the point named by argv[1].
KILLER = """
import os, signal, sys
from keras_vit import export, cli
from keras_vit.training import callbacks
from keras_vit.training.callbacks import AtomicBackupAndRestore as Backup

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

point, argv = sys.argv[1], sys.argv[2:]
if point.startswith("throttled_"):  # the backup on its default clock: these epochs take a second
    point = point[len("throttled_"):]
else:
    callbacks.BACKUP_SECONDS = 0.0
if point == "mid_epoch":  # during epoch 1, after epoch 0's backup (if the clock allowed it)
    on_batch = Backup.on_train_batch_end
    Backup.on_train_batch_end = lambda self, batch, logs=None: die() if self.epoch == 1 and batch == 1 else on_batch(self, batch, logs)
elif point == "before_backup":  # epoch 2's CSV row is written, its backup not yet
    on_epoch = Backup.on_epoch_end
    Backup.on_epoch_end = lambda self, epoch, logs=None: die() if epoch == 2 else on_epoch(self, epoch, logs)
elif point == "export":  # training done and the SavedModel written; killed during the TFLite export
    export.tflite = die
sys.exit(cli.main(argv))
"""


def _command(tmp_path):
    return [
        "train", "--variant", "tiny", "--image-size", "28", "--num-layers", "1", "--epochs", str(EPOCHS),
        "--batch-size", "32", "--max-train-examples", "96", "--max-test-examples", "32", "--jit-compile", "off",
        "--run-dir", str(tmp_path / "run"), "--output-dir", str(tmp_path / "out"), "--quiet",
    ]


def _run(args, tmp_path, timeout=300):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable] + args, capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=timeout)


def _history(run_dir):
    with open(run_dir / "history.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_sigkill_at_three_points_then_same_command_finishes_the_run(tmp_path):
    # One chain keeps the test time down (each process imports TensorFlow): the run is killed
    # mid-epoch 1 before its backup's clock allowed any backup, then (same command) mid-epoch 1
    # with a backup every epoch, then between epoch 2's CSV row and its backup, then during the
    # export; after each kill, the same command carries on from what was committed.
    run_dir, out_dir = tmp_path / "run", tmp_path / "out"
    for folder in (run_dir, out_dir):
        folder.mkdir()
        (folder / "precious.txt").write_text("keep")
    command = _command(tmp_path)

    def kill_at(point, expected_epoch, expected_rows):
        killed = _run(["-c", KILLER, point] + command, tmp_path)
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
        pointer_path = run_dir / "backup" / "backup.json"
        pointer = json.loads(pointer_path.read_text()) if pointer_path.exists() else None
        assert (pointer and pointer["epoch"]) == expected_epoch
        assert [int(r["epoch"]) for r in _history(run_dir)] == expected_rows
        assert (run_dir / "precious.txt").read_text() == "keep" and (out_dir / "precious.txt").read_text() == "keep"
        return killed, pointer

    kill_at("throttled_mid_epoch", None, [0])  # epoch 0's row is on disk; its backup waits for BACKUP_SECONDS
    killed, _ = kill_at("mid_epoch", 1, [0])  # nothing to resume: epoch 0 again, its first row dropped
    assert "resuming" not in killed.stdout
    assert not (out_dir / "vit.keras").exists()
    killed, _ = kill_at("before_backup", 2, [0, 1, 2])  # epoch 2's row is on disk, its backup is not
    assert f"resuming from epoch 1 of {EPOCHS}" in killed.stdout
    killed, pointer = kill_at("export", EPOCHS, [0, 1, 2])  # epoch 2's repeated row was dropped
    assert f"resuming from epoch 2 of {EPOCHS}" in killed.stdout
    assert pointer["finished"] and (out_dir / "vit" / "1" / "saved_model.pb").is_file()
    assert not (out_dir / "vit.tflite").exists()
    rows_before = _history(run_dir)

    result = _run(["-m", "keras_vit.cli"] + command, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"training had finished (epoch {EPOCHS} of {EPOCHS}); writing the final artefacts only" in result.stdout
    assert f"for {EPOCHS} epochs" in result.stdout
    rows = _history(run_dir)
    assert rows == rows_before and [int(r["epoch"]) for r in rows] == list(range(EPOCHS))  # each epoch once
    assert float(rows[-1]["loss"]) < float(rows[0]["loss"])  # resumed from trained weights, not from scratch
    assert sorted(os.listdir(out_dir / "vit")) == ["1"]  # the same SavedModel version redone, not a second
    summary = json.loads((out_dir / "vit.json").read_text())
    assert summary["epochs_done"] == EPOCHS and summary["steps_done"] == EPOCHS * 3
    assert summary["initial_epoch"] == EPOCHS and summary["train_seconds"] > 0
    assert zipfile.is_zipfile(out_dir / "vit.keras") and (out_dir / "vit.tflite").is_file()
    assert (run_dir / "precious.txt").read_text() == "keep" and (out_dir / "precious.txt").read_text() == "keep"
    assert not (run_dir / "backup").exists()  # removed once every artefact was written
    assert (run_dir / "checkpoints" / "last.keras").exists()
    assert any((run_dir / "tensorboard").rglob("events.out.tfevents.*"))


# Trains with a pause in the first batch: prints "holding" and waits, its run directory held meanwhile.
HOLDER = """
import sys, time
from keras_vit import cli
from keras_vit.training.callbacks import AtomicBackupAndRestore as Backup

def hold(self, batch, logs=None):
    print("holding", flush=True)
    time.sleep(600)

Backup.on_train_batch_end = hold
sys.exit(cli.main(sys.argv[1:]))
"""


def test_a_run_directory_is_held_by_one_process_and_a_killed_holder_leaves_it_free(tmp_path, capsys):
    from keras_vit import cli
    from keras_vit.training.run_dir import RunLock

    run_dir = tmp_path / "run"
    command = ["train", "--variant", "tiny", "--image-size", "28", "--num-layers", "1", "--epochs", "1",
               "--batch-size", "16", "--max-train-examples", "32", "--max-test-examples", "16", "--jit-compile",
               "off", "--run-dir", str(run_dir), "--output-dir", str(tmp_path / "out"), "--no-export", "--quiet"]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), TF_CPP_MIN_LOG_LEVEL="2")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER] + command, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, env=env, cwd=str(tmp_path))
    try:
        lines = iter(holder.stdout.readline, "")  # the header, then "holding" (or the end: it failed)
        assert any(line.strip() == "holding" for line in lines), "the first run never reached its first batch"
        assert cli.main(command) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("keras-vit train: error: --run-dir="), err
        assert f"'{run_dir}' is in use by another training run: process {holder.pid} holds its lock" in err[0]
        assert not (run_dir / "backup.old").exists() and not any(p.name.startswith("backup.old") for p in run_dir.iterdir())
    finally:
        holder.kill()  # SIGKILL: the kernel lets go of its lock
        holder.wait(timeout=60)
    assert holder.returncode == -signal.SIGKILL
    assert (run_dir / "run.lock").exists()  # left behind by the killed run, and no longer held
    lock = RunLock(run_dir)
    assert json.loads((run_dir / "run.lock").read_text())["pid"] == os.getpid()
    lock.release()
    assert not (run_dir / "run.lock").exists()
    # The processes of one multi-process run hold a lock each.
    locks = [RunLock(run_dir, process=index) for index in range(2)]
    assert sorted(p.name for p in run_dir.glob("*.lock")) == ["run.process-0.lock", "run.process-1.lock"]
    for lock in locks:
        lock.release()


def test_without_fcntl_the_run_directory_is_not_locked_and_a_warning_says_so(tmp_path, monkeypatch):
    import pytest

    from keras_vit.training import run_dir

    monkeypatch.setattr(run_dir, "fcntl", None)
    with pytest.warns(RuntimeWarning, match=r"no fcntl: run_dir='.*' is not locked"):
        lock = run_dir.RunLock(tmp_path)
    lock.release()
    assert list(tmp_path.iterdir()) == []


def test_a_run_lock_leaves_no_folder_it_created_for_nothing(tmp_path):
    from keras_vit.training.run_dir import RunLock

    RunLock(tmp_path / "runs" / "train").release()  # a run refused after taking the lock writes nothing
    assert list(tmp_path.iterdir()) == []
    lock = RunLock(tmp_path / "runs" / "train")
    (tmp_path / "runs" / "train" / "history.csv").write_text("epoch\n")
    lock.release()
    assert [p.name for p in (tmp_path / "runs" / "train").iterdir()] == ["history.csv"]
