"""ImageTextModel against transformers 5.24: CLIP, SigLIP and SigLIP 2 two-tower folders of random weights.

Text and image embeddings and `logits_per_image` within 1e-4 of the torch models that
save_pretrained wrote (tests/_image_text_fixtures.py), `save_hf` read back by transformers, the
text tower on every backend, and the refusals.
"""

import json
import os
import shutil
import warnings

import numpy as np
import pytest

import _image_text_fixtures as fixtures

if fixtures.missing():
    pytest.skip(fixtures.missing(), allow_module_level=True)

import keras_vit  # noqa: E402
from helpers import to_numpy  # noqa: E402

TEXTS = ["This is a photo of a cat.", "", "A DOG's toy, really?", " ".join(["word"] * 80)]
TOLERANCE = 1e-4


def _model(kind, tmp_path_factory):
    folder, reference = fixtures.made(kind, tmp_path_factory)
    return fixtures.loaded(kind, tmp_path_factory), reference


def _close(found, expected):
    difference = np.abs(np.asarray(found) - np.asarray(expected)).max()
    assert difference <= TOLERANCE, difference


@pytest.mark.parametrize("kind", ["clip", "siglip", "siglip2"])
def test_embeddings_and_logits_match_transformers(kind, tmp_path_factory):
    import torch

    model, reference = _model(kind, tmp_path_factory)
    assert model.kind == kind and (model.logit_bias is None) == (kind == "clip")
    # A wide and a tall photo: CLIP's processor resizes the short side and crops, SigLIP's squashes, SigLIP 2's
    # cuts its own grid; each resized as PIL resizes (a tall one's height first).
    images = fixtures.photos()
    pixels = fixtures.reference_pixels(model.path, images)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the long text's truncation is said; tested with the tokenizers
        tokens = model.tokenize(TEXTS)
        texts = model.encode_texts(TEXTS)
    with torch.no_grad():
        expected = reference(**fixtures.torch_inputs(tokens), **pixels)
    _close(texts, expected.text_embeds.numpy())
    np.testing.assert_allclose(np.linalg.norm(texts, axis=1), 1.0, atol=1e-6)
    _close(model.encode_images(images), expected.image_embeds.numpy())
    logits = model.logits(images, TEXTS)
    _close(logits, expected.logits_per_image.numpy())
    assert logits.shape == (2, len(TEXTS))


def test_processor_config_json_alone_states_the_processor(tmp_path_factory, tmp_path):
    """transformers 5 writes a whole processor's image settings to processor_config.json, not preprocessor_config.json."""
    model, reference = _model("clip", tmp_path_factory)
    folder = tmp_path / "processor_config_only"
    shutil.copytree(model.path, folder, ignore=shutil.ignore_patterns("preprocessor_config.json"))
    assert (folder / "processor_config.json").is_file()
    images = fixtures.photos()
    expected = fixtures.reference_image_embeddings(reference, fixtures.reference_pixels(model.path, images))
    again = keras_vit.ImageTextModel(weights=str(folder))
    assert again.image_encoder.vit_config["image_processor"]["resize"] == "shortest_edge"
    _close(again.encode_images(images), expected)


@pytest.mark.backends("tensorflow", "jax", "torch")
@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_text_tower_matches_transformers_on_every_backend(kind, tmp_path_factory):
    model, reference = _model(kind, tmp_path_factory)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tokens = model.tokenize(TEXTS)
    _close(to_numpy(model.text_encoder(tokens)), fixtures.reference_text_embeddings(reference, tokens))


@pytest.mark.parametrize("kind, reference_class", [("clip", "CLIPModel"), ("siglip", "SiglipModel")])
def test_save_hf_writes_a_folder_transformers_loads(kind, reference_class, tmp_path_factory, tmp_path):
    import torch
    import transformers

    model, _ = _model(kind, tmp_path_factory)
    folder = tmp_path / "saved"
    model.save_hf(folder)
    assert {"config.json", "model.safetensors", "tokenizer_config.json", "preprocessor_config.json"} <= set(
        os.listdir(folder))
    with pytest.raises(FileExistsError, match="overwrite=True"):
        model.save_hf(folder)
    loaded = getattr(transformers, reference_class).from_pretrained(folder).eval()
    tokens = model.tokenize(TEXTS[:3])
    images = fixtures.photos()
    with torch.no_grad():
        expected = loaded(**fixtures.torch_inputs(tokens), **fixtures.reference_pixels(folder, images))
    _close(model.logits(images, TEXTS[:3]), expected.logits_per_image.numpy())
    again = keras_vit.ImageTextModel(weights=str(folder))
    np.testing.assert_array_equal(again.tokenize(TEXTS[:3])["input_ids"], tokens["input_ids"])
    assert again.logit_scale == pytest.approx(model.logit_scale, rel=1e-6)


def test_image_only_folders_and_bad_inputs_are_refused(tmp_path_factory, tmp_path):
    model, _ = _model("siglip", tmp_path_factory)
    image_only = tmp_path / "image_only"
    keras_vit.weights.save_hf(model.image_encoder, image_only)
    with pytest.raises(ValueError, match="holds no text tower"):
        keras_vit.ImageTextModel(weights=str(image_only))
    stripped = tmp_path / "stripped"  # a two-tower config whose weights lost the text tower
    stripped.mkdir()
    shutil.copy(os.path.join(model.path, "config.json"), stripped / "config.json")
    shutil.copy(image_only / "model.safetensors", stripped / "model.safetensors")
    with pytest.raises(ValueError, match="holds no text tower"):
        keras_vit.ImageTextModel(weights=str(stripped))
    no_tokenizer = tmp_path / "no_tokenizer"
    no_tokenizer.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(model.path, name), no_tokenizer / name)
    with pytest.raises(ValueError, match="no tokenizer files.*spiece.model"):
        keras_vit.ImageTextModel(weights=str(no_tokenizer))
    with pytest.raises(ValueError, match=r"texts=\[\]"):
        model.encode_texts([])
    with pytest.raises(ValueError, match="Invalid weights='nowhere'"):
        keras_vit.ImageTextModel(weights="nowhere")
    config = json.loads((image_only / "config.json").read_text())
    assert config["model_type"] == "siglip_vision_model"
