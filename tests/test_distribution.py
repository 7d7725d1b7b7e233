"""Data and model parallel training on JAX (keras_vit.distribution) over 8 host CPU devices.

The device count is an XLA flag read when JAX starts, so every multi-device check runs in a
subprocess (tests/distribution_worker.py) that sets it without leaking it into this process;
one subprocess measures (a)-(d) and the giants, to keep the CI time down.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import keras_vit
from keras_vit import distribution

from helpers import STRUCTURE_ROWS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(ROOT, "tests", "distribution_worker.py")
JAX = pytest.mark.backends("jax")

# Largest |difference| of any weight after 4 AdamW steps (lr 1e-3) on a mesh and on one device:
# the reductions add in another order. Measured 6e-6 to 1e-5 (2026-11-23); an update of those
# 4 steps is up to 4e-3, so a missing or doubled gradient share would be far outside.
WEIGHT_TOLERANCE = 5e-5


def _env(devices):
    return dict(
        os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="2",
        XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}".strip(),
        PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )


def _result(completed):
    lines = [line for line in completed.stdout.splitlines() if line.startswith("RESULT ")]
    assert completed.returncode == 0 and lines, completed.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT "):])


@pytest.fixture(scope="module")
def mesh(tmp_path_factory, worker_id):
    """The worker's measurements, made once per test session even when pytest-xdist spreads this
    module's tests over several workers (they share the session's temporary folder)."""
    if worker_id == "master":
        return _measure(tmp_path_factory.mktemp("mesh"))
    shared = tmp_path_factory.getbasetemp().parent
    result, lock = shared / "distribution_mesh.json", shared / "distribution_mesh.lock"
    try:
        os.close(os.open(lock, os.O_CREAT | os.O_EXCL))
    except FileExistsError:  # another worker measures: wait for its file
        deadline = time.monotonic() + 900
        while not result.exists():
            assert time.monotonic() < deadline, "the other xdist worker's measurement did not finish"
            time.sleep(1)
        measured = json.loads(result.read_text())
        assert "error" not in measured, measured.get("error")
        return measured
    try:
        measured = _measure(tmp_path_factory.mktemp("mesh"))
    except BaseException as error:  # the waiting worker fails at once too
        measured = {"error": f"the measuring worker failed: {error}"[:4000]}
        raise
    finally:
        partial = shared / "distribution_mesh.json.part"
        partial.write_text(json.dumps(measured))
        os.replace(partial, result)
    return measured


def _measure(folder):
    completed = subprocess.run([sys.executable, WORKER, "mesh", str(folder)], capture_output=True, text=True,
                               env=_env(8), timeout=600)
    return _result(completed)


@JAX
def test_fit_on_a_mesh_gives_the_weights_of_one_device(mesh):
    assert mesh["devices"] == 8
    assert mesh["largest_update"] > 20 * WEIGHT_TOLERANCE  # the steps moved the weights far beyond the tolerance
    for plan, difference in mesh["max_abs_diff"].items():
        assert difference < WEIGHT_TOLERANCE, plan


@JAX
def test_every_variable_is_split_as_its_rule_says(mesh):
    shardings = mesh["shardings"]
    split = [path for path, s in shardings.items() if "model" in s["spec"]]
    for path, s in shardings.items():
        if not path.startswith("adam"):  # the slots' paths are the optimizer's; checked below
            assert s["spec"] == s["rule"], path
        expected = [size // 4 if axis == "model" else size for size, axis in zip(s["shape"], s["spec"])]
        assert s["shard_shape"] == expected, path
    for i in (0, 1):  # the attention and MLP kernels of each block, and the head
        for name in ("attention/query/kernel", "attention/key/kernel", "attention/value/kernel",
                     "attention/attention_output/kernel", "mlp_dense_0/kernel", "mlp_dense_1/kernel"):
            assert f"encoderblock_{i}/{name}" in split
    assert "head/kernel" in split
    assert not any(re.search(r"norm|embedding", path) for path in split if "/" in path and "adam" not in path)
    # AdamW's two slots of each split variable are split the same way.
    for path in split:
        if not path.startswith("adam"):
            slot = path.replace("/", "_")
            slots = [p for p in shardings if p.startswith("adam") and p.split("/", 1)[1].startswith(slot + "_")]
            assert len(slots) == 2 and all(shardings[p]["spec"] == shardings[path]["spec"] for p in slots), path


@JAX
def test_per_device_memory_falls_as_the_model_axis_grows(mesh):
    held = {int(size): bytes_ for size, bytes_ in mesh["bytes_per_device"].items()}
    assert held[1] == mesh["total_bytes"]  # model axis 1: every device holds everything
    assert held[1] > held[2] > held[4] > held[8]
    assert held[8] < 0.25 * held[1]  # the rest: replicated embeddings, norms, biases


@JAX
def test_checkpoints_move_between_a_mesh_and_one_device(mesh):
    assert mesh["sharded_to_single"] and mesh["sharded_keras_to_single"]
    assert mesh["single_device_after_load"] == ["cpu:0"]
    assert mesh["single_to_sharded"]
    assert mesh["specs_after_load"]["encoderblock_0/mlp_dense_0/kernel"] == [None, "model"]


@JAX
def test_giants_are_created_split_over_the_model_axis(mesh):
    for variant, built in mesh["giants"].items():
        assert built["total_bytes"] >= built["params"] * 4
        # The split kernels are ~99% of a block: one device holds little more than an eighth.
        assert built["bytes_per_device"] < 0.15 * built["total_bytes"], variant


@JAX
def test_two_processes_fit_as_one(mesh):
    one = mesh["fit_losses"]
    port = _free_port()
    workers = [
        subprocess.Popen([sys.executable, WORKER, "fit_losses", str(i), "2", f"127.0.0.1:{port}"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(4))
        for i in range(2)
    ]
    try:
        outputs = [worker.communicate(timeout=300) for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
    two = [_result(subprocess.CompletedProcess([], worker.returncode, out, err)) for worker, (out, err) in
           zip(workers, outputs)]
    assert one["mesh"] == "mesh batch 4 x model 2 (8 devices, 1 process)"
    for result in two:
        assert (result["processes"], result["devices"], result["local_devices"]) == (2, 8, 4)
        # Measured equal to 3e-7 (float32 sums in another order).
        np.testing.assert_allclose(result["losses"], one["losses"], rtol=1e-5)


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# A training process killed with SIGKILL during epoch 1 under a 2x4 mesh; the same command resumes it.
KILLER = """
import os, signal, sys
from keras_vit import cli
from keras_vit.training import callbacks
from keras_vit.training.callbacks import AtomicBackupAndRestore as Backup

callbacks.BACKUP_SECONDS = 0.0  # a backup at every epoch: the kill comes seconds into the run
on_batch = Backup.on_train_batch_end
Backup.on_train_batch_end = lambda self, batch, logs=None: (
    os.kill(os.getpid(), signal.SIGKILL) if self.epoch == 1 and batch == 1 else on_batch(self, batch, logs))
sys.exit(cli.main(sys.argv[1:]))
"""


@JAX
def test_resume_after_a_kill_under_a_mesh(tmp_path):
    command = [
        "train", "--variant", "tiny", "--num-heads", "4", "--image-size", "16", "--epochs", "2", "--batch-size", "16",
        "--max-train-examples", "64", "--max-test-examples", "16", "--precision", "float32",
        "--strategy", "model_parallel", "--mesh", "2x4", "--run-dir", str(tmp_path / "run"),
        "--output-dir", str(tmp_path / "out"), "--no-export", "--quiet",
    ]

    def run(args):
        return subprocess.run([sys.executable] + args, capture_output=True, text=True, env=_env(8), cwd=str(tmp_path),
                              timeout=300)

    killed = run(["-c", KILLER] + command)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    header = killed.stdout
    assert "per device; mesh batch 2 x model 4 (8 devices, 1 process); weights + optimizer state" in header
    assert json.loads((tmp_path / "run" / "backup" / "backup.json").read_text())["epoch"] == 1
    resumed = run(["-c", "import sys; from keras_vit import cli; sys.exit(cli.main(sys.argv[1:]))"] + command)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from epoch 1 of 2" in resumed.stdout
    summary = json.loads((tmp_path / "out" / "vit.json").read_text())
    assert summary["steps_done"] == 8 and summary["settings"]["mesh"] == "2x4"


@JAX
def test_keras_vit_train_in_two_processes(tmp_path):
    """The command line's multi-process flags, end to end: 20 test images at batch 16 split between
    two processes by whole batches only (a partial batch has no static size to split), so 4 are
    named as not scored rather than failing or vanishing."""
    port = _free_port()
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "keras_vit.cli", "train", "--variant", "tiny", "--num-heads", "4", "--image-size", "16",
             "--epochs", "1", "--batch-size", "16", "--max-train-examples", "32", "--max-test-examples", "20",
             "--precision", "float32", "--strategy", "model_parallel", "--mesh", "4x2",
             "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(i),
             "--run-dir", str(tmp_path / f"run{i}"), "--output-dir", str(tmp_path / f"out{i}"), "--no-export", "--quiet"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(4), cwd=str(tmp_path))
        for i in range(2)
    ]
    try:
        outputs = [worker.communicate(timeout=400) for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
    for worker, (out, err) in zip(workers, outputs):
        assert worker.returncode == 0, err[-3000:]
        assert "mesh batch 4 x model 2 (8 devices, 2 processes)" in out
        assert "on 16 examples (4 beyond the last whole batch not scored" in out
    summaries = [json.loads((tmp_path / f"out{i}" / "vit.json").read_text()) for i in range(2)]
    assert summaries[0]["test_loss"] == summaries[1]["test_loss"] and summaries[0]["steps_done"] == 2


# Without a mesh: the layout rules and the refusals.

@JAX
@pytest.mark.parametrize("variant", sorted(STRUCTURE_ROWS))  # the rules read weight names, alike within a structure
def test_layout_rules_cover_every_structure(variant):
    """Each variable matches at most one rule; every block's attention and MLP kernels are split."""
    from helpers import reduced_variant_kwargs

    model = keras_vit.ViT(variant, **reduced_variant_kwargs(variant, narrow=True))  # the names suffice
    split = {v.path for v in model.variables if "model" in distribution.layout_of(v.path, tuple(v.shape), 1)}
    for name in ("query", "key", "value", "attention_output"):
        assert f"encoderblock_0/attention/{name}/kernel" in split
    assert {"encoderblock_0/mlp_dense_0/kernel", "encoderblock_0/mlp_dense_1/kernel", "head/kernel"} <= split


def test_unknown_and_uneven_variables_are_replicated():
    assert distribution.layout_of("my_layer/kernel", (64, 64), 4) == (None, None)
    assert distribution.layout_of("encoderblock_0/layer_scale/gamma", (64,), 4) == (None,)
    assert distribution.layout_of("head/kernel", (768, 21843), 4) == (None, None)  # 21,843 classes: odd
    assert distribution.layout_of("encoderblock_0/mlp_gate/kernel", (64, 256), 4) == (None, "model")


def test_a_plan_that_does_not_fit_names_the_mesh_that_would():
    from keras_vit.training import memory

    e14 = [memory.Block(257, 1792, 16, 15360)] * 56
    params, gib16 = 3_807_214_312, (16 * memory.GIB, "test")
    # Data parallel holds 56.7 GiB of weights + AdamW per device; a model axis of 4 holds 14.2, and
    # float32 activations (no rematerialisation) of 1.5 GiB an example leave room for 1 per device.
    with pytest.raises(ValueError, match=r"per device on mesh 8x1 .* Flags that would fit: --mesh 2x4 --batch-size 2 "
                                         r"\(--strategy model_parallel\)"):
        memory.check_training_memory(e14, params, 2, 224, 14, available=gib16, mesh=(8, 1))
    fits = memory.check_training_memory(e14, params, 1, 224, 14, available=gib16, mesh=(2, 4))
    assert fits.total < 16 * memory.GIB
    g14 = [memory.Block(257, 1408, 16, 6144)] * 40  # fits at the same global batch on 4x2
    with pytest.raises(ValueError, match=r"Flags that would fit: --mesh 4x2 \(--strategy model_parallel\)"):
        memory.check_training_memory(g14, 1_012_611_432, 4, 224, 14, available=gib16, mesh=(8, 1))


def test_mesh_shapes_are_checked():
    assert distribution.parse_mesh("2X4") == (2, 4)
    for bad in ("2x", "0x8", "2x4x1", 8):
        with pytest.raises(ValueError, match="Expected BATCHxMODEL"):
            distribution.parse_mesh(bad)


def test_mesh_strategies_are_refused_on_tensorflow(capsys, tmp_path):
    from keras_vit import cli
    from keras_vit.training import distribute

    with pytest.raises(ValueError, match="strategy='model_parallel' needs keras.distribution on KERAS_BACKEND=jax"):
        distribute.get_strategy("model_parallel")
    with pytest.raises(ValueError, match="applies to strategy 'data_parallel' or 'model_parallel'"):
        distribute.get_strategy("mirrored", mesh="2x4")
    code = cli.main(["train", "--variant", "tiny", "--strategy", "data_parallel", "--epochs", "1",
                     "--run-dir", str(tmp_path / "run"), "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "KERAS_BACKEND=jax" in err


@JAX
def test_tf_distribute_strategies_are_refused_on_jax():
    from keras_vit.training import distribute

    with pytest.raises(ValueError, match="strategy='mirrored' needs tf.distribute on KERAS_BACKEND=tensorflow"):
        distribute.get_strategy("mirrored")
    with pytest.raises(ValueError, match=r"needs 8 devices, and there are 1.*1x1"):
        distribute.get_strategy("model_parallel", mesh="2x4")
