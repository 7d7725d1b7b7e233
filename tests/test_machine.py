"""Every machine-dependent default, each branch forced: the rules, then `keras-vit train` end to end.

CI runs on one kind of machine; users on all kinds. `keras_vit.machine.detect` is replaced by a
`Machine` of the branch under test, so a CPU without bfloat16 instructions also runs what a
GPU, a TPU or an AVX-512 BF16 CPU would pick, exports included.
"""

from __future__ import annotations

import os
import re
import stat

import keras
import numpy as np
import pytest

from keras_vit import cli, export, machine
from keras_vit.machine import Machine
from keras_vit.training import distribute

GIB = 2**30
AVX2 = frozenset({"avx", "avx2", "fma"})
AVX512_BF16 = frozenset({"avx2", "avx512f", "avx512_bf16"})
AMX = frozenset({"avx512f", "amx_tile", "amx_bf16"})


def _cpuinfo(tmp_path, flags):
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nmodel name\t: Fake CPU\nflags\t\t: fpu sse2 {' '.join(sorted(flags))}\n\n")
    return str(path)


# --- the rules, one branch at a time -------------------------------------------------------

@pytest.mark.backends("tensorflow", "jax", "torch")
@pytest.mark.parametrize("forced, expected", [
    (Machine("tpu"), "mixed_bfloat16"),
    (Machine("gpu", 9), "mixed_bfloat16"),
    (Machine("gpu", 8), "mixed_bfloat16"),
    (Machine("gpu", 7), "mixed_float16"),
    (Machine("cpu", cpu_flags=AVX512_BF16), "float32"),
    (Machine("cpu", cpu_flags=AVX2), "float32"),
    (Machine("cpu"), "float32"),
])
def test_precision_per_branch(forced, expected):
    assert machine.default_precision(forced) == expected
    assert distribute.resolve_precision("auto", forced) == expected
    assert distribute.resolve_precision("mixed_float16", forced) == "mixed_float16"  # explicit wins


# AMX: by Keras backend and token width (None: unknown).
@pytest.mark.parametrize("backend, width, expected", [
    ("torch", 128, "mixed_bfloat16"),
    ("torch", None, "mixed_bfloat16"),
    ("tensorflow", machine.TENSORFLOW_AMX_MIN_WIDTH, "mixed_bfloat16"),
    ("tensorflow", 768, "mixed_bfloat16"),
    ("tensorflow", machine.TENSORFLOW_AMX_MIN_WIDTH - 1, "float32"),
    ("tensorflow", None, "float32"),
    ("jax", 768, "float32"),
])
def test_precision_on_amx_by_backend_and_width(backend, width, expected):
    precision, reason = machine.precision_choice(Machine("cpu", cpu_flags=AMX), backend, width)
    assert precision == expected
    assert "AMX" in reason and (backend != "tensorflow" or str(width if width is not None else "unknown") in reason)
    # The same CPU without AMX (AVX-512 BF16 only) keeps float32 on every backend and width.
    assert machine.precision_choice(Machine("cpu", cpu_flags=AVX512_BF16), backend, width)[0] == "float32"


def test_the_current_backend_is_the_rules_default():
    amx = Machine("cpu", cpu_flags=AMX)
    assert machine.default_precision(amx, width=768) == machine.default_precision(amx, keras.backend.backend(), 768)
    assert distribute.choose_precision("auto", amx, 768) == machine.precision_choice(amx, keras.backend.backend(), 768)
    assert distribute.choose_precision("float32", amx, 768) == ("float32", "given")


# jit_compile per backend: (CPU float32, CPU mixed_bfloat16, CPU with collectives, GPU mixed)
JIT_DEFAULTS = {"tensorflow": (True, False, False, True), "jax": (True, True, True, True),
                "torch": (False, False, False, False)}


@pytest.mark.backends("tensorflow", "jax", "torch")
def test_jit_compile_per_branch():
    expected = JIT_DEFAULTS[keras.backend.backend()]
    cpu, gpu = Machine("cpu", cpu_flags=AVX512_BF16), Machine("gpu", 8)
    got = (machine.default_jit_compile(cpu, "float32", False), machine.default_jit_compile(cpu, "mixed_bfloat16", False),
           machine.default_jit_compile(cpu, "float32", True), machine.default_jit_compile(gpu, "mixed_bfloat16", False))
    assert got == expected
    assert distribute.default_jit_compile("float32", distribute.get_strategy("default"), cpu) is expected[0]


def test_check_jit_compile_refuses_xla_collectives_on_cpu_only():
    class TwoReplicas:
        num_replicas_in_sync = 2

    with pytest.raises(ValueError, match="jit_compile=True cannot be used"):
        distribute.check_jit_compile(True, TwoReplicas(), Machine("cpu"))
    distribute.check_jit_compile(True, TwoReplicas(), Machine("gpu", 8))  # GPUs all-reduce under XLA


@pytest.mark.backends("tensorflow", "jax", "torch")
def test_detect_reads_the_cpu_flags_and_memory(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no nvidia-smi
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:   12582912 kB\n")
    found = machine.detect(cpuinfo=_cpuinfo(tmp_path, AVX512_BF16), meminfo=str(meminfo))
    assert found.cpu_flags >= AVX512_BF16 and found.accelerator == "cpu"
    assert found.memory == (12 * GIB, "MemAvailable in /proc/meminfo")
    unknown = machine.detect(cpuinfo=str(tmp_path / "missing"), meminfo=str(tmp_path / "missing"))
    assert unknown.cpu_flags == frozenset() and unknown.memory[0] is None


def test_memory_branches(tmp_path, monkeypatch):
    # A GPU that nvidia-smi reports: its free memory; hidden by CUDA_VISIBLE_DEVICES: the host's.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 40960\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemAvailable:   1048576 kB\n")
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert machine.available_memory(str(meminfo)) == (40 * GIB, "free memory of GPU 0 (nvidia-smi)")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert machine.available_memory(str(meminfo)) == (GIB, "MemAvailable in /proc/meminfo")
    assert machine.available_memory(str(tmp_path / "missing")) == (None, "no memory figure on this machine")


def test_memory_check_uses_the_machines_figure(monkeypatch):
    from keras_vit.training import memory

    blocks = [memory.Block(3137, 128, 4, 256)] * 6
    monkeypatch.setattr(machine, "detect", lambda: Machine(memory=(16 * GIB, "forced")))
    with pytest.raises(ValueError, match=r"exceeds the 16.0 GiB available \(forced\)"):
        memory.check_training_memory(blocks, 800_000, 256, 224, 4)
    monkeypatch.setattr(machine, "detect", lambda: Machine())  # no figure: no refusal on a guess
    assert memory.check_training_memory(blocks, 800_000, 256, 224, 4).total > 16 * GIB


def test_machine_refuses_what_it_cannot_be():
    with pytest.raises(ValueError, match="accelerator='npu'"):
        Machine("npu")
    with pytest.raises(ValueError, match="gpu_capability"):
        Machine("gpu")


# --- `keras-vit train` end to end under each branch, exports included ----------------------

# branch: (machine, precision, XLA, extra train arguments)
BRANCHES = {
    "cpu_avx2": (Machine("cpu", cpu_flags=AVX2, memory=(24 * GIB, "forced")), "float32", "on", []),
    "cpu_avx512_bf16": (Machine("cpu", cpu_flags=AVX512_BF16, memory=(24 * GIB, "forced")), "float32", "on", []),
    # A model as wide as the AMX rule's threshold: bfloat16 through oneDNN, XLA off.
    "cpu_amx_wide": (Machine("cpu", cpu_flags=AMX, memory=(24 * GIB, "forced")), "mixed_bfloat16", "off",
                     ["--hidden-size", str(machine.TENSORFLOW_AMX_MIN_WIDTH), "--num-heads", "2", "--mlp-dim", "64"]),
    "gpu_ampere": (Machine("gpu", 8, memory=(80 * GIB, "forced")), "mixed_bfloat16", "on", []),
    "gpu_volta": (Machine("gpu", 7, memory=(16 * GIB, "forced")), "mixed_float16", "on", []),
}


# One end-to-end run per precision the branches give: cpu_avx2 trains the same float32 + XLA
# model as cpu_avx512_bf16, and runs end to end (header included) in the failed-export test below.
@pytest.mark.parametrize("branch", sorted(set(BRANCHES) - {"cpu_avx2"}))
def test_train_end_to_end_with_exports_per_branch(branch, tmp_path, monkeypatch, capsys):
    forced, precision, xla, extra = BRANCHES[branch]
    monkeypatch.setattr(machine, "detect", lambda *args, **kwargs: forced)
    out = tmp_path / "out"
    code = cli.main([
        "train", "--variant", "tiny", "--image-size", "28", "--num-layers", "1", "--epochs", "1", "--batch-size", "32",
        "--max-train-examples", "64", "--max-test-examples", "32", "--quiet",
        "--run-dir", str(tmp_path / "run"), "--output-dir", str(out), "--name", "m", *extra,
    ])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert re.search(rf"precision {precision} \([^)]*\), XLA {xla}", printed.out), printed.out
    trained = keras.saving.load_model(out / "m.keras", compile=False)
    assert trained.get_layer("encoderblock_0").dtype_policy.name == precision
    images = np.random.default_rng(0).integers(0, 256, (4, 28, 28, 1)).astype("float32")  # the sample is grey
    # Exports compute in float32: compare with the float32 copy of the trained model.
    expected = np.asarray(export._common.float32_model(trained)(images))
    for path in (out / "m.tflite", out / "m" / "1"):
        np.testing.assert_allclose(export.load_predictor(str(path)).predict(images), expected, atol=1e-5)
    assert sorted(os.listdir(out)) == ["m", "m.json", "m.keras", "m.labels.txt", "m.tflite"]


def test_a_failed_export_prints_one_paragraph_and_keeps_the_model(tmp_path, monkeypatch, capsys):
    """The converter's dump goes to the run's log; the paragraph names the format, cause and retry command."""

    class ConverterError(Exception):  # what tf.lite raises; not a ValueError
        pass

    real_tflite = export.tflite

    def failing_tflite(*args, **kwargs):
        os.write(2, b"loc(fused[...]): error: 'tf.Conv2D' op is neither a custom op nor a flex op\n" * 500)
        raise ConverterError("Could not translate MLIR to FlatBuffer.\n" + "module {\n" * 1000)

    monkeypatch.setattr(export, "tflite", failing_tflite)
    monkeypatch.setattr(machine, "detect", lambda *args, **kwargs: BRANCHES["cpu_avx2"][0])
    out, run = tmp_path / "out", tmp_path / "run"
    argv = ["train", "--variant", "tiny", "--image-size", "28", "--num-layers", "1", "--epochs", "1",
            "--batch-size", "32", "--max-train-examples", "64", "--max-test-examples", "32", "--quiet",
            "--run-dir", str(run), "--output-dir", str(out), "--name", "m"]
    code = cli.main(argv)
    printed = capsys.readouterr()
    err = printed.err
    assert code == 1
    assert "precision float32 (CPU without AMX: float32 ran fastest), XLA on" in printed.out  # the cpu_avx2 branch's defaults, end to end
    paragraph = err.strip()
    assert len(paragraph.splitlines()) == 1 and "neither a custom op" not in paragraph, paragraph[:2000]
    retry = f"keras-vit export {out / 'm.keras'} --tflite {out / 'm.tflite'} --overwrite"
    for part in ("The TFLite export failed", "ConverterError: Could not translate MLIR to FlatBuffer", retry,
                 str(run / "m.export.log")):
        assert part in paragraph, part
    log = (run / "m.export.log").read_text()
    assert "neither a custom op" in log and "module {" in log and "Traceback" in log
    assert (out / "m.keras").is_file() and (out / "m" / "1" / "saved_model.pb").is_file()
    assert not (out / "m.tflite").exists()
    # The paragraph's command works as printed.
    monkeypatch.setattr(export, "tflite", real_tflite)
    assert cli.main(retry.split()[1:]) == 0
    assert export.load_predictor(str(out / "m.tflite")).class_names[0] == "T-shirt/top"


def test_keras_vit_export_failure_is_one_paragraph_too(tmp_path, monkeypatch, capsys):
    import keras_vit

    model_path = str(tmp_path / "vit.keras")
    keras_vit.ViT("tiny", num_classes=2, preprocessing="unit").save(model_path)

    def failing_onnx(*args, **kwargs):
        os.write(2, b"tf2onnx: unsupported op dump\n" * 200)
        raise RuntimeError("Unsupported ops: Counter({'Foo': 1})")

    monkeypatch.setattr(export, "onnx", failing_onnx)
    assert cli.main(["export", model_path, "--onnx", str(tmp_path / "vit.onnx")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "dump" not in err
    assert "The ONNX export failed: RuntimeError: Unsupported ops" in err
    assert f"keras-vit export {model_path} --onnx {tmp_path / 'vit.onnx'}" in err
    assert "unsupported op dump" in (tmp_path / "vit.export.log").read_text()
    assert sorted(os.listdir(tmp_path)) == ["vit.export.log", "vit.keras"]
