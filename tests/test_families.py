"""The families' outputs, fine-tuning, intermediates and the FlexiViT patch-kernel resize."""

import os

import keras
import numpy as np
import pytest

import keras_vit
from helpers import ALL_BACKENDS, FAMILY_ROWS, JIT_COMPILE, to_numpy
from keras_vit.weights import save_npz
from keras_vit.weights.resample import resize_patch_kernel


def _randomized(model, seed=0):
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(rng.normal(size=weight.shape).astype("float32") * 0.3)
    return model


@ALL_BACKENDS
@pytest.mark.parametrize("variant", FAMILY_ROWS)
def test_pooling_none_returns_every_token_in_the_documented_order(variant):
    row = keras_vit.configs.VARIANTS[variant]
    tokens = keras_vit.ViT(variant, include_top=False, pooling=None)
    count = int(row.class_token) + int(row.distillation_token) + row.num_register_tokens + (16 // 4) ** 2
    assert tokens.output_shape == (None, count, row.hidden_size)
    _randomized(tokens)
    images = np.random.default_rng(1).normal(size=(2, 16, 16, 3)).astype("float32")
    out = tokens.intermediates_model()(images)
    np.testing.assert_allclose(to_numpy(out["tokens"]), to_numpy(tokens(images)), atol=1e-6)
    assert len(out["blocks"]) == len(out["attention"]) == row.num_layers
    assert tuple(out["attention"][0].shape) == (2, row.num_heads, count, count)


@ALL_BACKENDS
@pytest.mark.parametrize("variant", ["tiny_dinov2", "tiny_dinov3", "tiny_siglip", "tiny_clip"])
def test_new_head_on_the_family_embedding_starts_at_zero_and_trains(variant):
    backbone = _randomized(keras_vit.ViT(variant, include_top=False))
    model = keras_vit.ViT(variant, num_classes=3)
    model.set_weights(backbone.get_weights() + model.get_weights()[len(backbone.weights):])
    images = np.random.default_rng(1).normal(size=(8, 16, 16, 3)).astype("float32")
    embedding = model.intermediates_model()(images)["embedding"]
    np.testing.assert_allclose(to_numpy(embedding), to_numpy(backbone(images)), atol=1e-5)
    head = model.get_layer("head")
    assert head.input.shape[-1] == backbone.output_shape[-1]  # CLIP's head sits on the projection
    assert not np.any(to_numpy(head.kernel))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy", jit_compile=JIT_COMPILE)
    model.fit(images, np.arange(8) % 3, epochs=1, batch_size=4, verbose=0)
    assert np.any(to_numpy(head.kernel))


@ALL_BACKENDS
def test_distilled_model_trains_both_heads_and_averages_them():
    model = _randomized(keras_vit.ViT("tiny_deit", num_classes=3, classifier_activation=None))
    images = np.random.default_rng(1).normal(size=(4, 16, 16, 3)).astype("float32")
    out = model.intermediates_model()(images)
    tokens = to_numpy(out["tokens"])
    head, dist = model.get_layer("head"), model.get_layer("head_dist")
    expected = 0.5 * (tokens[:, 0] @ to_numpy(head.kernel) + to_numpy(head.bias)
                      + tokens[:, 1] @ to_numpy(dist.kernel) + to_numpy(dist.bias))
    np.testing.assert_allclose(to_numpy(model(images)), expected, atol=1e-5)
    before = [to_numpy(head.kernel).copy(), to_numpy(dist.kernel).copy()]
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=JIT_COMPILE)
    model.fit(images, np.arange(4) % 3, epochs=1, verbose=0)
    assert not np.array_equal(before[0], to_numpy(head.kernel)) and not np.array_equal(before[1], to_numpy(dist.kernel))


def test_token_and_mean_pooling_concatenates_the_class_token_and_the_mean_patch_token():
    from helpers import check_layer
    from keras_vit.layers import TokenPooling

    check_layer(TokenPooling, {"mode": "token_and_mean", "num_prefix_tokens": 3}, (2, 7, 8))
    tokens = np.random.default_rng(0).normal(size=(2, 7, 8)).astype("float32")
    pooled = to_numpy(TokenPooling("token_and_mean", num_prefix_tokens=3)(tokens))  # class, 2 registers, 4 patches
    np.testing.assert_allclose(pooled, np.concatenate([tokens[:, 0], tokens[:, 3:].mean(1)], -1), atol=1e-6)
    with pytest.raises(ValueError, match="pooling='token_and_mean' needs class_token=True"):
        keras_vit.ViT("tiny", class_token=False, pooling="token_and_mean")


def test_flexivit_resize_matches_the_pseudo_inverse_definition():
    import tensorflow as tf

    rng = np.random.default_rng(0)
    kernel = rng.normal(size=(6, 6, 2, 4))
    for new in (9, 12, 4):
        # Direct definition: B resizes each basis patch (tf.image.resize, bilinear, no antialias);
        # the new kernel is pinv(B^T) w.
        basis = np.eye(36).reshape(36, 6, 6, 1)
        resize = np.stack([tf.image.resize(patch[None], (new, new), "bilinear", antialias=False)[0].numpy().ravel()
                           for patch in basis], axis=1)
        direct = (np.linalg.pinv(resize.T) @ kernel.reshape(36, -1)).reshape(new, new, 2, 4)
        np.testing.assert_allclose(resize_patch_kernel(kernel, new), direct, atol=1e-5)
    # Upsampling keeps every token: <x, w> = <B x, w'> for any patch x.
    patch = rng.normal(size=(6, 6))
    bigger = tf.image.resize(patch[None, :, :, None], (9, 9), "bilinear", antialias=False)[0, :, :, 0].numpy()
    resized = resize_patch_kernel(kernel, 9)
    np.testing.assert_allclose(np.einsum("hw,hwcd->cd", patch, kernel), np.einsum("hw,hwcd->cd", bigger, resized),
                               atol=1e-5)


def test_loader_resizes_the_patch_kernel_when_patch_size_differs(tmp_path):
    source = _randomized(keras_vit.ViT("tiny", num_classes=10))
    path = os.path.join(tmp_path, "tiny.npz")
    save_npz(source, path)
    model = keras_vit.ViT(weights=path, patch_size=8)
    assert model.input_shape == (None, 32, 32, 3)  # the file's image size, 4x4 tokens of 8x8 pixels
    expected = resize_patch_kernel(to_numpy(source.get_layer("embedding").kernel), 8)
    np.testing.assert_allclose(to_numpy(model.get_layer("embedding").kernel), expected, atol=1e-6)
    assert model.get_layer("embedding").pos_embedding.shape == (1, 1 + 16, 32)


# timm 1.0.31 backbone counts (num_classes=0, pretrained=False, counted on torch's meta device).
TIMM_GIANT_COUNTS = {"DINOv2_g14": 1_136_479_232, "DINOv2_g14_reg4": 1_136_483_840}


@pytest.mark.parametrize("variant", sorted(TIMM_GIANT_COUNTS))
def test_dinov2_giant_rows_count_as_timm(variant):
    from test_models import built_params  # 1- and 2-block builds: a full one is 4.5 GB

    row = keras_vit.configs.VARIANTS[variant]
    assert (row.mlp_activation, row.hidden_size, row.num_layers, row.num_heads) == ("swiglu", 1536, 40, 24)
    assert built_params(variant, include_top=False) == TIMM_GIANT_COUNTS[variant]


@pytest.mark.parametrize("variant", FAMILY_ROWS)
def test_family_keras_round_trip_and_tflite(variant, tmp_path):
    from keras_vit import export

    model = _randomized(keras_vit.ViT(variant, num_classes=4))
    images = np.random.default_rng(1).normal(size=(1, 16, 16, 3)).astype("float32")
    expected = to_numpy(model(images))
    path = os.path.join(tmp_path, "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_array_equal(to_numpy(loaded(images)), expected)
    assert loaded.vit_config == model.vit_config
    if variant not in ("tiny_deit", "tiny_siglip", "tiny_dinov3", "tiny_pe", "tiny_eva02"):
        return  # SavedModel export of every family row: tests/test_models.py; TFLite of the unusual ones here
    tflite_path = export.tflite(model, os.path.join(tmp_path, "model.tflite"), scaling="none").path
    np.testing.assert_allclose(export.load_predictor(tflite_path).predict(images), expected, atol=1e-5)


def test_family_presets_state_what_a_user_needs():
    from keras_vit.configs import SCALINGS, VARIANTS
    from keras_vit.weights import CHECKPOINTS

    families = {name: spec for name, spec in CHECKPOINTS.items() if spec.source}
    assert {VARIANTS[spec.variant].family for spec in families.values()} >= {"deit", "deit3", "dinov2", "siglip", "clip"}
    for name, spec in families.items():
        assert spec.resolution and spec.pooling and spec.licence, name
        assert spec.preprocessing in SCALINGS, name
        assert spec.sha256 is None, f"{name}: no hash could be read here; one must come from the published file"


def test_hugging_face_preset_fetches_config_and_weights_into_one_folder(tmp_path, monkeypatch):
    from keras_vit.weights import CHECKPOINTS, CheckpointSpec
    from keras_vit.weights import registry

    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    config = transformers.Dinov2Config(hidden_size=12, num_hidden_layers=1, num_attention_heads=2, mlp_ratio=2,
                                       image_size=8, patch_size=4)
    source = tmp_path / "published"
    torch.manual_seed(0)
    transformers.Dinov2Model(config).save_pretrained(source)
    spec = CheckpointSpec(f"file://{source}/model.safetensors", None, "tiny_dinov2",
                          config_url=f"file://{source}/config.json", source="test")
    monkeypatch.setitem(CHECKPOINTS, "test-dinov2", spec)
    folder = registry.fetch_checkpoint("test-dinov2", cache_dir=str(tmp_path / "cache"))
    assert sorted(os.listdir(folder)) == ["config.json", "model.safetensors"]
    checkpoint = keras_vit.weights.Checkpoint("test-dinov2", cache_dir=str(tmp_path / "cache"))
    assert checkpoint.path == folder and checkpoint.layout == "hf"
    model = keras_vit.ViT(weights=checkpoint, include_top=False)
    assert model.vit_config["layer_scale_init"] == 1.0 and model.output_shape == (None, 12)


def test_big_vision_siglip_npz_two_way(tmp_path):
    """save_npz writes MAPHead_0; a big_vision two-tower file (params/img/..., text tower beside) reads back."""
    model = _randomized(keras_vit.ViT("tiny_siglip", include_top=False))
    path = os.path.join(tmp_path, "siglip.npz")
    save_npz(model, path)
    with np.load(path) as data:
        assert "MAPHead_0/probe" in data
        tower = {f"params/img/{key}": data[key] for key in data}
    tower.update({"params/txt/Encoder_0/encoder_norm/scale": np.ones(4, "float32"), "params/t": np.ones(1, "float32")})
    two_towers = os.path.join(tmp_path, "two_towers.npz")
    np.savez(two_towers, **tower)
    loaded = keras_vit.ViT(weights=two_towers, include_top=False)
    assert loaded.vit_config["pooling"] == "map" and loaded.vit_config["approximate_gelu"] is True
    images = np.random.default_rng(1).normal(size=(2, 16, 16, 3)).astype("float32")
    np.testing.assert_allclose(to_numpy(loaded(images)), to_numpy(model(images)), atol=1e-6)


@ALL_BACKENDS
def test_families_take_dynamic_sizes_and_mixed_precision():
    images = np.random.default_rng(1).normal(size=(2, 24, 24, 3)).astype("float32")
    dynamic = _randomized(keras_vit.ViT("tiny_dinov2", image_size=None, include_top=False, pooling=None))
    assert tuple(dynamic(images).shape) == (2, 1 + 3 + 36, 24)  # class, 3 registers, 6x6 patches
    assert tuple(dynamic(images[:, :16, :20]).shape) == (2, 1 + 3 + 20, 24)
    keras.config.set_dtype_policy("mixed_bfloat16")
    for variant in ("tiny_siglip", "tiny_deit", "tiny_clip", "tiny_dinov3", "tiny_pe", "tiny_eva02"):
        model = keras_vit.ViT(variant, num_classes=3)
        out = model(images[:, :16, :16])
        assert keras.backend.standardize_dtype(out.dtype) == "float32", variant
        assert model.get_layer("encoderblock_0").compute_dtype == "bfloat16"
        assert np.allclose(to_numpy(out).sum(-1), 1.0, atol=1e-5)


@pytest.mark.parametrize("variant", ["tiny_deit", "tiny_dinov3", "tiny_eva02", "tiny_siglip", "tiny_clip", "tiny_pe"])
def test_family_onnx_export_gives_keras_probabilities(variant, tmp_path):
    pytest.importorskip("onnx")
    onnxruntime = pytest.importorskip("onnxruntime")
    from keras_vit import export

    model = _randomized(keras_vit.ViT(variant, num_classes=4))
    images = np.random.default_rng(1).normal(size=(2, 16, 16, 3)).astype("float32")
    expected = to_numpy(model(images))
    path = export.onnx(model, str(tmp_path / "m.onnx"), scaling="none").path
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    (probabilities,) = session.run(None, {"images": images})
    np.testing.assert_allclose(probabilities, expected, atol=1e-5)


def test_no_private_keras_api_in_the_model_weights_and_inspection_code():
    root = os.path.join(os.path.dirname(keras_vit.__file__))
    files = [os.path.join(root, "configs.py"), os.path.join(root, "inspect", "attention.py")]
    for folder in ("models", "layers", "weights"):  # with their subpackages (weights/huggingface)
        files += [os.path.join(path, name) for path, _, names in os.walk(os.path.join(root, folder))
                  for name in names if name.endswith(".py")]
    for path in files:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for private in ("keras.src", "_run_through_graph"):
            assert private not in text, f"{path} uses {private}"
    # Keras rebases a functional-constructor subclass onto its Functional class at first use; the
    # source subclasses the public keras.Model.
    with open(os.path.join(root, "models", "vit_model.py"), encoding="utf-8") as f:
        assert "class VisionTransformer(keras.Model):" in f.read()
    assert isinstance(keras_vit.ViT("tiny", num_classes=2), keras.Model)


def test_inspection_of_a_map_model_reads_through_its_probe():
    from keras_vit import inspect as vit_inspect

    model = _randomized(keras_vit.ViT("tiny_siglip", include_top=False))
    images = np.random.default_rng(1).normal(size=(2, 16, 16, 3)).astype("float32")
    attention = vit_inspect.probe_attention(model, images)
    # By hand from the pooling layer's weights on the final tokens: softmax(q(probe) . k(tokens) / sqrt(width)).
    pool = model.get_layer("pooling")
    tokens = to_numpy(model.intermediates_model()(images)["tokens"])
    (wq, bq), (wk, bk) = [[to_numpy(v) for v in pool.projections()[part]] for part in ("query", "key")]
    query = (to_numpy(pool.probe)[0, 0] @ wq.reshape(wq.shape[0], -1)).reshape(bq.shape) + bq
    keys = np.einsum("btd,dhw->bthw", tokens, wk) + bk
    scores = np.einsum("hw,bthw->bht", query, keys) / np.sqrt(bq.shape[-1])
    expected = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(attention, expected / expected.sum(-1, keepdims=True), atol=1e-5)
    readout = attention.mean(axis=1)
    maps = vit_inspect.probe_maps(model, images, upsample=False)
    np.testing.assert_allclose(maps, (readout / readout.max(-1, keepdims=True)).reshape(2, 4, 4), atol=1e-6)
    # The rollout figure reads the blocks' rollout through the probe, not as the mean of every row (GAP).
    rollout = vit_inspect.attention_rollout(vit_inspect.attention_maps(model, images))
    through_probe = np.einsum("bt,bts->bs", readout, rollout)
    np.testing.assert_allclose(vit_inspect.rollout_maps(model, images, upsample=False).reshape(2, -1),
                               through_probe / through_probe.max(-1, keepdims=True), atol=1e-5)
    with pytest.raises(ValueError, match=r"no attention-pooling probe \(pooling='token'\)"):
        vit_inspect.probe_maps(keras_vit.ViT("tiny", num_classes=3), np.zeros((1, 32, 32, 3)))


def test_inspect_cli_draws_the_probe_attention_of_a_map_model(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from matplotlib import image as mpimg

    from keras_vit import cli

    path = str(tmp_path / "siglip.keras")
    _randomized(keras_vit.ViT("tiny_siglip", num_classes=3)).save(path)
    assert cli.main(["inspect", path, "--out", str(tmp_path / "figures")]) == 0
    printed = capsys.readouterr().out.split()
    assert str(tmp_path / "figures" / "probe_attention.png") in printed
    assert mpimg.imread(str(tmp_path / "figures" / "probe_attention.png")).std() > 0.01
