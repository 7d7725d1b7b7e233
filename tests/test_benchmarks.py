"""The benchmark harness (`python -m benchmarks <subcommand>`) runs end to end on tiny settings and records what it did.

Its figures belong to benchmarks/RESULTS.md, not to tests: this only checks that the subcommands,
their set-ups and flags still work (Fashion-MNIST: 128 training images of the shipped sample in IDX files).
"""

from __future__ import annotations

import gzip
import importlib
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from keras_vit.data.fashion_mnist import load_sample

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _benchmark(name):
    """The harness module benchmarks/<name>.py (imported from this checkout, the tests' root)."""
    return importlib.import_module(f"benchmarks.{name}")


def _run_in_process(target, kwargs, env=None, timeout=None, echo=()):
    """`benchmarks.workers.run_worker` in this process: `target(**kwargs)`'s result, or its exception as
    {"error": ...}; arguments and result pass through JSON as they do to and from the real child.

    The real child process and its protocol: test_worker_protocol_returns_the_childs_result_or_its_error.
    """
    module, function = target.split(":")
    try:
        result = getattr(importlib.import_module(module), function)(**json.loads(json.dumps(kwargs)))
    except Exception as error:  # the child's traceback ends the same way: the error, as its result
        return {"error": f"{type(error).__name__}: {error}"}
    return json.loads(json.dumps(result))


@pytest.fixture
def in_process(monkeypatch):
    """`in_process(name)`: the harness module benchmarks/<name>.py with its workers run in this process
    (no TensorFlow import per child); tests/conftest.py restores the dtype policy a worker may set."""
    from benchmarks import workers

    def patched(name):
        module = _benchmark(name)
        for holder in (workers, module):  # a module may hold run_worker by name
            if hasattr(holder, "run_worker"):
                monkeypatch.setattr(holder, "run_worker", _run_in_process)
        return module

    return patched


@pytest.fixture(scope="module")
def script():
    return _benchmark("train_fashion_mnist")


def test_entry_point_lists_every_subcommand_and_the_readme_explains_each():
    from benchmarks.__main__ import SUBCOMMANDS

    listed = subprocess.run([sys.executable, "-m", "benchmarks"], cwd=ROOT, capture_output=True, text=True, check=True)
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    for name, (module, _) in SUBCOMMANDS.items():
        assert f"  {name} " in listed.stdout
        assert f"`{name}`" in readme, name
        assert hasattr(_benchmark(module), "main")
    unknown = subprocess.run([sys.executable, "-m", "benchmarks", "nope"], cwd=ROOT, capture_output=True, text=True)
    assert unknown.returncode == 2 and "unknown subcommand 'nope'" in unknown.stderr


def test_no_benchmark_edits_sys_path():
    sources = [path.read_text() for path in (ROOT / "benchmarks").glob("*.py")]
    assert sources and not any("sys.path" in source for source in sources)


@pytest.fixture(scope="module")
def idx_folder(tmp_path_factory):
    """The first images of the shipped sample, written as the four official IDX .gz files."""
    folder = tmp_path_factory.mktemp("fashion-mnist")
    (x_train, y_train), (x_test, y_test) = load_sample()
    arrays = {"train": (x_train[:128], y_train[:128]), "t10k": (x_test[:64], y_test[:64])}
    for prefix, (images, labels) in arrays.items():
        for kind, array in (("images-idx3", images), ("labels-idx1", labels)):
            dims = b"".join(d.to_bytes(4, "big") for d in array.shape)
            with gzip.open(folder / f"{prefix}-{kind}-ubyte.gz", "wb") as f:
                f.write((2048 + array.ndim).to_bytes(4, "big") + dims + array.astype("uint8").tobytes())
    return str(folder)


def test_hybrid_set_up_with_translation_writes_its_result(script, idx_folder, tmp_path):
    output = tmp_path / "result.json"
    report = script.main([
        "--data", idx_folder, "--recipe", "hybrid", "--epochs", "2", "--batch-size", "32",
        "--budget-minutes", "5", "--jit-compile", "off", "--num-layers", "1", "--translate", "0.1",
        "--output", str(output), "--verbose", "0",
    ])
    saved = json.loads(output.read_text())
    assert saved == json.loads(json.dumps(report))
    assert not os.path.exists(str(output) + ".tmp")
    assert 0.0 <= saved["test_accuracy"] <= 1.0
    assert saved["epochs_done"] == 2 and saved["steps_per_epoch_done"] == [4, 4]
    assert saved["model"]["num_layers"] == 1 and saved["translate"] == 0.1
    assert "RandomTranslation" in saved["settings"]["augment"]
    assert saved["stem"] == {"filters": [32, 64, 128], "strides": [2, 2, 2]}


@pytest.mark.parametrize("flags, message", [
    (["--augment", "flip", "--translate", "0.1"], "--translate replaces the preset"),
    (["--translate", "1.5"], "--translate 1.5: expected a fraction of the image between 0 and 1"),
])
def test_bad_translate_flags_are_refused(script, idx_folder, capsys, flags, message):
    with pytest.raises(SystemExit) as error:
        script.main(["--data", idx_folder, "--recipe", "hybrid", *flags])
    assert error.value.code == 2
    assert message in capsys.readouterr().err


def test_speed_comparison_models_output_logits_as_their_loss_expects():
    """The speed benchmarks train with a from_logits loss; a softmax head would train on probabilities."""
    from keras_vit.models.head import head_activation

    workloads = _benchmark("workloads")
    workload = dict(workloads.WORKLOADS["train_default"], layers=1, hidden=32, heads=2, mlp=64)
    model, _ = workloads.keras_model("keras_vit", workload)
    assert head_activation(model) is None
    assert model.output_shape == (None, workload["classes"])
    # keras_vit_fused / keras_vit_unfused are built with the attention path as the argument says, keras_vit as
    # shipped ("auto": fused where machine.default_fused_attention says so).
    for impl, fused in (("keras_vit_fused", True), ("keras_vit_unfused", False), ("keras_vit", "auto")):
        model, _ = workloads.keras_model(impl, workload)
        assert model.get_layer("encoderblock_0").attention.fused == fused, impl


@pytest.mark.backends("tensorflow", "jax", "torch")
def test_backends_benchmark_quick_run_fits_on_this_backend(tmp_path, monkeypatch):
    """The jobs run in this process, which has the backend they ask for (KERAS_BACKEND of each job, recorded)."""
    import keras

    module = _benchmark("backends")
    backend = keras.backend.backend()
    asked = []

    def in_process(target, kwargs, env=None, **_):
        asked.append((target, env["KERAS_BACKEND"]))
        return _run_in_process(target, kwargs)

    monkeypatch.setattr(module, "run_worker", in_process)
    results = module.main(["--quick", "--backends", backend, "--out", str(tmp_path)])
    # the roofline's libraries (XLA, oneDNN, NumPy, PyTorch) do not depend on the Keras backend
    assert asked == [("benchmarks.jobs:roofline_job", "tensorflow"), ("benchmarks.jobs:keras_job", backend)]
    assert [r.get("error") for r in results] == [None, None]
    roofline, fit = results
    assert roofline["kind"] == "roofline" and roofline["gflops"] > 0
    assert fit["backend"] == backend and fit["workload"] == "tiny" and fit["jit"] == (backend != "torch")
    assert (fit["first_steps"], fit["steps"], fit["loss_finite"]) == (1, 2, True)
    assert fit["step_p10_s"] <= fit["step_s"] <= fit["step_p90_s"]
    assert fit["images_per_s"] == pytest.approx(8 / fit["step_s"])
    (table,) = tmp_path.glob("backends-backends-*.md")
    assert f"| {module.label(fit)} | {fit['images_per_s']:.1f} " in table.read_text()
    (lines,) = tmp_path.glob("backends-backends-*.jsonl")
    machine, *logged = [json.loads(line) for line in lines.read_text().splitlines()]
    assert logged == json.loads(json.dumps(results))
    assert machine["kind"] == "machine" and machine["hardware"] in lines.name and "flags" in machine


def test_budget_probes_reach_their_workers_runs(tmp_path, in_process):
    """The budget harness's probes (RESULTS section 10): a recipe change, the pad in place of the
    resize, builder arguments and stem arguments, each reaching the model its worker builds. One probe
    runs through the harness (its worker in this process) for the table, curve and figure; the others
    are built only (`train_one(build_only=True)`: the run's settings and model size, no step), which
    gives the trained run's settings exactly, as the first probe shows."""
    from keras_vit.models import stems

    module = in_process("budget")
    limits = dict(max_train_examples=256, max_test_examples=64, epochs=1, jit_compile=False)
    assert module.main(["--dataset", "sample", "--budget-minutes", "0.3", "--max-train-examples", "256",
                        "--max-test-examples", "64", "--epochs", "1", "--jit-compile", "off", "--setups", "plain_lr2x",
                        "--out", str(tmp_path)]) == 0
    (lines,) = tmp_path.glob("budget-*.jsonl")
    _, lr2x = [json.loads(line) for line in lines.read_text().splitlines()]
    assert "error" not in lr2x, lr2x
    built = module.train_one("sample", 18, "plain_lr2x", build_only=True, **limits)
    assert built == {key: lr2x[key] for key in built}
    pad, sincos, stem4, plain = (module.train_one("sample", 18, setup, build_only=True, **limits)
                                 for setup in ("default_pad", "plain_sincos_gap", "default_wd_stem4", "plain"))
    # the sample's grey images: one channel under the rule of the day, three in the probes from before it
    assert (plain["channels"], lr2x["channels"], pad["channels"]) == (1, 3, 3)
    assert (lr2x["recipe"], lr2x["stem"], lr2x["augment"]) == ("plain_lr2x", False, "flip")
    # The probe's rate (not the rule's x2 of it) at the batch of 256 examples: 64, below 128 by the square root.
    assert lr2x["learning_rate"] == pytest.approx(4e-3 * 128 / 512 * (64 / 128) ** 0.5)
    assert (lr2x["attention_init"], lr2x["pooling"]) == ("random", "token")  # as before the plain ViT's rules
    assert (pad["stem"], pad["image_size"], pad["resize"], lr2x["resize"]) == (True, 32, "pad", "bilinear")
    # fixed sin-cos position embeddings: no learned embedding of 16 patches + the class token, width 128
    assert (sincos["pooling"], lr2x["params"] - sincos["params"]) == ("gap", 17 * 128)
    three = stems.conv_stem((32, 64, 128), (2, 2, 2)).count_params()  # the stem the probes of its time ran
    extra = stems.conv_stem((16, 32, 64, 128), (1, 2, 2, 2)).count_params() - three
    assert stem4["params"] - pad["params"] == extra  # the probe's stem, with its full-resolution convolution
    assert len(lr2x["curve"]) == 1 and len(lr2x["curve"][0]) == 3  # seconds, validation, training accuracy
    assert list(tmp_path.glob("budget-*.png"))


def _transfer_work(module, tmp_path, images, per_class):
    """`transfer prepare` on CIFAR-10's class folders of `images` random 32 px JPEGs each; the work folder."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for name in module.PRETRAIN_CLASSES + module.ADAPT_CLASSES:
        (tmp_path / "cifar" / name).mkdir(parents=True)
        for i in range(images):
            Image.fromarray(rng.integers(0, 255, (32, 32, 3)).astype("uint8")).save(tmp_path / "cifar" / name / f"{i}.jpg")
    work = str(tmp_path / "work")
    module.main(["prepare", "--source", str(tmp_path / "cifar"), "--work", work, "--train-per-class", str(per_class),
                 "--test-per-class", str(per_class)])
    return work


def test_transfer_benchmark_pretrains_writes_both_folders_and_adapts(tmp_path, in_process):
    """The transfer harness on 10 classes of 12 tiny images: every step, the folders other programs read, a
    result line per set-up (the adaptation's workers in this process)."""
    module = in_process("transfer")
    work = _transfer_work(module, tmp_path, images=12, per_class=4)
    # Scratch reads no backbone: it runs before one is pre-trained.
    module.main(["adapt", "--work", work, "--budget-minutes", "0.5", "--epochs", "1", "--setups", "scratch",
                 "--out", str(tmp_path / "out0")])
    (lines,) = (tmp_path / "out0").glob("transfer-*.jsonl")
    _, scratch = [json.loads(line) for line in lines.read_text().splitlines()]  # the machine, then scratch: no backbone
    assert (scratch["setup"], scratch["epochs_done"], scratch["num_test"]) == ("scratch", 1, 20), scratch
    module.main(["pretrain", "--work", work, "--budget-minutes", "0.5", "--epochs", "1", "--backbone", "smoke"])
    assert {"timm", "hf"} <= set(os.listdir(os.path.join(work, "backbone")))
    assert "preprocessor_config.json" in os.listdir(os.path.join(work, "backbone", "hf"))
    module.main(["adapt", "--work", work, "--budget-minutes", "0.5", "--epochs", "1", "--setups", "probe_timm",
                 "--out", str(tmp_path / "out")])
    (lines,) = (tmp_path / "out").glob("transfer-*.jsonl")
    _, pretrained, probe, backbone = [json.loads(line) for line in lines.read_text().splitlines()]
    assert (pretrained["epochs_done"], pretrained["backbone"]) == (1, "smoke")
    assert (probe["setup"], probe["adapt"], probe["steps_done"], probe["num_test"]) == ("probe_timm", "probe", 0, 20)
    assert set(backbone["fewshot"]) == {"1"} and 0 <= backbone["knn"] <= 1, backbone
    # --weights: a checkpoint elsewhere, read in place of the set-up's folder (moved away, so nothing else is).
    elsewhere = str(tmp_path / "elsewhere")
    os.rename(os.path.join(work, "backbone", "timm"), elsewhere)
    module.main(["adapt", "--work", work, "--budget-minutes", "0.5", "--epochs", "1", "--setups", "probe_timm",
                 "--weights", elsewhere, "--out", str(tmp_path / "out2")])
    (lines,) = (tmp_path / "out2").glob("transfer-*.jsonl")
    _, _, weights, probe, backbone = [json.loads(line) for line in lines.read_text().splitlines()]
    assert weights == {"setup": "weights", "weights": elsewhere}
    assert probe["setup"] == "probe_timm" and "error" not in probe and "error" not in backbone, (probe, backbone)


def test_transfer_benchmark_pretrains_with_timm_and_keras_vit_reads_what_timm_wrote(tmp_path, in_process):
    """`pretrain-timm` (timm on torch, as on a lent GPU) writes a timm Hub folder with timm's own
    save_for_hf; keras_vit loads it to timm's logits, and `folders` writes the same model as a
    Hugging Face folder (the adaptation's workers in this process)."""
    from _timm_import import import_timm

    timm = import_timm()
    if timm is None:
        pytest.skip("timm is not installed")
    import torch

    import keras_vit

    module = in_process("transfer")
    work = _transfer_work(module, tmp_path, images=6, per_class=2)
    rng = np.random.default_rng(0)
    module.main(["pretrain-timm", "--work", work, "--backbone", "smoke", "--max-steps", "14", "--batch-size", "8",
                 "--compile", "off"])
    with open(os.path.join(work, "backbone", "pretrain.json")) as f:
        summary = json.load(f)
    assert (summary["backbone"], summary["steps_done"]) == ("smoke", 14)
    folder = os.path.join(work, "backbone", "timm")
    config = json.load(open(os.path.join(folder, "config.json")))
    assert config["architecture"] == "vit_tiny_patch16_224" and config["pretrained_cfg"]["mean"] == [0.5] * 3
    module.main(["folders", "--work", work])
    images = rng.integers(0, 255, (3, 32, 32, 3)).astype("float32")
    reference = timm.create_model("local-dir:" + folder, pretrained=True).eval()
    with torch.no_grad():
        expected = reference(torch.from_numpy((images / 127.5 - 1).transpose(0, 3, 1, 2))).numpy()
    for source in ("timm", "hf"):
        model = keras_vit.ViT(weights=os.path.join(work, "backbone", source), preprocessing="symmetric",
                              classifier_activation=None)
        assert model.vit_config["hidden_size"] == module.BACKBONES["smoke"]["hidden_size"]
        np.testing.assert_allclose(np.asarray(model(images)), expected, atol=1e-5)
    # The peer of issue 50: timm's cross-validated probe, then LP-FT, on the same folders.
    module.main(["adapt", "--work", work, "--budget-minutes", "0.2", "--epochs", "1", "--setups", "timm_lpft",
                 "--out", str(tmp_path / "out")])
    (lines,) = (tmp_path / "out").glob("transfer-*.jsonl")
    peer = [json.loads(line) for line in lines.read_text().splitlines()][2]
    assert (peer["setup"], peer["steps_done"], peer["num_test"]) == ("timm_lpft", 7, 10), peer
    assert 0 <= peer["probe_accuracy"] <= 1 and 0 <= peer["accuracy"] <= 1 and peer["probe_decay"] > 0
    # It stops at the budget's wall time, whatever its calibration planned (it once ran 392 s of 180).
    from benchmarks import transfer_timm_peer

    late = transfer_timm_peer.adapt_timm(work, module.ADAPT_CLASSES, budget_seconds=1e-3, seed=0)
    assert (late["steps_done"], late["stopped_on_time"], late["planned_steps"]) == (1, True, None), late


def test_the_timm_peer_builds_a_conv_stem_backbone_to_keras_vits_features(tmp_path):
    """A conv stem + ViT (the `budget` backbone, which no timm layout holds) written for the peer: timm's
    VisionTransformer behind a HybridEmbed of the stem in torch gives keras_vit's features, in inference and
    in training mode (BatchNorm on the batch), on an odd side too (TensorFlow pads "same" at the end)."""
    from _timm_import import import_timm

    timm = import_timm()
    if timm is None:
        pytest.skip("timm is not installed")
    import keras
    import torch

    import keras_vit
    from benchmarks import transfer, transfer_timm_peer
    from keras_vit.models import stems

    rng = np.random.default_rng(0)
    model = keras_vit.ViT(patch_size=1, hidden_size=32, num_layers=2, num_heads=2, mlp_dim=64, input_shape=(32, 32, 3),
                          backbone=stems.conv_stem((8, 16, 16), (2, 2, 1)), num_classes=5, preprocessing="symmetric")
    for weight in model.weights:  # BatchNorm statistics and biases away from their initial values
        weight.assign(weight.numpy() + rng.normal(0, 0.05, weight.shape).astype("float32"))
    for layer in model.get_layer("conv_stem").layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.moving_variance.assign(rng.uniform(0.5, 2, layer.moving_variance.shape).astype("float32"))
    folder = transfer.write_stem_folder(model, str(tmp_path / "timm_stem"))
    peer = transfer_timm_peer.timm_backbone(timm, torch, folder, num_classes=5)
    images = rng.integers(0, 255, (4, 32, 32, 3)).astype("float32")
    torch_images = torch.from_numpy((images / 127.5 - 1).transpose(0, 3, 1, 2))
    features = keras.Model(model.input, model.get_layer("pooling").output)
    for training in (False, True):
        peer.train(training)
        with torch.no_grad():
            got = peer.forward_head(peer.forward_features(torch_images), pre_logits=True).numpy()
        np.testing.assert_allclose(got, np.asarray(features(images, training=training)), atol=1e-4)
    odd = rng.normal(0, 1, (2, 31, 30, 3)).astype("float32")  # TensorFlow pads "same" at the end only
    peer.eval()
    with torch.no_grad():
        got = peer.patch_embed.backbone(torch.from_numpy(odd.transpose(0, 3, 1, 2))).numpy().transpose(0, 2, 3, 1)
    np.testing.assert_allclose(got, np.asarray(model.get_layer("conv_stem")(odd)), atol=1e-4)


def test_dense_benchmark_probes_a_weights_folder_and_its_random_control(tmp_path):
    """The dense harness on 16 canvases of 16 px from the shipped sample: one result line per backbone and block count."""
    import keras_vit
    from keras_vit import weights

    folder = str(tmp_path / "timm")
    weights.save_timm(keras_vit.ViT("tiny", num_classes=10, preprocessing="symmetric"), folder)
    results = _benchmark("dense").main(["--backbone", folder, "--train", "16", "--test", "8", "--canvas", "16",
                                        "--item-size", "8", "--epochs", "1", "--indices", "2", "--no-jit",
                                        "--out", str(tmp_path / "out")])
    assert [(r["backbone"], r["indices"]) for r in results] == [("trained", 2), ("random", 2)]
    assert all(0 <= r["mean_iou"] <= 1 and 0 <= r["pixel_accuracy"] <= 1 and len(r["train_loss"]) == 1 for r in results)
    (lines,) = (tmp_path / "out").glob("dense-*.jsonl")
    assert json.loads(lines.read_text().splitlines()[1])["train"] == 16
    assert "| trained | last 2 |" in next((tmp_path / "out").glob("dense-*.md")).read_text()


def test_iterator_teardown_benchmark_times_epochs_outside_their_steps():
    """Both settings' workers in this process, their steps not compiled by XLA (what is timed outside the steps
    does not depend on it)."""
    module = _benchmark("iterator_teardown")
    results = [dict(module.worker(setting, epochs=2, batch_size=64, train_examples=128, test_examples=128, num_layers=1,
                                  jit_compile=False), round=0)
               for setting in module.SETTINGS]
    assert [(r["setting"], r["autotune"]) for r in results] == [("package", False), ("autotune", True)]
    for r in results:
        assert len(r["epoch_s"]) == len(r["outside_steps_s"]) == 1  # the compiling first epoch is left out
        assert 0 <= r["outside_steps_s"][0] < r["epoch_s"][0] and r["pipeline_images_per_s"] > 0
    table = module.summarise(results)
    assert "| package | off |" in table and "| autotune | on |" in table


def test_matmul_bound_times_every_matrix_product_of_a_training_step():
    module = _benchmark("matmul_bound")
    w = dict(module.WORKLOADS["train_default"], layers=2, hidden=16, heads=2, mlp=32, batch=4)
    products = module.step_products(w)
    arch = {k: w[k] for k in ("patch", "hidden", "layers", "heads", "mlp", "image", "classes", "channels")}
    grid = (w["image"] // w["patch"]) ** 2
    patch_input_gradient = 2 * w["batch"] * grid * w["patch"] ** 2 * w["channels"] * w["hidden"]  # images need none
    flops = sum(2 * b * m * k * n for _, b, m, k, n, _, _ in products)
    assert flops == 3 * module.vit_flops(**arch) * w["batch"] - patch_input_gradient
    seconds = module.time_products(products, "xla", repeats=1)
    assert set(seconds) == {p[1:] for p in products} and all(t >= 0 for t in seconds.values())


def test_one_timing_engine_gives_training_figures_from_a_keras_fit():
    import keras

    from benchmarks import timing, workloads

    w = workloads.workload("tiny", {"layers": 1})
    model, _ = workloads.keras_model("keras_vit", w)
    workloads.compile_for_training(model, jit_compile=False)
    run = timing.keras_epochs(model, workloads.repeated_batch(w))
    figures = timing.train_figures(run, w["batch"], short=1, long=3, warm_short=True)
    assert (figures["first_steps"], figures["steps"], figures["loss_finite"]) == (1, 3, True)
    assert figures["step_p10_s"] <= figures["step_s"] <= figures["step_p90_s"]
    assert figures["images_per_s"] == pytest.approx(w["batch"] / figures["step_s"])
    assert figures["fit_overhead_s"] >= 0 and "step_s_by_difference" in figures
    assert isinstance(model, keras.Model)


def test_worker_protocol_returns_the_childs_result_or_its_error():
    from benchmarks.workers import run_worker

    ok = run_worker("benchmarks.workloads:parse_overrides", {"text": "patch=4"}, timeout=120)
    assert ok["patch"] == 4 and ok["process_s"] > 0
    failed = run_worker("benchmarks.workloads:workload", {"name": "nope"}, timeout=120)
    assert "workload='nope'" in failed["error"]


def test_compare_rows_cover_precisions_and_backends_and_judge_auto():
    compare = _benchmark("compare")
    labels = [label for label, *_ in compare.setups(["keras_vit", "timm"], ["auto", "float32", "bfloat16"],
                                                     ["tensorflow", "torch"])]
    assert labels == ["keras_vit auto", "keras_vit float32", "keras_vit bfloat16", "keras_vit[torch] auto",
                      "keras_vit[torch] float32", "keras_vit[torch] bfloat16", "timm float32", "timm bfloat16"]
    # `auto` is keras_vit's rule: keras-hub gets no such row.
    assert [label for label, *_ in compare.setups(["keras_hub"], ["auto", "float32"], ["tensorflow"])] == [
        "keras_hub float32"]

    def row(setup, rate, precision=None, jit=None):
        setting = {} if precision is None else {"precision": precision, "jit": jit}
        return {"workload": "train_default", "setup": setup, "images_per_s": rate, "version": "v", "round": 0,
                "step_s": 1.0, "first_fit_s": 1.0, "fit_overhead_s": 0.0, **setting}

    results = [row("keras_vit auto", 900.0, "float32", True), row("keras_vit float32", 1000.0, "float32", True),
               row("keras_vit bfloat16", 700.0, "mixed_bfloat16", False),
               row("keras_vit[torch] auto", 1100.0, "float32", False),
               row("keras_vit[torch] bfloat16", 1300.0, "mixed_bfloat16", False), row("timm float32", 1200.0)]
    table = compare.summarise(results, ["train_default"], labels)
    assert "best keras_vit: keras_vit[torch] bfloat16 1300.0 img/s = 1.08x the best peer (timm float32 1200.0)" in table
    # Same setting as the fastest row: a spread between processes, not a wrong pick.
    assert "keras_vit auto picks float32: the setting of the fastest set-up on its backend, keras_vit float32" in table
    assert "keras_vit[torch] auto picks float32: 0.85x the fastest set-up on its backend (keras_vit[torch] bfloat16" in table


def test_keras_jobs_resolve_auto_and_bfloat16_as_keras_vit_does():
    from benchmarks.jobs import resolve_setting
    from keras_vit.training import distribute

    assert resolve_setting("bfloat16", None, 128) == ("mixed_bfloat16", distribute.default_jit_compile("mixed_bfloat16"))
    assert resolve_setting("auto", True, 768) == (distribute.resolve_precision("auto", width=768), True)


def test_a_keras_jobs_auto_is_what_train_and_predict_pick_for_that_workload(monkeypatch):
    """A training job's trial times its own model and batch (not the default model at its width); an
    inference job's times the model's own copies, as `keras-vit predict` does."""
    from benchmarks import jobs
    from benchmarks.workloads import workload
    from keras_vit import machine as machine_lib

    seen = []

    def choice(machine, backend=None, width=None, workload=None, measure=None, budget_seconds=None, validation_shapes=0):
        seen.append((width, workload, measure))
        return "mixed_bfloat16", "measured"

    monkeypatch.setattr(machine_lib, "precision_choice", choice)
    monkeypatch.setattr(machine_lib, "detect", lambda: machine_lib.Machine(cpu_flags=frozenset({"amx_bf16"})))
    assert jobs.auto_precision("keras_vit", workload("train_ti4")) == ("mixed_bfloat16", "measured")
    width, trial, measure = seen[-1]
    assert (width, trial["mode"], trial["tokens"], trial["batch_size"], trial["num_layers"]) == (192, "train", 64, 128, 12)
    assert measure is None
    small = {"layers": 1, "hidden": 32, "heads": 2, "mlp": 64, "image": 32, "patch": 16}
    assert jobs.auto_precision("keras_vit", {**workload("infer_b16"), **small}) == ("mixed_bfloat16", "measured")
    width, trial, measure = seen[-1]
    assert (width, trial["mode"], trial["input_shape"], trial["batch_size"]) == (32, "predict", [32, 32, 3], 8)
    assert callable(measure)


def test_bfloat16_inference_benchmark_reports_agreement_and_speed(tmp_path, capsys, monkeypatch):
    """benchmarks/bfloat16_inference.py in this process (the entry point's dispatch: the first test)."""
    import tempfile

    from PIL import Image

    import keras_vit

    model = str(tmp_path / "m.keras")
    keras_vit.ViT("tiny", num_classes=3, num_layers=1, preprocessing="unit").save(model)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    for i in range(3):
        (tmp_path / "photos" / f"c{i}").mkdir(parents=True)
        Image.fromarray(np.random.default_rng(i).integers(0, 256, (40, 30, 3), dtype=np.uint8)).save(
            tmp_path / "photos" / f"c{i}" / f"{i}.jpg")
    _benchmark("bfloat16_inference").main(["--model", model, "--images", str(tmp_path / "photos"), "--batch", "2",
                                           "--rounds", "1", "--calls", "1", "--out", str(tmp_path / "out")])
    printed = capsys.readouterr().out
    for part in ("agreement, Keras model: top-1", "of 3 photos", "agreement, SavedModel", "| Keras bfloat16 |",
                 "| SavedModel bfloat16 (TF Serving's way) |", "CPU flags:"):
        assert part in printed, part
    assert len(list((tmp_path / "out").glob("bfloat16-*.md"))) == 1
    assert not list((tmp_path / "tmp").glob("bfloat16-*")), "the SavedModels' folder was left behind"


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="reads an earlier revision with git")
def test_ab_inference_runs_the_revisions_block_beside_this_checkouts(tmp_path, capsys):
    module = _benchmark("ab_inference")
    classes = module.revision_classes("HEAD")
    assert {name: cls.call.__code__.co_filename for name, cls in classes.items()} == {
        "TransformerBlock": "HEAD:keras_vit/layers/transformer_block.py",
        "MultiHeadSelfAttention": "HEAD:keras_vit/layers/self_attention.py"}
    assert module.main(["--revision", "HEAD", "--workload", "tiny", "--batch", "2", "--rounds", "2",
                        "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    for part in ("revision (HEAD):", "checkout (this checkout):", "checkout / revision speed:", "CPU:"):
        assert part in printed, part
    records = [json.loads(line) for line in next(tmp_path.glob("ab-inference-*.jsonl")).read_text().splitlines()]
    assert {r["copy"] for r in records if r.get("kind") == "error"} == {"revision", "checkout"}
    with pytest.raises(SystemExit, match="--revision 'no-such-revision'"):
        module.revision_classes("no-such-revision")


def test_pretrain_benchmark_pretrains_adapts_and_probes(tmp_path, monkeypatch):
    """benchmarks/pretrain.py in this process on tiny images: keras-vit pretrain and the supervised
    pre-training for real; the transfer benchmark's adaptation and probes (run by the transfer harness's
    tests) answered by stand-ins, to check what the harness hands them and makes of their results."""
    from PIL import Image

    from benchmarks import transfer, workers

    module = _benchmark("pretrain")
    rng = np.random.default_rng(0)
    for name in ("cat", "dog"):  # class folders: their labels unused by MAE, used by the supervised row
        folder = tmp_path / "work" / "pretrain" / name
        folder.mkdir(parents=True)
        for i in range(13):
            Image.fromarray(rng.integers(0, 255, (32, 32, 3)).astype("uint8")).save(folder / f"{i}.jpg")
    calls = []

    def in_process(target, kwargs, **_):
        calls.append((target, kwargs))
        if target == "benchmarks.pretrain:pretrain_mae":
            return module.pretrain_mae(**kwargs)
        if target == "benchmarks.transfer:pretrain":
            return transfer.pretrain(**kwargs)
        if target == "benchmarks.transfer:adapt_one":
            return {"setup": kwargs["setup"], "accuracy": 0.5}
        return {"fewshot": {"1": {"mean": 0.25}}, "knn": 0.75}

    monkeypatch.setattr(workers, "run_worker", in_process)
    work = str(tmp_path / "work")
    module.main(["--work", work, "--minutes", "0.1", "--adapt-minutes", "0.2", "--epochs", "1", "--model", "smoke",
                 "--supervised", "0.1", "--scratch", "--out", str(tmp_path / "out")])
    (lines,) = (tmp_path / "out").glob("pretrain-*.jsonl")
    records = [json.loads(line) for line in lines.read_text().splitlines()]
    _, pretrained, adapted, features, supervised, supervised_adapted, _, scratch = records
    assert "error" not in pretrained and os.path.isfile(os.path.join(pretrained["checkpoint"], "config.json"))
    assert [target.split(":")[1] for target, _ in calls] == ["pretrain_mae", "adapt_one", "evaluate_backbone",
                                                             "pretrain", "adapt_one", "evaluate_backbone", "adapt_one"]
    adapt_kwargs = calls[1][1]
    assert (adapt_kwargs["weights"], adapt_kwargs["budget_seconds"], adapt_kwargs["setup"]) == (
        pretrained["checkpoint"], 12.0, module.ADAPT_SETUP)
    assert calls[2][1]["weights"] == pretrained["checkpoint"]
    assert (adapted["setup"], features["setup"]) == ("mae_0.1min_adapted", "mae_0.1min_features")
    # The supervised backbone: written beside the set-ups' own work/backbone, which it leaves alone, and read from there.
    backbone = os.path.join(work, "supervised-0.1min", "backbone.keras")
    assert os.path.isfile(backbone) and not os.path.exists(os.path.join(work, "backbone"))
    assert (supervised["setup"], supervised["epochs_done"], supervised["backbone"]) == ("supervised_0.1min", 1, "smoke")
    assert (calls[4][1]["weights"], calls[4][1]["setup"], calls[5][1]["weights"]) == (
        backbone, module.SUPERVISED_ADAPT_SETUP, backbone)
    assert supervised_adapted["setup"] == "supervised_0.1min_adapted"
    assert (calls[6][1]["setup"], calls[6][1]["weights"], scratch["setup"]) == ("scratch", None, "scratch_adapted")
    table = next((tmp_path / "out").glob("pretrain-*.md")).read_text()
    assert "| MAE 0.1 min | 50.00% | 1-shot 25.0% | 75.0% |" in table, table
    assert "| supervised 0.1 min | 50.00% | 1-shot 25.0% | 75.0% |" in table, table
    assert "| none (scratch) | 50.00% | | |" in table, table
    # A run with --local-views given gets a folder of its own beside the default's.
    assert (module.run_name("dino", 20), module.run_name("dino", 20, 0)) == ("dino-20min", "dino-20min-local0")


def test_onednn_benchmark_alternates_the_variable_in_its_workers(tmp_path, monkeypatch):
    module = _benchmark("onednn")
    asked = []

    def in_process(target, kwargs, env=None, **_):
        asked.append(env)
        return {**_run_in_process(target, kwargs), "cpu": {"busy": 0.5, "steal": 0.0}}

    monkeypatch.setattr(module, "run_worker", in_process)
    ratios = module.main(["--workload", "tiny", "--set", "batch=4", "--pairs", "1", "--steps", "1", "--warmup", "1",
                          "--out", str(tmp_path)])
    assert asked == [{"TF_ENABLE_ONEDNN_OPTS": "0"}, {"TF_ENABLE_ONEDNN_OPTS": "1"}] and len(ratios) == 1
    (table,) = tmp_path.glob("onednn-*.md")
    assert "on against off, pair by pair" in table.read_text()
    with pytest.raises(SystemExit):
        module.main(["--workload", "tiny", "--set", "width=4"])


def test_every_result_header_names_the_compiler_flags_it_ran_under(monkeypatch):
    """A figure taken with XLA_FLAGS (oneDNN's products, say) must not read as XLA's default."""
    module = _benchmark("machine")
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.delenv("TF_XLA_FLAGS", raising=False)
    assert "XLA_FLAGS" not in module.header("cmd")
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_onednn=true")
    record = module.machine_record()
    assert record["xla_flags"] == "--xla_cpu_use_onednn=true"
    first = module.header("cmd", record).splitlines()[0]
    assert first.endswith("; XLA_FLAGS=--xla_cpu_use_onednn=true") and "TF_XLA_FLAGS" not in first


def test_image_text_benchmark_checks_parity_and_times(tmp_path, capsys, monkeypatch):
    """benchmarks/image_text.py in this process on the tests' tiny SigLIP towers, no exports, one round."""
    import tempfile

    pytest.importorskip("transformers")
    pytest.importorskip("sentencepiece")
    module = _benchmark("image_text")
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    module.main(["--size", "tiny", "--kinds", "siglip", "--formats", "none", "--backends", "tensorflow",
                 "--rounds", "1", "--photos", "2", "--out", str(tmp_path / "out")])
    table = next((tmp_path / "out").glob("image-text-*.md")).read_text()
    row = next(line for line in table.splitlines() if line.startswith("| tensorflow | siglip |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[2] == "exact" and all(float(value) < 1e-4 for value in cells[3:]), row
    assert "| siglip | transformers |" in table and "| siglip | keras_vit tensorflow |" in table
    assert not list((tmp_path / "tmp").glob("image-text-*")), "the made checkpoints were left behind"


def test_first_calls_sets_the_trials_charge_beside_what_a_fit_pays():
    """Issue 54: the benchmark that checks a budget's weighing; the fit runs for real (tiny model, in this process)."""
    first_calls = _benchmark("first_calls")
    from benchmarks.workers import ResultLog

    def trial(workload, policies, seconds):  # as `measure_training` returns them
        return [{"policy": p, "label": p, "seconds": [0.1], "warmup": [w], "validation": [v]}
                for p, w, v in zip(policies, (9.0, 3.0), (1.5, 0.5))]

    fits = []

    def fit(job):
        fits.append(job["policy"])
        return first_calls.fit_first_calls(job["workload"], job["policy"], job["validation"])

    records = first_calls.run(["tiny"], 12, 2, ResultLog("first-calls"), fit=fit, trial=trial)
    assert fits == ["float32", "mixed_bfloat16", "mixed_bfloat16", "float32"]  # rounds alternate
    float32 = records[0]
    assert float32["validation_shapes"] == 2  # 12 images at batch 8: a whole batch and a partial one
    assert float32["charged_s"] == 9.0 + 2 * 1.5 and records[1]["charged_s"] == 3.0 + 2 * 0.5
    assert all(isinstance(r["fit_first_validation_extra_s"], float) for r in records)
    text = first_calls.table(records)
    assert "| tiny, batch 8, 12 validation images (2 shapes) |" in text and "| 12.00 |" in text
    with pytest.raises(SystemExit, match="--rounds 0: expected a positive number"):
        first_calls.main(["--rounds", "0"])
    with pytest.raises(SystemExit, match="--workloads 'infer_b16': not a training workload"):
        first_calls.main(["--workloads", "infer_b16"])
