"""A checkpoint describes its model: `ViT(weights=path)` and nothing else builds what the file holds.

Each layout's file is written here from random tensors named and shaped as VIT_FACTS.md says
(never through keras_vit's own writer), and the logits are compared with an independent
implementation: Hugging Face transformers' `ViTForImageClassification` where it can express
the model (vit_jax plain, timm), else `_reference_logits`, a forward pass written here in
PyTorch functional ops from the paper and the original vit_jax code (pre-LN blocks, tanh GELU,
class token or mean pooling, pre-logits Dense + tanh, BiT stem with (w - mean) / (std + 1e-5)
weight standardisation). That reference is itself checked against Hugging Face on the plain
layout. The Hugging Face folder round trip is `tests/test_parity_hf.py`.
"""

import json
import math
import zipfile

import keras
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the reference implementation needs torch (the parity extra)")
transformers = pytest.importorskip("transformers", reason="parity needs transformers (the parity extra)")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

import keras_vit  # noqa: E402
from keras_vit.weights import Checkpoint, CheckpointError, load_weights, read_safetensors, write_safetensors  # noqa: E402
from keras_vit.weights import registry  # noqa: E402
from test_hybrid_weights import generated_stem_arrays  # noqa: E402  (the hybrid stem, named as in the files)

from helpers import ALL_BACKENDS, to_numpy  # noqa: E402

pytestmark = ALL_BACKENDS

F = torch.nn.functional
# hidden 24, 3 heads of 8, MLP 40, 2 blocks, patch 8 on 32x32 images (a 4x4 grid), 7 classes.
D, HEADS, MLP, DEPTH, PATCH, IMAGE, CLASSES = 24, 3, 40, 2, 8, 32, 7


def _vit_jax_params(seed=0, class_token=True, representation_size=None, patch=PATCH, channels=3, grid=4):
    """Random tensors under the canonical pre-Linen vit_jax names (VIT_FACTS.md)."""
    rng = np.random.default_rng(seed)

    def rand(*shape, scale=0.3):
        return rng.normal(0, scale, shape).astype("float32")

    params = {
        "embedding/kernel": rand(patch, patch, channels, D),
        "embedding/bias": rand(D),
        "Transformer/posembed_input/pos_embedding": rand(1, grid * grid + int(class_token), D),
        "Transformer/encoder_norm/scale": 1 + rand(D),
        "Transformer/encoder_norm/bias": rand(D),
        "head/kernel": rand(representation_size or D, CLASSES),
        "head/bias": rand(CLASSES),
    }
    if class_token:
        params["cls"] = rand(1, 1, D)
    if representation_size:
        params["pre_logits/kernel"], params["pre_logits/bias"] = rand(D, representation_size), rand(representation_size)
    for i in range(DEPTH):
        p = f"Transformer/encoderblock_{i}/"
        for norm in ("LayerNorm_0", "LayerNorm_2"):
            params[p + norm + "/scale"], params[p + norm + "/bias"] = 1 + rand(D), rand(D)
        for part in ("query", "key", "value"):
            a = p + "MultiHeadDotProductAttention_1/" + part
            params[a + "/kernel"], params[a + "/bias"] = rand(D, HEADS, D // HEADS), rand(HEADS, D // HEADS)
        a = p + "MultiHeadDotProductAttention_1/out"
        params[a + "/kernel"], params[a + "/bias"] = rand(HEADS, D // HEADS, D), rand(D)
        params[p + "MlpBlock_3/Dense_0/kernel"], params[p + "MlpBlock_3/Dense_0/bias"] = rand(D, MLP), rand(MLP)
        params[p + "MlpBlock_3/Dense_1/kernel"], params[p + "MlpBlock_3/Dense_1/bias"] = rand(MLP, D), rand(D)
    return params


# ---------------------------------------------------------------------------------------------
# The reference: vit_jax's forward pass in PyTorch functional ops, reading the tensors by name.


def _t(array):
    return torch.from_numpy(np.asarray(array, "float32"))


def _same_pad(x, kernel, stride, value=0.0):
    """TensorFlow/Flax SAME padding (odd extra pixel at the bottom/right) of NCHW x."""
    pads = []
    for size in (x.shape[3], x.shape[2]):
        total = max((math.ceil(size / stride) - 1) * stride + kernel - size, 0)
        pads += [total // 2, total - total // 2]
    return F.pad(x, pads, value=value)


def _std_conv(x, kernel, stride):
    w = _t(kernel)
    w = (w - w.mean(dim=(0, 1, 2), keepdim=True)) / (w.std(dim=(0, 1, 2), unbiased=False, keepdim=True) + 1e-5)
    return F.conv2d(_same_pad(x, w.shape[0], stride), w.permute(3, 2, 0, 1), stride=stride)


def _gn(x, params, key):
    return F.group_norm(x, 32, _t(params[key + "/scale"]).reshape(-1), _t(params[key + "/bias"]).reshape(-1), eps=1e-6)


def _stem(x, params, depths):
    x = F.relu(_gn(_std_conv(x, params["conv_root/kernel"], 2), params, "gn_root"))
    x = F.max_pool2d(_same_pad(x, 3, 2, value=-math.inf), 3, 2)
    for s, depth in enumerate(depths, start=1):
        for u in range(1, depth + 1):
            p = f"block{s}/unit{u}/"
            stride = 2 if s > 1 and u == 1 else 1
            residual = x
            if u == 1:
                residual = _gn(_std_conv(x, params[p + "conv_proj/kernel"], stride), params, p + "gn_proj")
            y = F.relu(_gn(_std_conv(x, params[p + "conv1/kernel"], 1), params, p + "gn1"))
            y = F.relu(_gn(_std_conv(y, params[p + "conv2/kernel"], stride), params, p + "gn2"))
            y = _gn(_std_conv(y, params[p + "conv3/kernel"], 1), params, p + "gn3")
            x = F.relu(residual + y)
    return x


def _ln(x, params, key):
    return F.layer_norm(x, x.shape[-1:], _t(params[key + "/scale"]), _t(params[key + "/bias"]), eps=1e-6)


def _reference_logits(params, images, stem_depths=None, posemb_class_row=True):
    """Logits of the vit_jax model that `params` (canonical names) describe, on NHWC images."""
    x = torch.from_numpy(images).permute(0, 3, 1, 2)
    if stem_depths is not None:
        x = _stem(x, params, stem_depths)
    kernel = _t(params["embedding/kernel"])
    x = F.conv2d(x, kernel.permute(3, 2, 0, 1), _t(params["embedding/bias"]), stride=kernel.shape[0])
    x = x.flatten(2).transpose(1, 2)  # (B, rows * cols, D), row-major
    pos = _t(params["Transformer/posembed_input/pos_embedding"])
    if "cls" in params:
        cls = _t(params["cls"]).expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], 1) + pos if posemb_class_row else torch.cat([cls, x + pos], 1)
    else:
        x = x + pos
    for i in range(DEPTH):
        p = f"Transformer/encoderblock_{i}/"
        a = p + "MultiHeadDotProductAttention_1/"
        y = _ln(x, params, p + "LayerNorm_0")
        q, k, v = (torch.einsum("btd,dhk->bthk", y, _t(params[a + n + "/kernel"])) + _t(params[a + n + "/bias"])
                   for n in ("query", "key", "value"))
        weights = torch.softmax(torch.einsum("bqhk,bthk->bhqt", q, k) / math.sqrt(q.shape[-1]), dim=-1)
        y = torch.einsum("bhqt,bthk->bqhk", weights, v)
        x = x + torch.einsum("bqhk,hkd->bqd", y, _t(params[a + "out/kernel"])) + _t(params[a + "out/bias"])
        y = _ln(x, params, p + "LayerNorm_2")
        y = F.gelu(y @ _t(params[p + "MlpBlock_3/Dense_0/kernel"]) + _t(params[p + "MlpBlock_3/Dense_0/bias"]),
                   approximate="tanh")
        x = x + y @ _t(params[p + "MlpBlock_3/Dense_1/kernel"]) + _t(params[p + "MlpBlock_3/Dense_1/bias"])
    x = _ln(x, params, "Transformer/encoder_norm")
    x = x[:, 0] if "cls" in params else x.mean(1)  # vit_jax classifier "token" / "gap"
    if "pre_logits/kernel" in params:
        x = torch.tanh(x @ _t(params["pre_logits/kernel"]) + _t(params["pre_logits/bias"]))
    return (x @ _t(params["head/kernel"]) + _t(params["head/bias"])).numpy()


def _images(size=IMAGE, seed=3):
    return np.random.default_rng(seed).normal(size=(2, size, size, 3)).astype("float32")


def _save_npz(tmp_path, arrays, name="ckpt.npz"):
    path = str(tmp_path / name)
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return path


def _assert_close(model, expected, images):
    diff = np.abs(to_numpy(model(images)) - expected).max()
    assert diff <= 1e-4, diff


# ---------------------------------------------------------------------------------------------
# Hugging Face as the independent implementation.


def _hf_model(heads=HEADS, act="gelu", eps=1e-12, seed=0):
    torch.manual_seed(seed)
    config = transformers.ViTConfig(
        hidden_size=D, num_hidden_layers=DEPTH, num_attention_heads=heads, intermediate_size=MLP,
        image_size=IMAGE, patch_size=PATCH, layer_norm_eps=eps, num_labels=CLASSES, hidden_act=act,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )
    model = transformers.ViTForImageClassification(config)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn_like(param) * 0.2)
    return model.eval()


def _hf_logits(model, images):
    with torch.no_grad():
        return model(pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2))).logits.numpy()


def _hf_from_vit_jax(params, folder):
    """A Hugging Face ViT holding the vit_jax tensors (tanh GELU, epsilon 1e-6), through its hub files."""
    model = _hf_model(act="gelu_pytorch_tanh", eps=1e-6)
    model.save_pretrained(folder)
    sd = {
        "vit.embeddings.cls_token": params["cls"],
        "vit.embeddings.position_embeddings": params["Transformer/posembed_input/pos_embedding"],
        "vit.embeddings.patch_embeddings.projection.weight": params["embedding/kernel"].transpose(3, 2, 0, 1),
        "vit.embeddings.patch_embeddings.projection.bias": params["embedding/bias"],
        "vit.layernorm.weight": params["Transformer/encoder_norm/scale"],
        "vit.layernorm.bias": params["Transformer/encoder_norm/bias"],
        "classifier.weight": params["head/kernel"].T, "classifier.bias": params["head/bias"],
    }
    for i in range(DEPTH):
        p, h = f"Transformer/encoderblock_{i}/", f"vit.encoder.layer.{i}."
        a = p + "MultiHeadDotProductAttention_1/"
        for jax_name, hf_name in (("LayerNorm_0", "layernorm_before"), ("LayerNorm_2", "layernorm_after")):
            sd[h + hf_name + ".weight"], sd[h + hf_name + ".bias"] = params[p + jax_name + "/scale"], params[p + jax_name + "/bias"]
        for part in ("query", "key", "value"):
            sd[h + f"attention.attention.{part}.weight"] = params[a + part + "/kernel"].reshape(D, D).T
            sd[h + f"attention.attention.{part}.bias"] = params[a + part + "/bias"].reshape(D)
        sd[h + "attention.output.dense.weight"] = params[a + "out/kernel"].reshape(D, D).T
        sd[h + "attention.output.dense.bias"] = params[a + "out/bias"]
        sd[h + "intermediate.dense.weight"] = params[p + "MlpBlock_3/Dense_0/kernel"].T
        sd[h + "intermediate.dense.bias"] = params[p + "MlpBlock_3/Dense_0/bias"]
        sd[h + "output.dense.weight"] = params[p + "MlpBlock_3/Dense_1/kernel"].T
        sd[h + "output.dense.bias"] = params[p + "MlpBlock_3/Dense_1/bias"]
    expected = set(safetensors_numpy.load_file(str(folder / "model.safetensors")))
    assert set(sd) == expected, expected ^ set(sd)
    safetensors_numpy.save_file({k: np.ascontiguousarray(v) for k, v in sd.items()}, str(folder / "model.safetensors"))
    return transformers.ViTForImageClassification.from_pretrained(folder).eval()


def _timm_from_hf(model, folder):
    """The timm VisionTransformer state dict (fused qkv) of a Hugging Face ViT's weights (hub names)."""
    model.save_pretrained(folder)
    hf = safetensors_numpy.load_file(str(folder / "model.safetensors"))
    sd = {
        "cls_token": hf["vit.embeddings.cls_token"], "pos_embed": hf["vit.embeddings.position_embeddings"],
        "patch_embed.proj.weight": hf["vit.embeddings.patch_embeddings.projection.weight"],
        "patch_embed.proj.bias": hf["vit.embeddings.patch_embeddings.projection.bias"],
        "norm.weight": hf["vit.layernorm.weight"], "norm.bias": hf["vit.layernorm.bias"],
        "head.weight": hf["classifier.weight"], "head.bias": hf["classifier.bias"],
    }
    for i in range(DEPTH):
        h, t = f"vit.encoder.layer.{i}.", f"blocks.{i}."
        for suffix in ("weight", "bias"):
            sd[t + "norm1." + suffix] = hf[h + "layernorm_before." + suffix]
            sd[t + "norm2." + suffix] = hf[h + "layernorm_after." + suffix]
            sd[t + "attn.qkv." + suffix] = np.concatenate(
                [hf[h + f"attention.attention.{part}.{suffix}"] for part in ("query", "key", "value")])
            sd[t + "attn.proj." + suffix] = hf[h + "attention.output.dense." + suffix]
            sd[t + "mlp.fc1." + suffix] = hf[h + "intermediate.dense." + suffix]
            sd[t + "mlp.fc2." + suffix] = hf[h + "output.dense." + suffix]
    return sd


# ---------------------------------------------------------------------------------------------
# Round trips: ViT(weights=path) and nothing else (but classifier_activation=None, to compare logits).


def test_reference_agrees_with_hugging_face_and_plain_npz_round_trip(tmp_path):
    params = _vit_jax_params()
    images = _images()
    expected = _hf_logits(_hf_from_vit_jax(params, tmp_path / "hf"), images)
    assert np.abs(_reference_logits(params, images) - expected).max() <= 1e-4  # the reference is sound
    model = keras_vit.ViT(weights=_save_npz(tmp_path, params), classifier_activation=None)
    assert model.vit_config["num_heads"] == HEADS and model.vit_config["approximate_gelu"] is True
    _assert_close(model, expected, images)


@pytest.mark.parametrize("case", ["pre_logits", "gap_no_class_token", "big_vision_scanned"])
def test_vit_jax_layouts_build_what_the_file_holds(case, tmp_path):
    params = _vit_jax_params(class_token=case != "gap_no_class_token",
                             representation_size=16 if case == "pre_logits" else None)
    arrays = dict(params)
    posemb_class_row = True
    if case == "big_vision_scanned":  # params/ prefix, Linen names, stacked blocks, no class-token row
        posemb_class_row = False
        pos = params["Transformer/posembed_input/pos_embedding"][:, 1:]
        params["Transformer/posembed_input/pos_embedding"] = pos
        linen = {"LayerNorm_2": "LayerNorm_1", "MultiHeadDotProductAttention_1": "MultiHeadDotProductAttention_0",
                 "MlpBlock_3": "MlpBlock_0"}
        arrays = {k: v for k, v in params.items() if "encoderblock_" not in k and "posembed" not in k}
        arrays["pos_embedding"] = pos
        for key in (k for k in params if k.startswith("Transformer/encoderblock_0/")):
            rest = key[len("Transformer/encoderblock_0/"):]
            first, _, tail = rest.partition("/")
            stacked = np.stack([params[f"Transformer/encoderblock_{i}/{rest}"] for i in range(DEPTH)])
            arrays[f"Transformer/encoderblock/{linen.get(first, first)}/{tail}"] = stacked
        arrays = {"params/" + k: v for k, v in arrays.items()}
    model = keras_vit.ViT(weights=_save_npz(tmp_path, arrays), classifier_activation=None)
    images = _images()
    _assert_close(model, _reference_logits(params, images, posemb_class_row=posemb_class_row), images)
    config = model.vit_config
    if case == "pre_logits":
        assert config["representation_size"] == 16 and model.get_layer("pre_logits").units == 16
    if case == "gap_no_class_token":
        assert (config["class_token"], config["pooling"]) == (False, "gap")


def test_hybrid_npz_builds_its_stem(tmp_path):
    params = {**_vit_jax_params(patch=1, channels=128, grid=8), **generated_stem_arrays((1,), width=32)}
    model = keras_vit.ViT(weights=_save_npz(tmp_path, params), classifier_activation=None)
    assert model.vit_config["stem"] == (1,) and model.vit_config["stem_width"] == 32
    assert model.input_shape == (None, 32, 32, 3)
    images = _images()
    _assert_close(model, _reference_logits(params, images, stem_depths=(1,)), images)


def test_timm_safetensors_needs_num_heads_then_matches(tmp_path):
    hf = _hf_model(heads=4)  # 4 heads of 6: not the hidden // 64 = 0 -> 1 that was guessed
    path = str(tmp_path / "timm.safetensors")
    write_safetensors(path, _timm_from_hf(hf, tmp_path / "hf"))
    assert Checkpoint(path).architecture["num_heads"] is None
    with pytest.raises(ValueError, match=r"num_heads="):
        keras_vit.ViT(weights=path)
    model = keras_vit.ViT(weights=path, num_heads=4, classifier_activation=None)
    images = _images()
    _assert_close(model, _hf_logits(hf, images), images)


# ---------------------------------------------------------------------------------------------
# Resolving: one config, contradictions refused in one error.


def test_contradicting_arguments_are_listed_in_one_error(tmp_path):
    path = _save_npz(tmp_path, _vit_jax_params())
    with pytest.raises(ValueError) as info:
        keras_vit.ViT("tiny", weights=path)
    message = str(info.value)
    for line in ("patch_size: 4 (variant='tiny'), the file has 8", "hidden_size: 32 (variant='tiny'), the file has 24",
                 "num_heads: 2 (variant='tiny'), the file has 3", "mlp_dim: 64 (variant='tiny'), the file has 40"):
        assert line in message, message
    assert "num_layers" not in message  # both 2
    with pytest.raises(ValueError, match=r"class_token: True \(given\), the file has False"):
        keras_vit.ViT(weights=_save_npz(tmp_path, _vit_jax_params(class_token=False), "gap.npz"), class_token=True)
    # Head, GELU form and epsilon may differ: a new task, or numerics.
    model = keras_vit.ViT(weights=path, num_classes=3, approximate_gelu=False, layer_norm_epsilon=1e-5)
    assert model.output_shape == (None, 3) and model.vit_config["approximate_gelu"] is False


def test_a_file_without_position_embedding_asks_for_its_kind(tmp_path):
    params = _vit_jax_params()
    del params["Transformer/posembed_input/pos_embedding"]
    path = _save_npz(tmp_path, params)
    with pytest.raises(ValueError, match="position_embedding="):
        keras_vit.ViT(weights=path)
    assert keras_vit.ViT(weights=path, position_embedding="none").vit_config["position_embedding"] == "none"


def test_vit_config_survives_keras_file_and_old_files_still_load(tmp_path):
    model = keras_vit.ViT("tiny", num_classes=3, pooling="avg", class_token=False)
    assert model.vit_config["pooling"] == "gap"
    model.save(str(tmp_path / "m.keras"))
    restored = keras.saving.load_model(str(tmp_path / "m.keras"))
    assert restored.vit_config == model.vit_config
    rebuilt = keras_vit.models.vit.build(restored.vit_config)
    assert rebuilt.count_params() == model.count_params()
    # A plain functional model, as keras_vit saved before VisionTransformer, loads as before.
    plain = keras.Model(model.inputs, model.outputs)
    plain.save(str(tmp_path / "old.keras"))
    old = keras.saving.load_model(str(tmp_path / "old.keras"))
    x = _images()
    np.testing.assert_array_equal(to_numpy(old(x)), to_numpy(model(x)))


def test_pooling_avg_and_max():
    tokens = keras_vit.ViT("tiny", include_top=False, pooling=None)
    x = _images()
    patch_tokens = to_numpy(tokens(x))[:, 1:]
    for pooling, reduce in (("avg", np.mean), ("max", np.max)):
        pooled = keras_vit.ViT("tiny", include_top=False, pooling=pooling)
        pooled.set_weights(tokens.get_weights())
        np.testing.assert_allclose(to_numpy(pooled(x)), reduce(patch_tokens, axis=1), atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Loading is all-or-nothing; every malformed file names itself and the entry.


@pytest.mark.parametrize("kind", ["string", "complex", "nan", "inf", "shape"])
def test_a_failed_load_changes_no_variable(kind, tmp_path):
    params = _vit_jax_params()
    key = "Transformer/encoderblock_1/MlpBlock_3/Dense_1/kernel"  # late in the walk: most entries pass first
    value = params[key]
    params[key] = {
        "string": np.full(value.shape, "x"),
        "complex": value.astype("complex64"),
        "nan": np.where(np.arange(value.size).reshape(value.shape) == 5, np.nan, value).astype("float32"),
        "inf": np.full(value.shape, 1e300),  # finite float64, Inf once cast to the float32 variable
        "shape": value[:-1],
    }[kind]
    path = _save_npz(tmp_path, params)
    model = keras_vit.ViT(patch_size=PATCH, hidden_size=D, num_layers=DEPTH, num_heads=HEADS, mlp_dim=MLP,
                          image_size=IMAGE, num_classes=CLASSES)
    before = [np.array(w.numpy()) for w in model.weights]
    with pytest.raises(CheckpointError, match=key):
        load_weights(model, path)
    for old, weight in zip(before, model.weights):
        np.testing.assert_array_equal(weight.numpy(), old, err_msg=weight.path)


def _safetensors_with_header(tmp_path, header, data=b"\0" * 16):
    encoded = json.dumps(header).encode()
    path = tmp_path / "bad.safetensors"
    path.write_bytes(len(encoded).to_bytes(8, "little") + encoded + data)
    return str(path)


@pytest.mark.parametrize(
    "header, message",
    [
        ({"w": {"dtype": "F32", "shape": [2]}}, "tensor 'w': data_offsets is None"),
        ({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, "tensor 'w': shape \\[3\\] of F32 needs 12 bytes"),
        ({"w": {"dtype": "C64", "shape": [2], "data_offsets": [0, 16]}}, "tensor 'w': unsupported dtype 'C64'"),
        ({"w": {"dtype": "F32", "shape": "2", "data_offsets": [0, 8]}}, "tensor 'w': shape is '2'"),
        (["w"], "header of list"),
    ],
    ids=["no_offsets", "shape_vs_bytes", "dtype", "shape_type", "list"],
)
def test_malformed_safetensors_entries(header, message, tmp_path):
    path = _safetensors_with_header(tmp_path, header)
    with pytest.raises(CheckpointError, match=message) as info:
        read_safetensors(path)  # what Checkpoint reads a safetensors file with
    assert path in str(info.value)


@pytest.mark.parametrize(
    "config, message",
    [
        ("", "not valid JSON"),
        ("[1, 2]", "holds list"),
        ({"hidden_size": 32, "num_hidden_layers": 2, "intermediate_size": 64}, "num_attention_heads is missing"),
        ({"hidden_size": "32", "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64},
         "hidden_size is '32'"),
        ({"hidden_size": 32.5, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64},
         "hidden_size is 32.5"),
    ],
    ids=["empty", "list", "no_heads", "string_size", "float_size"],
)
def test_malformed_hf_config(config, message, tmp_path):
    write_safetensors(str(tmp_path / "model.safetensors"),
                      {"vit.embeddings.patch_embeddings.projection.weight": np.zeros((32, 3, 4, 4), "float32")})
    (tmp_path / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    with pytest.raises(CheckpointError, match=message) as info:
        Checkpoint(str(tmp_path))
    assert str(tmp_path / "config.json") in str(info.value)


def test_a_torch_zip_is_told_to_convert(tmp_path):
    path = tmp_path / "pytorch_model.pth"
    with zipfile.ZipFile(path, "w") as archive:  # torch.save's layout: <name>/data.pkl, <name>/data/0...
        archive.writestr("pytorch_model/data.pkl", b"\x80\x02}q\x00.")
        archive.writestr("pytorch_model/data/0", b"\0" * 16)
    with pytest.raises(CheckpointError, match="convert it to safetensors.*safetensors.torch"):
        keras_vit.ViT(weights=str(path))


# ---------------------------------------------------------------------------------------------
# weights="imagenet"


def test_imagenet_maps_to_the_fine_tuned_checkpoint_and_fails_clearly(tmp_path, monkeypatch):
    assert registry.imagenet_checkpoint("B16") == "ViT-B_16-i21k-i1k-224"
    assert registry.imagenet_checkpoint("ViT-L/32") == "ViT-L_32-i21k-i1k-384"
    with pytest.raises(ValueError, match="no ImageNet-1k checkpoint.*'Ti16'"):
        keras_vit.ViT_Ti16(weights="imagenet")
    with pytest.raises(ValueError, match="weights='imagenet' needs variant="):
        keras_vit.ViT(weights="imagenet")
    # Offline (a port nothing listens on): one line naming the checkpoint and what to do.
    spec = registry.CHECKPOINTS["ViT-B_16-i21k-i1k-224"]
    monkeypatch.setitem(registry.CHECKPOINTS, "ViT-B_16-i21k-i1k-224",
                        registry.CheckpointSpec("http://127.0.0.1:9/ViT-B_16-224.npz", spec.sha256, spec.variant))
    with pytest.raises(CheckpointError, match="Could not download checkpoint 'ViT-B_16-i21k-i1k-224'") as info:
        Checkpoint("ViT-B_16-i21k-i1k-224", cache_dir=str(tmp_path))
    assert "\n" not in str(info.value)
    assert not list(tmp_path.rglob("*.npz"))
    with pytest.raises(CheckpointError, match="Could not download checkpoint 'ViT-B_16-i21k-i1k-224'"):
        keras_vit.ViT_B16(weights="imagenet")

