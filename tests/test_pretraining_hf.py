"""Hugging Face ViT-MAE folders (issue 53): parity with transformers on random weights, its noise passed in; written back."""

import os

import numpy as np
import pytest

import keras

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import keras_vit  # noqa: E402
from keras_vit.pretraining.hf import load_mae, save_mae_hf  # noqa: E402


def _numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


@pytest.fixture(scope="module")
def hf_mae(tmp_path_factory):
    config = transformers.ViTMAEConfig(
        hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=24, image_size=16, patch_size=4,
        decoder_hidden_size=12, decoder_num_hidden_layers=1, decoder_num_attention_heads=2, decoder_intermediate_size=20,
        mask_ratio=0.75, norm_pix_loss=True)
    torch.manual_seed(0)
    model = transformers.ViTMAEForPreTraining(config).eval()
    with torch.no_grad():  # away from the initialisation's zeros and ones, so every weight counts
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    folder = str(tmp_path_factory.mktemp("vit_mae"))
    model.save_pretrained(folder)
    return model, folder


def _run_hf(model, images, noise):
    pixels = torch.tensor(images / 255.0, dtype=torch.float32).permute(0, 3, 1, 2)
    with torch.no_grad():
        return model(pixels, noise=torch.tensor(noise)), model.vit(pixels, noise=torch.tensor(noise))


def test_parity_with_transformers_noise_passed_in(hf_mae, tmp_path):
    hf, folder = hf_mae
    model, info = load_mae(folder, scaling="unit")
    rng = np.random.RandomState(0)
    images = rng.randint(0, 256, (2, 16, 16, 3)).astype("float32")
    noise = rng.rand(2, 16).astype("float32")
    expected, encoded = _run_hf(hf, images, noise)
    tokens, mask, _ = model.encode(images, noise=noise)
    out = model(images, noise=noise)
    np.testing.assert_array_equal(_numpy(out["mask"]), expected.mask.numpy())
    np.testing.assert_allclose(_numpy(tokens), encoded.last_hidden_state.numpy(), atol=1e-5)
    np.testing.assert_allclose(_numpy(out["logits"]), expected.logits.numpy(), atol=1e-5)
    assert float(model.compute_loss(images, None, out)) == pytest.approx(float(expected.loss), abs=1e-5)
    assert model.mask_ratio == 0.75 and model.norm_pix_loss and info.pooling == "gap"
    # Written back, transformers reads the same model.
    back = str(tmp_path / "back")
    save_mae_hf(model, back)
    again, _ = _run_hf(transformers.ViTMAEForPreTraining.from_pretrained(back).eval(), images, noise)
    np.testing.assert_allclose(again.logits.numpy(), expected.logits.numpy(), atol=1e-6)
    assert sorted(os.listdir(back)) == ["config.json", "model.safetensors", "preprocessor_config.json"]


def test_folder_is_a_backbone(hf_mae):
    _, folder = hf_mae
    backbone = keras_vit.ViT(weights=folder, include_top=False, preprocessing="unit")
    assert backbone.vit_config["pooling"] == "gap" and backbone.output_shape == (None, 16)
    assert backbone.vit_config["layer_norm_epsilon"] == 1e-12


def test_an_encoder_the_folder_cannot_hold_is_refused(tmp_path):
    from keras_vit.pretraining.mae import MaskedAutoencoder

    encoder = keras_vit.ViT(patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, image_size=16,
                            include_top=False, layer_scale_init=0.1)
    with pytest.raises(ValueError, match="layer_scale_init=0.1"):
        save_mae_hf(MaskedAutoencoder(encoder, decoder="test"), str(tmp_path / "out"))
    assert not os.path.exists(tmp_path / "out")
