"""A training process killed with SIGKILL mid-run resumes from its last completed epoch."""

import csv
import json
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EPOCHS = 6


def test_sigkill_then_same_command_resumes(tmp_path):
    run_dir, out_dir = tmp_path / "run", tmp_path / "out"
    command = [
        sys.executable, "-m", "keras_vit.cli", "train", "--variant", "tiny", "--image-size", "28",
        "--epochs", str(EPOCHS), "--batch-size", "64", "--max-train-examples", "2048",
        "--max-test-examples", "200", "--jit-compile", "off", "--run-dir", str(run_dir),
        "--output-dir", str(out_dir), "--quiet",
    ]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    pointer = run_dir / "backup" / "backup.json"
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=str(tmp_path))
    deadline = time.monotonic() + 240
    try:
        while not pointer.exists():  # the first completed epoch commits the backup
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "no epoch completed in time"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL  # killed mid-run, not finished
    killed_at = json.loads(pointer.read_text())["epoch"]
    assert 1 <= killed_at < EPOCHS
    assert not (out_dir / "vit.keras").exists()

    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"Resumed from epoch {killed_at}" in result.stdout
    assert f"for {EPOCHS} epochs" in result.stdout
    with open(run_dir / "history.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows] == list(range(EPOCHS))  # each epoch once, none lost
    # The resumed run continued from trained weights, not from scratch.
    assert float(rows[killed_at]["loss"]) < float(rows[0]["loss"])
    summary = json.loads((out_dir / "vit.json").read_text())
    assert summary["epochs_done"] == EPOCHS and summary["initial_epoch"] == killed_at
    assert not (run_dir / "backup").exists()  # a finished run removes its backup
    assert (run_dir / "checkpoints" / "last.keras").exists()
    assert any((run_dir / "tensorboard").rglob("events.out.tfevents.*"))
