"""`save_hf`: keras_vit -> Hugging Face `save_pretrained` folder -> transformers and keras_vit again.

Models of odd sizes (hidden 36, 3 heads, 2 blocks, 7x7 patches on a 4x4 grid, MLP ratio 2.5, 3
registers) with every weight redrawn are written, loaded by transformers' own classes (the one
config.json names, and AutoModel) and by `keras_vit.ViT(weights=folder)`, and compared in
float32 within 1e-4.
"""

import json
import os

import numpy as np
import pytest

import keras_vit
from helpers import ALL_BACKENDS, to_numpy
from keras_vit.weights import CheckpointError, save_hf, save_npz

HIDDEN, HEADS, LAYERS, MLP, PATCH, IMAGE, REGISTERS = 36, 3, 2, 90, 7, 28, 3
COMMON = dict(patch_size=PATCH, hidden_size=HIDDEN, num_layers=LAYERS, num_heads=HEADS, mlp_dim=MLP, image_size=IMAGE)
_DINOV2 = dict(layer_scale_init=0.1, include_top=False)
_CLIP = dict(pre_norm=True, patch_bias=False, mlp_activation="quick_gelu", layer_norm_epsilon=1e-5, include_top=False)
_DINOV3 = dict(rope="dinov3", position_embedding="none", prefix_position_embedding=False, layer_scale_init=0.1,
               num_register_tokens=REGISTERS, layer_norm_epsilon=1e-5, include_top=False)
# name -> (ViT arguments, the model_type written, the transformers output the model returns).
CASES = {
    "vit_head": (dict(num_classes=5), "vit", "logits"),
    "vit_pooler": (dict(include_top=False, representation_size=20), "vit", "pooler_output"),
    "deit_two_heads": (dict(distillation_token=True, num_classes=5), "deit", "logits"),
    "dinov2": (dict(_DINOV2, mlp_dim=3 * HIDDEN), "dinov2", "pooler_output"),
    "dinov2_head": (dict(_DINOV2, mlp_dim=3 * HIDDEN, include_top=True, pooling="token_and_mean", num_classes=5),
                    "dinov2", "logits"),
    # SwiGLU of integer ratio 2 (width 72 -> two thirds, 48); no position on the prefix tokens (timm's fold).
    "dinov2_registers_swiglu": (dict(_DINOV2, num_register_tokens=REGISTERS, mlp_activation="swiglu", mlp_dim=48,
                                     prefix_position_embedding=False), "dinov2_with_registers", "pooler_output"),
    "siglip": (dict(class_token=False, pooling="map", approximate_gelu=True, include_top=False),
               "siglip_vision_model", "pooler_output"),
    "clip_projection": (dict(_CLIP, projection_size=20), "clip_vision_model", "image_embeds"),
    "clip": (_CLIP, "clip_vision_model", "pooler_output"),
    # DINOv3: rotary position (no stored table), a key without bias, registers, its gated MLP split back.
    "dinov3": (dict(_DINOV3, qkv_bias="qv"), "dinov3_vit", "pooler_output"),
    "dinov3_swiglu": (dict(_DINOV3, rope={"variant": "dinov3", "theta": 50.0}, mlp_activation="swiglu"),
                      "dinov3_vit", "pooler_output"),
}


def _randomized(model, seed=0):
    """Every weight redrawn: LayerNorm scales around 1, everything else around 0, LayerScale far from its init."""
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        noise = rng.normal(size=weight.shape).astype("float32") * 0.3
        weight.assign(1.0 + noise if weight.path.endswith("gamma") else noise)
    return model


def _images(seed=1):
    return np.random.default_rng(seed).normal(size=(2, IMAGE, IMAGE, 3)).astype("float32")


def _keras_model(name):
    arguments, _, _ = CASES[name]
    return _randomized(keras_vit.ViT(**{**COMMON, "classifier_activation": None, **arguments}))


def _reloaded(folder, model):
    if model.vit_config["include_top"]:
        return keras_vit.ViT(weights=folder, classifier_activation=None)
    return keras_vit.ViT(weights=folder, include_top=False)


@pytest.mark.parametrize("name", sorted(CASES))
def test_written_folder_loads_in_transformers_and_back(name, tmp_path):
    torch = pytest.importorskip("torch", reason="the round trip through transformers needs torch")
    transformers = pytest.importorskip("transformers")
    model = _keras_model(name)
    folder = str(tmp_path / "hf")
    save_hf(model, folder)
    assert sorted(os.listdir(folder)) == ["config.json", "model.safetensors"]
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    _, model_type, output = CASES[name]
    assert config["model_type"] == model_type
    hf = getattr(transformers, config["architectures"][0]).from_pretrained(folder).eval()
    images = _images()
    expected = to_numpy(model(images))
    with torch.no_grad():
        result = hf(pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2)))
    assert np.abs(getattr(result, output).numpy() - expected).max() <= 1e-4
    if not model.vit_config["include_top"] and name != "clip_projection":
        assert type(transformers.AutoModel.from_pretrained(folder)) is type(hf)  # AutoModel reads model_type alone
    reloaded = _reloaded(folder, model)
    np.testing.assert_allclose(to_numpy(reloaded(images)), expected, atol=1e-5)


@ALL_BACKENDS
def test_round_trip_through_the_folder_on_every_backend(tmp_path):
    model = _keras_model("dinov2_registers_swiglu")
    save_hf(model, tmp_path / "hf")
    reloaded = keras_vit.ViT(weights=str(tmp_path / "hf"), include_top=False)
    assert reloaded.vit_config["num_register_tokens"] == REGISTERS
    images = _images()
    np.testing.assert_allclose(to_numpy(reloaded(images)), to_numpy(model(images)), atol=1e-5)


def test_existing_folder_is_refused_unless_overwrite(tmp_path):
    model = keras_vit.ViT("tiny_siglip", include_top=False)
    folder = tmp_path / "hf"
    folder.mkdir()
    save_hf(model, folder)  # an empty folder is no one's work
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not empty; pass overwrite=True"):
        save_hf(model, folder)
    assert (folder / "notes.txt").read_text() == "mine"
    save_hf(model, folder, overwrite=True)
    assert sorted(os.listdir(folder)) == ["config.json", "model.safetensors"]
    with pytest.raises(FileExistsError, match="is a file"):
        save_hf(model, folder / "config.json", overwrite=True)


def test_failure_midway_leaves_nothing(tmp_path, monkeypatch):
    from keras_vit.weights import hf_writer

    def broken(path, tensors, metadata=None):
        raise OSError("disk full")

    monkeypatch.setattr(hf_writer, "write_safetensors", broken)
    with pytest.raises(OSError, match="disk full"):
        save_hf(keras_vit.ViT("tiny_deit", num_classes=3), tmp_path / "new" / "hf")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "arguments, message",
    [
        (dict(pooling="gap", num_classes=4), r"'vit' cannot hold: pooling='gap'"),
        (dict(layer_scale_init=0.1, mlp_dim=40, include_top=False), r"'dinov2' cannot hold: mlp_dim=40"),
        (dict(class_token=False, pooling="map", num_classes=4), r"siglip_vision_model.*include_top=True"),
        (dict(position_embedding="sincos2d", include_top=False), "position_embedding='sincos2d'"),
        (dict(rope="dinov3", include_top=False), r"'dinov3_vit' cannot hold: layer_scale_init=None.*"
                                                  r"position_embedding='learned'"),
        (dict(rope="eva02", position_embedding="none", layer_scale_init=0.1, prefix_position_embedding=False,
              include_top=False), r"'dinov3_vit' cannot hold: rope=.*DINOv3's rotary position"),
        (dict(class_token=False, pooling="map", pooling_heads=3, include_top=False), "pooling_heads=3"),
        (dict(mlp_norm=True, fc_norm=True, include_top=False), r"mlp_norm=True.*fc_norm=True"),  # EVA-02's
    ],
)
def test_a_model_the_family_cannot_hold_is_refused_naming_the_field(arguments, message, tmp_path):
    model = keras_vit.ViT(**{**dict(patch_size=4, hidden_size=24, num_layers=1, num_heads=2, mlp_dim=48, image_size=16),
                             **arguments})
    with pytest.raises(CheckpointError, match=message):
        save_hf(model, tmp_path / "hf")
    assert not os.path.exists(tmp_path / "hf")


@pytest.mark.parametrize("variant", ["tiny_dinov2", "tiny_deit", "tiny_clip"])
def test_save_npz_refuses_weights_its_layout_has_no_key_for(variant, tmp_path):
    """LayerScale and register tokens used to be dropped in silence: the file read back as another model."""
    with pytest.raises(CheckpointError, match="'vit_jax' layout has no key for .*save_hf writes"):
        save_npz(keras_vit.ViT(variant, num_classes=3), tmp_path / "model.npz")
    assert not os.path.exists(tmp_path / "model.npz")


@pytest.mark.parametrize("variant, arguments, message", [
    ("tiny", dict(rope="dinov3"), r"rotary position \(rope=\{'grid': 'centered'.*Save it with model.save"),
    ("tiny_siglip", dict(pooling_mlp_dim=36), r"attention pool of its own width \(pooling_mlp_dim=36\).*model.save"),
])
def test_save_npz_refuses_what_its_layout_cannot_say(variant, arguments, message, tmp_path):
    with pytest.raises(CheckpointError, match=message):
        save_npz(keras_vit.ViT(variant, num_classes=3, **arguments), tmp_path / "model.npz")
    assert not os.path.exists(tmp_path / "model.npz")
    with pytest.raises(CheckpointError, match=r"no key for 6 weights.*mlp_norm.*fc_norm"):  # EVA-02's LayerNorms
        save_npz(keras_vit.ViT("tiny", mlp_norm=True, fc_norm=True, num_classes=3), tmp_path / "model.npz")
