"""Parity with Hugging Face transformers' PyTorch ViT: random-initialised models saved with
save_pretrained (safetensors + config.json), loaded into keras_vit, logits compared in float32
(the keras_vit models are built with classifier_activation=None to return logits)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="parity tests need torch (pip install -e '.[parity]')")
transformers = pytest.importorskip("transformers", reason="parity tests need transformers (the parity extra)")

import keras_vit  # noqa: E402

from helpers import ALL_BACKENDS, to_numpy  # noqa: E402

pytestmark = ALL_BACKENDS

CONFIGS = {
    # hidden, layers, heads, mlp, image, patch, eps, classes
    "h32_img32_p8_eps1e-12_c10": (32, 2, 2, 64, 32, 8, 1e-12, 10),
    "h48_img48_p16_eps1e-6_c1000": (48, 2, 4, 96, 48, 16, 1e-6, 1000),
    "h64_img64_p16_eps1e-5_c10": (64, 2, 4, 128, 64, 16, 1e-5, 10),
}


def _hf_model(hidden, layers, heads, mlp, image, patch, eps, classes, pooler=False, seed=0):
    torch.manual_seed(seed)
    config = transformers.ViTConfig(
        hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=mlp,
        image_size=image, patch_size=patch, layer_norm_eps=eps, num_labels=classes,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )
    if pooler:
        model = transformers.ViTModel(config, add_pooling_layer=True)
    else:
        model = transformers.ViTForImageClassification(config)
    with torch.no_grad():  # HF zero-inits some biases and the cls token; randomise everything
        for param in model.parameters():
            param.copy_(torch.randn_like(param) * 0.2)
    return model.eval()


def _images(size, seed=1, batch=2):
    return np.random.default_rng(seed).normal(size=(batch, size, size, 3)).astype("float32")


def _hf_logits(model, images, **kwargs):
    with torch.no_grad():
        out = model(pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2)), **kwargs)
    return (out.logits if hasattr(out, "logits") else out.pooler_output).numpy()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_hf_logits_match(name, tmp_path):
    hidden, layers, heads, mlp, image, patch, eps, classes = CONFIGS[name]
    hf = _hf_model(*CONFIGS[name])
    hf.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    model = keras_vit.ViT(weights=str(tmp_path), classifier_activation=None)
    block = model.get_layer("encoderblock_0")
    assert block.layer_norm_epsilon == eps and block.approximate_gelu is False
    assert model.output_shape == (None, classes)
    images = _images(image)
    diff = np.abs(to_numpy(model(images)) - _hf_logits(hf, images)).max()
    assert diff <= 1e-4, diff
    # The same file through its path (format from content, config.json read beside it).
    again = keras_vit.ViT(weights=str(tmp_path / "model.safetensors"), classifier_activation=None)
    np.testing.assert_array_equal(to_numpy(again(images)), to_numpy(model(images)))


@pytest.mark.parametrize("new_size", [48, 64])
def test_hf_interpolate_pos_encoding_matches_resampled_and_dynamic(new_size, tmp_path):
    config = CONFIGS["h32_img32_p8_eps1e-12_c10"]
    hf = _hf_model(*config)
    hf.save_pretrained(tmp_path)
    images = _images(new_size)
    expected = _hf_logits(hf, images, interpolate_pos_encoding=True)
    resampled = keras_vit.ViT(weights=str(tmp_path), image_size=new_size, classifier_activation=None)
    assert resampled.get_layer("embedding").interpolation == "bicubic_hf"
    assert np.abs(to_numpy(resampled(images)) - expected).max() <= 1e-4
    dynamic = keras_vit.ViT(weights=str(tmp_path), image_size=(None, None), classifier_activation=None)
    assert np.abs(to_numpy(dynamic(images)) - expected).max() <= 1e-4
    same = _images(32)
    assert np.abs(to_numpy(dynamic(same)) - _hf_logits(hf, same)).max() <= 1e-4


def test_hf_pooler_is_pre_logits(tmp_path):
    hf = _hf_model(32, 2, 2, 64, 32, 8, 1e-12, 10, pooler=True)
    hf.save_pretrained(tmp_path)
    model = keras_vit.ViT(weights=str(tmp_path), include_top=False, representation_size=32)
    images = _images(32)
    assert np.abs(to_numpy(model(images)) - _hf_logits(hf, images)).max() <= 1e-4
