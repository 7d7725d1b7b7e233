"""Checkpoint readers, save_npz, head handling, errors, the registry and dynamic image size.

The .npz files are written here key by key from the spec in VIT_FACTS.md (not with save_npz),
so the reader is checked against the format, not against its own writer.
"""

import hashlib
import logging

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.weights import (
    CHECKPOINTS,
    Checkpoint,
    CheckpointError,
    detect_format,
    load_weights,
    read_safetensors,
    register_layer_mapping,
    resample_position_embedding,
    save_npz,
    write_safetensors,
)
from keras_vit.weights.mapping import Entry
from keras_vit.weights.registry import CheckpointSpec

from helpers import ALL_BACKENDS, to_numpy  # noqa: E402

pytestmark = ALL_BACKENDS

SMALL = dict(patch_size=8, hidden_size=24, num_layers=2, num_heads=3, mlp_dim=40)


def _randomise(model, seed=0):
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(rng.normal(0, 0.3, weight.shape).astype("float32"))
    return model


def _images(size, seed=1):
    return np.random.default_rng(seed).normal(size=(2, size, size, 3)).astype("float32")


def spec_npz(model, linen=False, stacked=False, prefix="", posemb_class_row=True):
    """The model's weights as an original ViT .npz dict, written from the spec's key names."""
    enc = model.get_layer("embedding")
    out = {"embedding/kernel": enc.kernel.numpy(), "embedding/bias": enc.bias.numpy(), "cls": enc.cls.numpy()}
    pos = enc.pos_embedding.numpy()
    if posemb_class_row:
        out["Transformer/posembed_input/pos_embedding"] = pos
    else:  # big_vision: no class-token row (valid when that row is zero), at the top level
        assert np.all(pos[:, 0] == 0)
        out["pos_embedding"] = pos[:, 1:]
    names = ("LayerNorm_0", "MultiHeadDotProductAttention_0", "LayerNorm_1", "MlpBlock_0") if linen else (
        "LayerNorm_0", "MultiHeadDotProductAttention_1", "LayerNorm_2", "MlpBlock_3")
    blocks = []
    i = 0
    while True:
        try:
            b = model.get_layer(f"encoderblock_{i}")
        except ValueError:
            break
        mha = b.attention
        d = {
            f"{names[0]}/scale": b.norm1.gamma, f"{names[0]}/bias": b.norm1.beta,
            f"{names[2]}/scale": b.norm2.gamma, f"{names[2]}/bias": b.norm2.beta,
            f"{names[3]}/Dense_0/kernel": b.mlp_dense_0.kernel, f"{names[3]}/Dense_0/bias": b.mlp_dense_0.bias,
            f"{names[3]}/Dense_1/kernel": b.mlp_dense_1.kernel, f"{names[3]}/Dense_1/bias": b.mlp_dense_1.bias,
        }
        for part, (kernel, bias) in mha.projections().items():
            part = "out" if part == "output" else part
            d[f"{names[1]}/{part}/kernel"], d[f"{names[1]}/{part}/bias"] = kernel, bias
        blocks.append({k: v.numpy() for k, v in d.items()})
        i += 1
    if stacked:
        for key in blocks[0]:
            out[f"Transformer/encoderblock/{key}"] = np.stack([blk[key] for blk in blocks])
    else:
        for i, blk in enumerate(blocks):
            out.update({f"Transformer/encoderblock_{i}/{k}": v for k, v in blk.items()})
    norm = model.get_layer("encoder_norm")
    out["Transformer/encoder_norm/scale"], out["Transformer/encoder_norm/bias"] = norm.gamma.numpy(), norm.beta.numpy()
    for name in ("pre_logits", "head"):
        if name in [layer.name for layer in model.layers]:
            out[f"{name}/kernel"] = model.get_layer(name).kernel.numpy()
            out[f"{name}/bias"] = model.get_layer(name).bias.numpy()
    return {prefix + k: v for k, v in out.items()}


def _save(tmp_path, arrays, name="ckpt.npz"):
    path = str(tmp_path / name)
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return path


@pytest.mark.parametrize(
    "layout",
    [
        dict(),
        dict(linen=True),
        dict(prefix="opt/target/"),
        dict(prefix="params/", linen=True, stacked=True, posemb_class_row=False),
        dict(prefix="params/", stacked=True),
    ],
    ids=["prelinen", "linen", "opt_target", "big_vision_stacked_no_cls_row", "params_stacked"],
)
@pytest.mark.parametrize("representation_size", [None, 16])
def test_npz_layouts_load_exactly(layout, representation_size, tmp_path):
    source = _randomise(keras_vit.ViT(image_size=32, num_classes=7, representation_size=representation_size,
                                      approximate_gelu=True, **SMALL))
    if layout.get("posemb_class_row") is False:
        pos = source.get_layer("embedding").pos_embedding
        pos.assign(np.concatenate([np.zeros((1, 1, 24), "float32"), pos.numpy()[:, 1:]], 1))
    path = _save(tmp_path, spec_npz(source, **layout))
    model = keras_vit.ViT(weights=path, representation_size=representation_size)
    assert model.get_layer("encoderblock_0").approximate_gelu is True  # Google checkpoint -> tanh GELU
    assert model.output_shape == (None, 7) and model.input_shape == (None, 32, 32, 3)
    images = _images(32)
    np.testing.assert_array_equal(to_numpy(model(images)), to_numpy(source(images)))


def test_save_npz_round_trip_and_content_detection(tmp_path):
    source = _randomise(keras_vit.ViT(image_size=32, num_classes=5, representation_size=12, **SMALL))
    path = str(tmp_path / "weights.bin")  # the suffix says nothing: the content does
    save_npz(source, path)
    assert detect_format(path) == "npz"
    with np.load(path, allow_pickle=False) as data:  # the spec's keys, and the two save_npz records
        assert set(data.files) == set(spec_npz(source)) | {"keras_vit/approximate_gelu", "keras_vit/layer_norm_epsilon"}
    model = keras_vit.ViT(weights=path, representation_size=12)  # exact GELU, as the source's: from the file
    images = _images(32)
    np.testing.assert_array_equal(to_numpy(model(images)), to_numpy(source(images)))
    save_npz(model, str(tmp_path / "again.npz"))
    assert [p.name for p in tmp_path.iterdir() if "tmp" in p.name] == []


def test_approximate_gelu_override(tmp_path):
    path = _save(tmp_path, spec_npz(keras_vit.ViT("tiny", num_classes=3)))  # as Google's files: tanh GELU
    assert keras_vit.ViT(weights=path).get_layer("encoderblock_1").approximate_gelu is True
    assert keras_vit.ViT(weights=path, approximate_gelu=False).get_layer("encoderblock_1").approximate_gelu is False


def test_an_npz_save_npz_wrote_reloads_as_its_model_without_a_warning(tmp_path, caplog):
    """Issue 43: reloading an .npz the package saved logged a tanh-GELU warning although the round trip was exact
    (the vit_jax layout does not say the GELU form nor the epsilon; save_npz now records the model's)."""
    path = str(tmp_path / "w.npz")
    for approximate, epsilon in ((False, 1e-6), (True, 1e-5)):
        source = _randomise(keras_vit.ViT("tiny", num_classes=3, approximate_gelu=approximate, layer_norm_epsilon=epsilon))
        save_npz(source, path)
        with caplog.at_level(logging.INFO, logger="keras_vit.weights"):
            caplog.clear()
            load_weights(source, path)
            model = keras_vit.ViT(weights=path)
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [r.getMessage() for r in caplog.records]
        assert model.vit_config["approximate_gelu"] is approximate and model.vit_config["layer_norm_epsilon"] == epsilon
        images = _images(32)
        np.testing.assert_array_equal(to_numpy(model(images)), to_numpy(source(images)))


def test_head_of_another_size_is_left_zero_with_one_log_line(tmp_path, caplog):
    source = _randomise(keras_vit.ViT(image_size=32, num_classes=7, representation_size=16, approximate_gelu=True,
                                      **SMALL))
    path = _save(tmp_path, spec_npz(source))
    with caplog.at_level(logging.INFO, logger="keras_vit.weights"):
        model = keras_vit.ViT(weights=path, num_classes=3)
    head_notes = [r for r in caplog.records if "head" in r.getMessage() and "7 classes" in r.getMessage()]
    assert len(head_notes) == 1
    assert np.all(model.get_layer("head").kernel.numpy() == 0)
    # The file's pre-logits layer is built and loaded; representation_size=None drops it, saying so.
    np.testing.assert_array_equal(model.get_layer("pre_logits").kernel.numpy(),
                                  source.get_layer("pre_logits").kernel.numpy())
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="keras_vit.weights"):
        dropped = keras_vit.ViT(weights=path, num_classes=3, representation_size=None)
    assert "pre_logits" not in [layer.name for layer in dropped.layers]
    assert any("representation_size=16" in r.getMessage() for r in caplog.records)
    np.testing.assert_array_equal(
        model.get_layer("encoderblock_1").mlp_dense_1.kernel.numpy(),
        source.get_layer("encoderblock_1").mlp_dense_1.kernel.numpy(),
    )
    # include_top=False: the backbone and the file's pre-logits, equal to the source's features.
    backbone = keras_vit.ViT(weights=path, include_top=False)
    features = keras.Model(source.input, source.get_layer("pre_logits").output)
    images = _images(32)
    np.testing.assert_array_equal(to_numpy(backbone(images)), to_numpy(features(images)))


def test_errors_name_the_keys_and_shapes(tmp_path):
    source = keras_vit.ViT(image_size=32, num_classes=7, **SMALL)
    arrays = spec_npz(source)
    model = keras_vit.ViT(image_size=32, num_classes=7, **SMALL)
    broken = dict(arrays)
    del broken["Transformer/encoderblock_1/LayerNorm_2/scale"]
    broken["Transformer/encoderblock_0/MlpBlock_3/Dense_0/bias"] = np.zeros(41, "float32")
    broken["extra/thing"] = np.zeros(3, "float32")
    before = model.get_layer("encoder_norm").gamma.numpy().copy()
    with pytest.raises(CheckpointError) as info:
        load_weights(model, _save(tmp_path, broken))
    message = str(info.value)
    assert "Transformer/encoderblock_1/LayerNorm_2/scale" in message
    assert "extra/thing" in message
    assert "Transformer/encoderblock_0/MlpBlock_3/Dense_0/bias: expected (40,), found (41,)" in message
    np.testing.assert_array_equal(model.get_layer("encoder_norm").gamma.numpy(), before)  # nothing assigned
    loaded = load_weights(model, _save(tmp_path, broken, "b2.npz"), skip_mismatch=True)
    assert "Transformer/encoder_norm/scale" in loaded
    assert "Transformer/encoderblock_0/MlpBlock_3/Dense_0/bias" not in loaded


def test_truncated_and_corrupt_files(tmp_path):
    path = str(tmp_path / "w.npz")
    save_npz(keras_vit.ViT("tiny", num_classes=3), path)
    data = open(path, "rb").read()
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        Checkpoint(str(truncated))
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="neither an .npz"):
        Checkpoint(str(garbage))
    st = tmp_path / "w.safetensors"
    write_safetensors(str(st), {"patch_embed.proj.weight": np.zeros((4, 3, 2, 2), "float32")})
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(st.read_bytes()[:-8])
    with pytest.raises(CheckpointError, match="truncated"):
        read_safetensors(str(cut))
    with pytest.raises(FileNotFoundError):
        Checkpoint(str(tmp_path / "absent.npz"))
    pickled = tmp_path / "pickled.npz"
    np.savez(str(pickled), obj=np.array([{"a": 1}], dtype=object))
    with pytest.raises(CheckpointError, match="pickle"):
        Checkpoint(str(pickled))


def _timm_state_dict(model):
    """A timm VisionTransformer state dict (fused qkv, PyTorch layouts) from a keras_vit model."""
    enc = model.get_layer("embedding")
    sd = {
        "patch_embed.proj.weight": enc.kernel.numpy().transpose(3, 2, 0, 1),
        "patch_embed.proj.bias": enc.bias.numpy(),
        "cls_token": enc.cls.numpy(),
        "pos_embed": enc.pos_embedding.numpy(),
        "norm.weight": model.get_layer("encoder_norm").gamma.numpy(),
        "norm.bias": model.get_layer("encoder_norm").beta.numpy(),
        "head.weight": model.get_layer("head").kernel.numpy().T,
        "head.bias": model.get_layer("head").bias.numpy(),
    }
    for i in range(SMALL["num_layers"]):
        b = model.get_layer(f"encoderblock_{i}")
        m = b.attention
        d = SMALL["hidden_size"]
        p = f"blocks.{i}."
        sd[p + "norm1.weight"], sd[p + "norm1.bias"] = b.norm1.gamma.numpy(), b.norm1.beta.numpy()
        sd[p + "norm2.weight"], sd[p + "norm2.bias"] = b.norm2.gamma.numpy(), b.norm2.beta.numpy()
        sd[p + "attn.qkv.weight"] = np.concatenate(
            [m.projections()[x][0].numpy().reshape(d, d).T for x in ("query", "key", "value")])
        sd[p + "attn.qkv.bias"] = np.concatenate(
            [m.projections()[x][1].numpy().reshape(d) for x in ("query", "key", "value")])
        sd[p + "attn.proj.weight"] = m.attention_output.kernel.numpy().reshape(d, d).T
        sd[p + "attn.proj.bias"] = m.attention_output.bias.numpy()
        sd[p + "mlp.fc1.weight"], sd[p + "mlp.fc1.bias"] = b.mlp_dense_0.kernel.numpy().T, b.mlp_dense_0.bias.numpy()
        sd[p + "mlp.fc2.weight"], sd[p + "mlp.fc2.bias"] = b.mlp_dense_1.kernel.numpy().T, b.mlp_dense_1.bias.numpy()
    return sd


def test_timm_safetensors_fused_qkv(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    source = _randomise(keras_vit.ViT(image_size=32, num_classes=6, **SMALL))
    path = str(tmp_path / "timm_vit.weights")
    safetensors_numpy.save_file({k: np.ascontiguousarray(v) for k, v in _timm_state_dict(source).items()}, path)
    assert detect_format(path) == "safetensors"
    model = keras_vit.ViT(weights=path, num_heads=3)
    assert model.get_layer("embedding").interpolation == "bicubic"
    assert model.get_layer("encoderblock_0").approximate_gelu is False
    images = _images(32)
    np.testing.assert_allclose(to_numpy(model(images)), to_numpy(source(images)), atol=1e-5)
    # bfloat16 tensors are widened on reading.
    bf16_path = str(tmp_path / "bf16.safetensors")
    write_safetensors(str(tmp_path / "f32.safetensors"), {"x": np.array([1.5, -2.0], "float32")})
    raw = (np.array([1.5, -2.0], "float32").view(np.uint32) >> 16).astype(np.uint16)
    blob = (tmp_path / "f32.safetensors").read_bytes().replace(b'"F32"', b'"BF16"').replace(
        b'"data_offsets":[0,8]', b'"data_offsets":[0,4]')
    header_end = 8 + int.from_bytes(blob[:8], "little")
    (tmp_path / "bf16.safetensors").write_bytes(blob[:header_end] + raw.tobytes())
    np.testing.assert_array_equal(read_safetensors(bf16_path)["x"], [1.5, -2.0])


def _bilinear_by_hand(grid, new_rows, new_cols):
    """scipy.ndimage.zoom(order=1) convention: corners aligned, written as explicit loops."""
    rows, cols, _ = grid.shape
    out = np.zeros((new_rows, new_cols, grid.shape[2]))
    for a in range(new_rows):
        y = a * (rows - 1) / (new_rows - 1)
        y0 = min(int(np.floor(y)), rows - 2)
        for b in range(new_cols):
            x = b * (cols - 1) / (new_cols - 1)
            x0 = min(int(np.floor(x)), cols - 2)
            fy, fx = y - y0, x - x0
            out[a, b] = ((1 - fy) * (1 - fx) * grid[y0, x0] + (1 - fy) * fx * grid[y0, x0 + 1]
                         + fy * (1 - fx) * grid[y0 + 1, x0] + fy * fx * grid[y0 + 1, x0 + 1])
    return out


def test_224_checkpoint_into_384_model_matches_resampling_by_hand(tmp_path):
    arch = dict(patch_size=16, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32)
    source = _randomise(keras_vit.ViT(image_size=224, include_top=False, **arch))
    path = str(tmp_path / "b224.npz")
    save_npz(source, path)
    model = keras_vit.ViT(weights=path, image_size=384, include_top=False)
    assert model.get_layer("embedding").grid_size == (24, 24)
    pos = source.get_layer("embedding").pos_embedding.numpy()
    grid = _bilinear_by_hand(pos[0, 1:].reshape(14, 14, 16).astype("float64"), 24, 24)
    expected_pos = np.concatenate([pos[:, :1], grid.reshape(1, 576, 16).astype("float32")], 1)
    np.testing.assert_allclose(model.get_layer("embedding").pos_embedding.numpy(), expected_pos, atol=1e-6)
    reference = keras_vit.ViT(image_size=384, include_top=False, **arch)  # the source's exact GELU, recorded
    for layer in reference.layers:
        if layer.weights and layer.name != "embedding":
            layer.set_weights(source.get_layer(layer.name).get_weights())
    for name in ("kernel", "bias", "cls"):
        getattr(reference.get_layer("embedding"), name).assign(getattr(source.get_layer("embedding"), name))
    reference.get_layer("embedding").pos_embedding.assign(expected_pos)
    images = _images(384)
    np.testing.assert_allclose(to_numpy(model(images)), to_numpy(reference(images)), atol=1e-5)


@pytest.mark.parametrize("old,new", [((14, 14), (24, 24)), ((3, 5), (7, 4)), ((6, 6), (4, 9))])
def test_resampling_matches_references(old, new):
    rng = np.random.default_rng(0)
    pos = rng.normal(size=(1, 1 + old[0] * old[1], 6)).astype("float32")
    out = resample_position_embedding(pos, new, old, interpolation="bilinear")
    assert out.shape == (1, 1 + new[0] * new[1], 6) and out.dtype == np.float32
    np.testing.assert_array_equal(out[:, :1], pos[:, :1])
    grid = pos[0, 1:].reshape(old + (6,)).astype("float64")
    np.testing.assert_allclose(out[0, 1:].reshape(new + (6,)), _bilinear_by_hand(grid, *new), atol=1e-6)
    scipy_ndimage = pytest.importorskip("scipy.ndimage")
    np.testing.assert_allclose(
        out[0, 1:].reshape(new + (6,)),
        scipy_ndimage.zoom(grid, (new[0] / old[0], new[1] / old[1], 1), order=1), atol=1e-6)
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(grid.astype("float32")).permute(2, 0, 1)[None]
    for method, mode, kwargs in (("bicubic", "bicubic", {"antialias": True}),
                                 ("bicubic_hf", "bicubic", {"align_corners": False}),
                                 ("bilinear_antialias", "bilinear", {"antialias": True, "align_corners": False})):
        expected = torch.nn.functional.interpolate(t, size=new, mode=mode, **kwargs)[0].permute(1, 2, 0).numpy()
        got = resample_position_embedding(pos, new, old, interpolation=method)[0, 1:].reshape(new + (6,))
        np.testing.assert_allclose(got, expected, atol=1e-5, err_msg=method)
    with pytest.raises(ValueError, match="interpolation"):
        resample_position_embedding(pos, new, old, interpolation="nearest")


def test_square_grid_is_inferred_in_one_place_and_refused_naming_the_rows():
    from keras_vit.weights.resample import square_grid
    from keras_vit.weights.timm_layout import timm_position_prefix

    assert square_grid(196) == (14, 14) and square_grid(1) == (1, 1)
    assert square_grid(50) is None and square_grid(0) is None and square_grid(-1) is None
    with pytest.raises(ValueError, match=r"pos_embedding \(after 1 prefix rows\) has 50 patch rows, which make no "
                                         r"square grid \(side x side\): pass old_grid=\(rows, cols\)"):
        resample_position_embedding(np.zeros((1, 51, 4), "float32"), (7, 7))
    # timm's pos_embed: prefix rows when the rest is square, none when the whole is; fewer rows
    # than prefix tokens is no grid either way (not a math error).
    cls = {"cls_token": np.zeros((1, 1, 4))}
    assert timm_position_prefix({**cls, "pos_embed": np.zeros((1, 50, 4))}) == 1
    assert timm_position_prefix({**cls, "pos_embed": np.zeros((1, 49, 4))}) == 0
    assert timm_position_prefix({**cls, "pos_embed": np.zeros((1, 0, 4))}) == 1


def test_dynamic_image_size(tmp_path):
    fixed = _randomise(keras_vit.ViT("tiny", num_classes=4))
    dynamic = keras_vit.ViT("tiny", num_classes=4, image_size=None, interpolation="bilinear")
    assert dynamic.input_shape == (None, None, None, 3)
    dynamic.set_weights(fixed.get_weights())
    images = _images(32)
    np.testing.assert_array_equal(to_numpy(dynamic(images)), to_numpy(fixed(images)))
    wide = np.random.default_rng(2).normal(size=(2, 24, 40, 3)).astype("float32")
    expected = keras_vit.ViT("tiny", num_classes=4, image_size=(24, 40))
    for layer in expected.layers:
        if layer.weights and layer.name != "embedding":
            layer.set_weights(fixed.get_layer(layer.name).get_weights())
    for name in ("kernel", "bias", "cls"):
        getattr(expected.get_layer("embedding"), name).assign(getattr(fixed.get_layer("embedding"), name))
    pos = fixed.get_layer("embedding").pos_embedding.numpy()
    expected.get_layer("embedding").pos_embedding.assign(
        resample_position_embedding(pos, (6, 10), interpolation="bilinear"))
    np.testing.assert_allclose(to_numpy(dynamic(wide)), to_numpy(expected(wide)), atol=1e-5)
    path = str(tmp_path / "dynamic.keras")
    dynamic.save(path)
    restored = keras.saving.load_model(path)
    np.testing.assert_array_equal(to_numpy(restored(wide)), to_numpy(dynamic(wide)))
    with pytest.raises(ValueError, match="patch_size"):
        dynamic(np.zeros((1, 30, 32, 3), "float32"))


def test_registry_download_with_file_url(tmp_path, monkeypatch):
    for name, spec in CHECKPOINTS.items():  # hashes are never invented: unknown means None
        assert spec.sha256 is None or len(spec.sha256) == 64, name
    path = str(tmp_path / "published.npz")
    save_npz(_randomise(keras_vit.ViT("tiny", num_classes=3)), path)
    digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
    spec = CheckpointSpec("file://" + path, digest, "tiny")
    monkeypatch.setitem(CHECKPOINTS, "test-tiny", spec)
    checkpoint = Checkpoint("test-tiny", cache_dir=str(tmp_path / "cache"))
    assert checkpoint.path == str(tmp_path / "cache" / "keras_vit" / "test-tiny.npz")
    assert hashlib.sha256(open(checkpoint.path, "rb").read()).hexdigest() == digest
    model = keras_vit.ViT(weights=checkpoint)
    np.testing.assert_array_equal(model.get_layer("head").kernel.numpy(), np.load(path)["head/kernel"])
    monkeypatch.setitem(CHECKPOINTS, "test-bad", CheckpointSpec("file://" + path, "0" * 64, "tiny"))
    with pytest.raises(ValueError):
        keras_vit.weights.fetch_checkpoint("test-bad", cache_dir=str(tmp_path / "cache2"))
    with pytest.raises(ValueError, match="Unknown checkpoint"):
        keras_vit.weights.fetch_checkpoint("ViT-Z_99")


def test_extension_point_for_extra_stem_layers(tmp_path):
    """A stem layer joins the npz reader and writer through register_layer_mapping."""
    register_layer_mapping("vit_jax", "test_stem", lambda layer, context: [
        Entry("conv_root/kernel", layer.kernel, lambda a, s: a.reshape(s), lambda a: a.reshape((1, 1) + a.shape)),
    ])
    images = keras.Input((32, 32, 3))
    stem = keras.layers.Conv2D(3, 1, use_bias=False, name="test_stem")(images)
    source = _randomise(keras_vit.ViT("tiny", num_classes=2, input_tensor=stem))
    path = str(tmp_path / "hybrid.npz")
    save_npz(source, path)
    with np.load(path) as data:
        assert data["conv_root/kernel"].shape == (1, 1, 1, 1, 3, 3)
    model = keras_vit.ViT("tiny", num_classes=2, input_tensor=keras.layers.Conv2D(3, 1, use_bias=False, name="test_stem")(images))
    load_weights(model, path)
    x = _images(32)
    np.testing.assert_array_equal(to_numpy(model([x])), to_numpy(source([x])))
