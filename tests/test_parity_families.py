"""Parity of DINOv2, DINOv3, SigLIP, CLIP and DeiT with their reference implementations.

Random models of odd sizes (hidden 36, 3 heads, 2 blocks, MLP ratio 2.5, 3 registers) are built
with Hugging Face transformers (saved with save_pretrained) and timm (state dict saved as
safetensors), every weight redrawn so that LayerNorm scales, LayerScale and heads are far from
their initial values (a missing or swapped one changes the output), then loaded with
`keras_vit.ViT(weights=...)` alone and compared in float32 within 1e-4. Rotary-position models
(DINOv3) are compared on images of another, non-square grid (3x5 patches) than they were built for.
"""

import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="parity tests need torch (pip install -e '.[parity]')")
transformers = pytest.importorskip("transformers", reason="parity tests need transformers (the parity extra)")

import keras_vit  # noqa: E402
from _timm_import import import_timm  # noqa: E402
from helpers import ALL_BACKENDS, to_numpy  # noqa: E402
from keras_vit.weights import CheckpointError  # noqa: E402

pytestmark = ALL_BACKENDS

HIDDEN, HEADS, LAYERS, MLP, PATCH, IMAGE, REGISTERS = 36, 3, 2, 90, 7, 28, 3


def _redraw(model, seed=0):
    """Every parameter redrawn: norms and layer scales around 1, everything else around 0."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator) * 0.3
            scale_like = any(part in name for part in ("norm", "layer_scale", "ls1", "ls2", "lambda1", "gamma_"))
            param.copy_(1.0 + noise if scale_like and param.ndim == 1 and not name.endswith("bias") else noise)
    return model.eval()


def _images(batch=2, size=IMAGE, seed=1, width=None):
    return np.random.default_rng(seed).normal(size=(batch, size, width or size, 3)).astype("float32")


def _torch(model, images, **kwargs):
    with torch.no_grad():
        return model(pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2)), **kwargs)


def _close(keras_output, expected):
    diff = np.abs(to_numpy(keras_output) - np.asarray(expected)).max()
    assert diff <= 1e-4, diff


def _save(model, folder):
    model.save_pretrained(folder)
    return str(folder)


def _hf_dinov2(registers=0, swiglu=False):
    common = dict(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS, mlp_ratio=3,  # HF takes an int ratio
                  image_size=IMAGE, patch_size=PATCH, use_swiglu_ffn=swiglu, layerscale_value=1e-5)
    if registers:
        config = transformers.Dinov2WithRegistersConfig(num_register_tokens=registers, **common)
        return _redraw(transformers.Dinov2WithRegistersModel(config))
    return _redraw(transformers.Dinov2Model(transformers.Dinov2Config(**common)))


@pytest.mark.parametrize("registers, swiglu", [(0, False), (REGISTERS, False), (0, True)])
def test_hf_dinov2_pooler_and_tokens(registers, swiglu, tmp_path):
    hf = _hf_dinov2(registers, swiglu)
    folder = _save(hf, tmp_path)
    images = _images()
    expected = _torch(hf, images)
    model = keras_vit.ViT(weights=folder, include_top=False)
    assert model.vit_config["num_register_tokens"] == registers
    assert model.vit_config["mlp_activation"] == ("swiglu" if swiglu else "gelu")
    _close(model(images), expected.pooler_output.numpy())
    tokens = keras_vit.ViT(weights=folder, include_top=False, pooling=None)
    _close(tokens(images), expected.last_hidden_state.numpy())  # class, registers, patches


def _siglip_vision_config():
    return transformers.SiglipVisionConfig(
        hidden_size=HIDDEN, intermediate_size=MLP, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        image_size=IMAGE, patch_size=PATCH,
    )


def test_hf_siglip_attention_pool(tmp_path):
    hf = _redraw(transformers.SiglipVisionModel(_siglip_vision_config()))
    folder = _save(hf, tmp_path)
    images = _images()
    model = keras_vit.ViT(weights=folder, include_top=False)
    assert model.vit_config["pooling"] == "map" and model.vit_config["class_token"] is False
    _close(model(images), _torch(hf, images).pooler_output.numpy())


def test_hf_siglip_two_towers_reads_the_image_tower(tmp_path):
    text = transformers.SiglipTextConfig(hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                                         num_attention_heads=2, vocab_size=50)
    config = transformers.SiglipConfig(text_config=text.to_dict(), vision_config=_siglip_vision_config().to_dict())
    hf = _redraw(transformers.SiglipModel(config))
    folder = _save(hf, tmp_path)
    images = _images()
    with torch.no_grad():
        expected = hf.get_image_features(pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2)))
    expected = getattr(expected, "pooler_output", expected)
    _close(keras_vit.ViT(weights=folder, include_top=False)(images), expected.numpy())


def _clip_vision_config(act="quick_gelu"):
    return transformers.CLIPVisionConfig(
        hidden_size=HIDDEN, intermediate_size=MLP, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        image_size=IMAGE, patch_size=PATCH, projection_dim=20, hidden_act=act,
    )


@pytest.mark.parametrize("projection", [True, False])
def test_hf_clip_vision_embeds(projection, tmp_path):
    cls = transformers.CLIPVisionModelWithProjection if projection else transformers.CLIPVisionModel
    hf = _redraw(cls(_clip_vision_config()))
    folder = _save(hf, tmp_path)
    images = _images()
    expected = _torch(hf, images)
    model = keras_vit.ViT(weights=folder, include_top=False)
    assert model.vit_config["projection_size"] == (20 if projection else None)
    assert model.vit_config["mlp_activation"] == "quick_gelu" and model.vit_config["pre_norm"] is True
    _close(model(images), (expected.image_embeds if projection else expected.pooler_output).numpy())


def test_hf_clip_two_towers_image_features(tmp_path):
    text = transformers.CLIPTextConfig(hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                                       num_attention_heads=2, vocab_size=50, projection_dim=20)
    config = transformers.CLIPConfig(text_config=text.to_dict(), vision_config=_clip_vision_config("gelu").to_dict(),
                                     projection_dim=20)
    hf = _redraw(transformers.CLIPModel(config))
    folder = _save(hf, tmp_path)
    images = _images()
    with torch.no_grad():
        expected = hf.get_image_features(pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2)))
    expected = getattr(expected, "pooler_output", expected)
    model = keras_vit.ViT(weights=folder, include_top=False)
    assert model.vit_config["mlp_activation"] == "gelu"
    _close(model(images), expected.numpy())


def test_hf_deit_distilled_averages_both_heads(tmp_path):
    config = transformers.DeiTConfig(
        hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=MLP,
        image_size=IMAGE, patch_size=PATCH, num_labels=7,
    )
    hf = _redraw(transformers.DeiTForImageClassificationWithTeacher(config))
    folder = _save(hf, tmp_path)
    images = _images()
    model = keras_vit.ViT(weights=folder, classifier_activation=None)
    assert model.output_shape == (None, 7) and model.vit_config["distillation_token"] is True
    _close(model(images), _torch(hf, images).logits.numpy())
    # Either head alone is far from the mean: the test would catch a dropped or swapped head.
    cls_only = _torch(hf, images).cls_logits.numpy()
    assert np.abs(cls_only - to_numpy(model(images))).max() > 1e-2


@pytest.mark.parametrize("registers", [0, REGISTERS])
def test_hf_dinov2_classifier_reads_class_and_mean_patch_token(registers, tmp_path):
    common = dict(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS, mlp_ratio=3,
                  image_size=IMAGE, patch_size=PATCH, layerscale_value=1e-5, num_labels=7)
    if registers:
        config = transformers.Dinov2WithRegistersConfig(num_register_tokens=registers, **common)
        hf = _redraw(transformers.Dinov2WithRegistersForImageClassification(config))
    else:
        hf = _redraw(transformers.Dinov2ForImageClassification(transformers.Dinov2Config(**common)))
    folder = _save(hf, tmp_path)
    images = _images()
    model = keras_vit.ViT(weights=folder, classifier_activation=None)
    assert model.vit_config["pooling"] == "token_and_mean" and model.output_shape == (None, 7)
    _close(model(images), _torch(hf, images).logits.numpy())


def test_hf_deit_single_head_is_refused_naming_the_class_and_the_supported_ones(tmp_path):
    config = transformers.DeiTConfig(hidden_size=HIDDEN, num_hidden_layers=1, num_attention_heads=HEADS,
                                     intermediate_size=MLP, image_size=IMAGE, patch_size=PATCH, num_labels=3)
    folder = _save(transformers.DeiTForImageClassification(config), tmp_path)
    with pytest.raises(CheckpointError, match="DeiTForImageClassification head .*Supported Hugging Face DeiT "
                                              "classes: DeiTModel, DeiTForImageClassificationWithTeacher"):
        keras_vit.ViT(weights=folder)


# DINOv3 on a grid of 3x5 patches: odd, not square, not the 4x4 of the config's image size.
ROPE_IMAGE = (3 * PATCH, 5 * PATCH)


@pytest.mark.parametrize("gated", [False, True])
def test_hf_dinov3_tokens_blocks_and_attention(gated, tmp_path):
    config = transformers.DINOv3ViTConfig(
        hidden_size=HIDDEN, intermediate_size=MLP, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        num_register_tokens=REGISTERS, image_size=IMAGE, patch_size=PATCH, use_gated_mlp=gated,
        hidden_act="silu" if gated else "gelu", attn_implementation="eager")
    hf = _redraw(transformers.DINOv3ViTModel(config))
    folder = _save(hf, tmp_path)
    images = _images(width=ROPE_IMAGE[1], size=ROPE_IMAGE[0])
    expected = _torch(hf, images, output_hidden_states=True, output_attentions=True)
    model = keras_vit.ViT(weights=folder, include_top=False, image_size=ROPE_IMAGE)
    assert model.vit_config["rope"]["grid"] == "centered" and model.vit_config["qkv_bias"] == "qv"
    assert model.vit_config["mlp_activation"] == ("swiglu" if gated else "gelu")
    _close(model(images), expected.pooler_output.numpy())
    # Any size (None): the rotation follows each image's grid, nothing is resampled.
    intermediates = keras_vit.ViT(weights=folder, include_top=False, image_size=None).intermediates_model()(images)
    _close(intermediates["tokens"], expected.last_hidden_state.numpy())  # class, registers, patches
    maps = keras_vit.inspect.attention_model(model)(images)  # the inspection probe of the fixed-size model
    for block, attention, probed, hf_block, hf_attention in zip(
            intermediates["blocks"], intermediates["attention"], maps, expected.hidden_states[1:], expected.attentions):
        _close(block, hf_block.numpy())
        _close(attention, hf_attention.numpy())
        _close(probed, hf_attention.numpy())


def test_hf_unknown_model_type_is_refused_naming_it(tmp_path):
    hf = _hf_dinov2()
    folder = _save(hf, tmp_path)
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    config["model_type"] = "beit"
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    with pytest.raises(CheckpointError, match=r"model_type='beit'.*supported model_type values: \['clip'"):
        keras_vit.ViT(weights=folder)


# ------------------------------------------------------------------------------------------
# timm

timm = import_timm()
needs_timm = pytest.mark.skipif(timm is None, reason="timm parity needs timm (pip install --no-deps timm)")


def _timm_file(name, tmp_path, **kwargs):
    from safetensors.torch import save_file

    kwargs = {"img_size": IMAGE, "patch_size": PATCH, "embed_dim": HIDDEN, "depth": LAYERS, "num_heads": HEADS,
              "mlp_ratio": MLP / HIDDEN, **kwargs}
    model = _redraw(timm.create_model(name, pretrained=False, **kwargs))
    path = os.path.join(tmp_path, "model.safetensors")
    save_file({key: value.contiguous() for key, value in model.state_dict().items()}, path)
    return model, path


def _timm_output(model, images):
    with torch.no_grad():
        return model(torch.from_numpy(images.transpose(0, 3, 1, 2))).numpy()


@needs_timm
@pytest.mark.parametrize(
    "name, kwargs, expected_fields",
    [
        ("vit_small_patch14_dinov2", {"num_classes": 0}, {"layer_scale_init": 1e-5}),
        ("vit_small_patch14_reg4_dinov2", {"num_classes": 0, "reg_tokens": REGISTERS},
         {"num_register_tokens": REGISTERS, "prefix_position_embedding": False}),
        ("vit_giant_patch14_dinov2", {"num_classes": 0, "mlp_ratio": 2 * MLP / HIDDEN}, {"mlp_activation": "swiglu"}),
        ("deit3_small_patch16_224", {"num_classes": 5}, {"prefix_position_embedding": False}),
        ("deit_tiny_distilled_patch16_224", {"num_classes": 5}, {"distillation_token": True}),
        ("vit_base_patch16_siglip_224", {"num_classes": 0}, {"pooling": "map", "class_token": False}),
        ("vit_base_patch16_siglip_224", {"num_classes": 6}, {"pooling": "map"}),
    ],
)
def test_timm_family_matches(name, kwargs, expected_fields, tmp_path):
    if name == "vit_giant_patch14_dinov2":
        kwargs = {**kwargs, "mlp_ratio": 2 * MLP / HIDDEN}
    torch_model, path = _timm_file(name, tmp_path, **kwargs)
    images = _images()
    include_top = kwargs["num_classes"] > 0
    model = keras_vit.ViT(weights=path, num_heads=HEADS, include_top=include_top, classifier_activation=None)
    for field, value in expected_fields.items():
        assert model.vit_config[field] == value, field
    _close(model(images), _timm_output(torch_model, images))


@needs_timm
def test_timm_unpacked_swiglu_matches(tmp_path):
    torch_model, path = _timm_file("vit_small_patch14_dinov2", tmp_path, num_classes=0,
                                   mlp_layer=timm.layers.SwiGLU, act_layer=torch.nn.SiLU)
    images = _images()
    model = keras_vit.ViT(weights=path, num_heads=HEADS, include_top=False)
    assert model.vit_config["mlp_activation"] == "swiglu"
    _close(model(images), _timm_output(torch_model, images))


@needs_timm
def test_timm_clip_needs_its_activation_then_matches(tmp_path):
    torch_model, path = _timm_file("vit_base_patch16_clip_quickgelu_224", tmp_path, num_classes=5)
    with pytest.raises(ValueError, match="mlp_activation='quick_gelu'"):
        keras_vit.ViT(weights=path, num_heads=HEADS)
    model = keras_vit.ViT(weights=path, num_heads=HEADS, mlp_activation="quick_gelu", classifier_activation=None)
    assert model.vit_config["pre_norm"] is True and model.vit_config["patch_bias"] is False
    images = _images()
    _close(model(images), _timm_output(torch_model, images))


@pytest.mark.parametrize("registers", [0, REGISTERS])  # bicubic, then antialiased bicubic
def test_hf_dinov2_at_another_resolution_matches_its_interpolation(registers, tmp_path):
    hf = _hf_dinov2(registers)
    folder = _save(hf, tmp_path)
    images = _images(size=IMAGE + PATCH)  # a 5x5 grid from the stored 4x4
    expected = _torch(hf, images).pooler_output.numpy()
    _close(keras_vit.ViT(weights=folder, include_top=False, image_size=IMAGE + PATCH)(images), expected)
    _close(keras_vit.ViT(weights=folder, include_top=False, image_size=None)(images), expected)


def _timm_eva_folder(name, tmp_path, **model_args):
    """A timm Hub folder (config.json naming the architecture, model_args) of a random Eva-built model (DINOv3, EVA-02, PE), and the model."""
    from safetensors.torch import save_file

    args = {"img_size": IMAGE, "patch_size": PATCH, "embed_dim": HIDDEN, "depth": LAYERS, "num_heads": HEADS,
            "num_classes": 5, **model_args}
    model = _redraw(timm.create_model(name, pretrained=False, **args))
    tensors = {key: value.contiguous() for key, value in model.state_dict().items()}
    # The rotary tables too, as older timm versions saved them: computed, so skipped on reading.
    tensors.update({f"rope.{key}": value.contiguous() for key, value in model.rope.named_buffers()})
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"architecture": name, "num_classes": 5, "model_args": args}))
    return model, str(tmp_path)


@needs_timm
@pytest.mark.parametrize("name, model_args, fields", [
    ("vit_small_patch16_dinov3", {}, dict(qkv_bias="none", mlp_activation="gelu", pooling="gap")),
    ("vit_small_plus_patch16_dinov3_qkvb", {"global_pool": "token", "mlp_ratio": 2.0},
     dict(qkv_bias="qv", mlp_activation="swiglu", pooling="token", mlp_dim=72)),
])
def test_timm_dinov3_hub_folder_matches(name, model_args, fields, tmp_path):
    torch_model, folder = _timm_eva_folder(name, tmp_path, num_reg_tokens=REGISTERS, **model_args)
    model = keras_vit.ViT(weights=folder, classifier_activation=None, image_size=ROPE_IMAGE)
    for field, value in fields.items():
        assert model.vit_config[field] == value, field
    images = _images(size=ROPE_IMAGE[0], width=ROPE_IMAGE[1])
    _close(model(images), _timm_output(torch_model, images))
    # The state dict alone does not say its position is rotary: refused, naming what to pass.
    os.remove(os.path.join(folder, "config.json"))
    with pytest.raises(ValueError, match=r"stores no position embedding.*rope="):
        keras_vit.ViT(weights=os.path.join(folder, "model.safetensors"), num_heads=HEADS)


# PE-Core: the attention pool with 4 heads of its own (3 in the blocks) and a 3x5 reference grid; the B/16 name's pool
# MLP is wider than the blocks' (ratio 4 against 2.5), the G/14 name (no class token, no rope offset) is given the
# blocks' ratio, which the config states as None. timm resamples its position table and recomputes its rotary position
# for the image at hand (dynamic_img_size), as keras_vit does.
@needs_timm
@pytest.mark.parametrize("name, model_args, fields", [
    ("vit_pe_core_base_patch16_224", {}, dict(class_token=True, pooling_mlp_dim=4 * HIDDEN)),
    ("vit_pe_core_gigantic_patch14_448", {"attn_pool_mlp_ratio": MLP / HIDDEN},
     dict(class_token=False, pooling_mlp_dim=None)),
])
def test_timm_pe_core_hub_folder_matches(name, model_args, fields, tmp_path):
    torch_model, folder = _timm_eva_folder(name, tmp_path, mlp_ratio=MLP / HIDDEN, attn_pool_num_heads=4,
                                           ref_feat_shape=[3, 5], dynamic_img_size=True, **model_args)
    images = _images(size=ROPE_IMAGE[0], width=ROPE_IMAGE[1])
    expected = _timm_output(torch_model, images)
    for size in (ROPE_IMAGE, None):  # the stored 4x4 grid resampled at load, then at call time
        model = keras_vit.ViT(weights=folder, classifier_activation=None, image_size=size)
        _close(model(images), expected)
    # Intermediates through the public API: each block's patch tokens as timm's, the pool's 4 heads.
    out = model.intermediates_model()(images)
    with torch.no_grad():
        blocks = torch_model.forward_intermediates(torch.from_numpy(images.transpose(0, 3, 1, 2)), output_fmt="NLC",
                                                   intermediates_only=True)
    config, prefix = model.vit_config, int(fields["class_token"])
    for mine, theirs in zip(out["blocks"], blocks, strict=True):
        _close(to_numpy(mine)[:, prefix:], theirs.numpy())
    assert tuple(out["pooling_attention"].shape) == (2, 4, 1, prefix + 15)
    assert (config["pooling"], config["pooling_heads"], config["pre_norm"], config["patch_bias"]) == (
        "map", 4, True, False)
    assert config["rope"]["reference_grid"] == (3, 5) and config["qkv_bias"] == "qkv"
    for field, value in fields.items():
        assert config[field] == value, field
    os.remove(os.path.join(folder, "config.json"))  # the state dict alone hides the rotation and the pool's heads
    with pytest.raises(CheckpointError, match=r"norm_pre and attn_pool, as timm's PE-Core .*config.json"):
        keras_vit.ViT(weights=os.path.join(folder, "model.safetensors"), num_heads=HEADS)


@needs_timm
@pytest.mark.parametrize("name, model_args, image_size, fields", [
    # Built for 4x4 patches, run on 5x6 (timm resamples its table per call): the table resampled, the rotary grid not.
    ("eva02_tiny_patch14_336", {"dynamic_img_size": True}, (5 * PATCH, 6 * PATCH),
     dict(qkv_bias="qv", mlp_norm=False, fc_norm=True, pooling="gap")),
    # Separate q, k, v and the MLP's LayerNorm, built for (and run on) a 3x5 grid.
    ("eva02_base_patch14_448", {"img_size": list(ROPE_IMAGE)}, ROPE_IMAGE,
     dict(qkv_bias="qv", mlp_norm=True, fc_norm=True, mlp_dim=96)),
])
def test_timm_eva02_hub_folder_matches(name, model_args, image_size, fields, tmp_path):
    torch_model, folder = _timm_eva_folder(name, tmp_path, **model_args)
    model = keras_vit.ViT(weights=folder, classifier_activation=None, image_size=image_size)
    for field, value in fields.items():
        assert model.vit_config[field] == value, field
    images = _images(size=image_size[0], width=image_size[1])
    outputs = model.intermediates_model()(images)
    _close(outputs["output"], _timm_output(torch_model, images))
    with torch.no_grad():  # timm's forward_features: every token, no norm after the blocks (fc_norm follows pooling)
        tokens = torch_model.forward_features(torch.from_numpy(images.transpose(0, 3, 1, 2))).numpy()
    scale = np.abs(tokens).max()  # un-normalised (|x| up to ~50): float32 rounding compared to their largest
    _close(to_numpy(outputs["tokens"]) / scale, tokens / scale)


@needs_timm
@pytest.mark.parametrize("variant, reference", [
    ("dinov3", dict(rope_type="dinov3", temperature=100.0)),
    ("eva02", dict(rope_type="cat", in_pixels=False, ref_feat_shape=(16, 16))),  # timm's eva02_*
    ({"variant": "pe", "reference_grid": (4, 6)},  # timm's vit_pe_core_*
     dict(rope_type="cat", in_pixels=False, ref_feat_shape=(4, 6), grid_offset=1.0, grid_indexing="xy")),
])
def test_rotary_settings_rotate_as_timm(variant, reference):
    """The DINOv3, EVA-02 and PE-Core settings of RotaryPositionEmbedding turn queries as timm's rope modules do."""
    from keras_vit.layers.rotary_embedding import RotaryPositionEmbedding, apply_rotary, rope_settings
    from timm.layers.pos_embed_sincos import apply_rot_embed_cat, create_rope_embed

    width, (rows, cols) = 16, (3, 5)
    queries = np.random.default_rng(0).normal(size=(2, 1 + rows * cols, HEADS, width)).astype("float32")
    rope = RotaryPositionEmbedding(PATCH, width, num_prefix_tokens=1, **rope_settings(variant))(
        np.zeros((1, rows * PATCH, cols * PATCH, 3), "float32"))
    half = rope_settings(variant)["layout"] == "half"
    embed = create_rope_embed(dim=width * HEADS, num_heads=HEADS, rotate_half=half, **reference).get_embed((rows, cols))
    patches = torch.from_numpy(queries[:, 1:]).transpose(1, 2)  # (B, heads, N, w), as timm's attention
    expected = apply_rot_embed_cat(patches, embed, half=half).transpose(1, 2).numpy()
    rotated = to_numpy(apply_rotary(queries, rope))
    np.testing.assert_array_equal(rotated[:, 0], queries[:, 0])  # the class token is not rotated
    _close(rotated[:, 1:], expected)
