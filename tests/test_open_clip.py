"""open_clip Hub folders as `keras_vit.ImageTextModel`: parity with open_clip's own CLIP, tokenizer and eval transform.

The folder is what open_clip's Hub push writes (`open_clip.push_to_hf_hub.save_for_hf`:
open_clip_config.json, open_clip_model.safetensors, Hugging Face CLIP tokenizer files) for a tiny
`open_clip.model.CLIP` of random weights with CLIP's real vocabulary. open_clip imports
torchvision, which its model does not use and which does not load beside the CPU build of torch
pinned here (tests/_timm_import.py): a placeholder stands in for it during the import, and
open_clip's eval transform (torchvision's Resize and CenterCrop on a PIL image) is computed as
torchvision computes it, with PIL (`_eval_transform`).
"""

import json
import os
import shutil
import sys
import warnings

import numpy as np
import pytest

import _image_text_fixtures as fixtures

torch = pytest.importorskip("torch")
if fixtures.missing():
    pytest.skip(fixtures.missing(), allow_module_level=True)

import keras_vit  # noqa: E402
from helpers import to_numpy  # noqa: E402
from keras_vit.weights import CheckpointError  # noqa: E402
from keras_vit.weights.open_clip_layout import CONFIG_FILE, TORCH_WEIGHTS_FILE, WEIGHTS_FILE  # noqa: E402

TOLERANCE = 1e-4
TEXTS = ["a photo of a cat", "A DOG, running!", "", "an &amp; sign, naïve café", "word " * 90]
# A tiny open_clip CLIP: 32-pixel images in 8-pixel patches, two blocks of width 32 a tower, an MLP 1.5 wide.
MODEL_CFG = {
    "embed_dim": 24,
    "vision_cfg": {"image_size": 32, "layers": 2, "width": 32, "head_width": 16, "patch_size": 8, "mlp_ratio": 1.5},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2, "mlp_ratio": 1.5},
}
PREPROCESS_CFG = {"mean": [0.5, 0.4, 0.3], "std": [0.2, 0.25, 0.3], "interpolation": "bicubic",
                  "resize_mode": "shortest"}


def _open_clip():
    """The open_clip package (and its Hub writer), imported beside a placeholder torchvision where need be."""
    import transformers
    from _timm_import import import_beside_placeholder

    # open_clip imports transformers, which must first see the torchvision that is really there.
    transformers.CLIPModel  # noqa: B018
    open_clip = import_beside_placeholder("open_clip")
    import_beside_placeholder("open_clip.push_to_hf_hub")
    return open_clip


class _VocabularyWriter:
    """What save_for_hf asks of a tokenizer: CLIP's real vocabulary and merges, as vocab.json and merges.txt."""

    def save_pretrained(self, folder):
        fixtures.write_clip_vocabulary(str(folder))


def _make(folder, quick_gelu=False, logit_bias=None, preprocess_cfg=PREPROCESS_CFG):
    """An open_clip CLIP of random weights saved as open_clip's Hub push saves it; returns the torch model."""
    open_clip = _open_clip()
    model_cfg = dict(MODEL_CFG, quick_gelu=quick_gelu)
    if logit_bias is not None:
        model_cfg["init_logit_bias"] = logit_bias
    model = fixtures._redraw(open_clip.model.CLIP(**model_cfg), 0.3, seed=int(quick_gelu))
    open_clip.model.set_model_preprocess_cfg(model, dict(preprocess_cfg, size=32))
    save_for_hf = sys.modules["open_clip.push_to_hf_hub"].save_for_hf  # the package's push_to_hf_hub is a function
    save_for_hf(model, _VocabularyWriter(), model_cfg, folder, safe_serialization=True)
    return model


_MADE = {}


def _made(tmp_path_factory, quick_gelu=False):
    """(ImageTextModel, torch model) of the folder `_make` writes, made and read once per test process."""
    if quick_gelu not in _MADE:
        folder = str(tmp_path_factory.mktemp(f"open_clip_{quick_gelu}"))
        reference = _make(folder, quick_gelu)
        _MADE[quick_gelu] = keras_vit.ImageTextModel(weights=folder), reference
    return _MADE[quick_gelu]


def _eval_transform(image, size):
    """open_clip's eval transform at a square `size` up to ToTensor, as uint8 (height, width, 3).

    torchvision's Resize(size) on a PIL image: the short side to `size`, the long one to
    int(size * long / short), PIL bicubic; its CenterCrop: offsets int(round((side - size) / 2)).
    """
    from PIL import Image

    height, width = image.shape[:2]
    short, long = min(height, width), max(height, width)
    new_long = int(size * long / short)
    new_h, new_w = (new_long, size) if height > width else (size, new_long)
    resized = np.asarray(Image.fromarray(image).resize((new_w, new_h), Image.BICUBIC))
    top, left = int(round((new_h - size) / 2.0)), int(round((new_w - size) / 2.0))
    return resized[top:top + size, left:left + size]


def _reference_pixels(images, size, preprocess_cfg=PREPROCESS_CFG):
    mean, std = (np.asarray(preprocess_cfg[key], "float32") for key in ("mean", "std"))
    pixels = np.stack([(_eval_transform(image, size) / 255.0 - mean) / std for image in images])
    return torch.from_numpy(pixels.transpose(0, 3, 1, 2).astype("float32"))


def _close(found, expected):
    difference = np.abs(np.asarray(found) - np.asarray(expected)).max()
    assert difference <= TOLERANCE, difference
    return difference


def test_embeddings_logits_and_tokens_equal_open_clips(tmp_path_factory):
    model, reference = _made(tmp_path_factory)
    open_clip = _open_clip()
    assert model.open_clip and model.kind == "clip" and model.logit_bias is None
    block = model.text_encoder.get_layer("encoderblock_0")
    assert block.mlp_activation == "gelu" and not block.approximate_gelu  # quick_gelu false: torch's exact GELU
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        tokens = model.tokenize(TEXTS)
    assert len(said) == 1 and "1 of 5 texts" in str(said[0].message)  # the long text, truncated as open_clip does
    expected_ids = open_clip.tokenizer.tokenize(TEXTS).numpy()
    np.testing.assert_array_equal(tokens["input_ids"], expected_ids)  # open_clip's ids, padded with 0 to 77
    images = [fixtures.images(1, seed=1, size=(40, 53))[0], fixtures.images(1, seed=2, size=(71, 23))[0]]
    with torch.no_grad():
        texts = reference.encode_text(torch.from_numpy(expected_ids), normalize=True).numpy()
        pixels = reference.encode_image(_reference_pixels(images, 32), normalize=True).numpy()
        logits = reference.get_logits(_reference_pixels(images, 32), torch.from_numpy(expected_ids))[0].numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _close(model.encode_texts(TEXTS), texts)
        _close(model.logits(images, TEXTS), logits)
    _close(model.encode_images(images), pixels)
    assert model.logit_scale == pytest.approx(np.exp(1.7), rel=1e-6)


def test_processor_is_open_clips_eval_transform_on_non_square_photos(tmp_path_factory):
    model, _ = _made(tmp_path_factory)
    processor = model.image_encoder.vit_config["image_processor"]
    assert (processor["resize"], processor["crop_offset"], processor["interpolation"]) == (
        "shortest_edge", "round", "bicubic")
    assert model.preprocessing.mean == tuple(PREPROCESS_CFG["mean"])
    # Margins of 5 and 3 pixels: torchvision's rounded offsets (2, 2) where a floor gives (2, 1).
    for size in ((40, 53), (71, 23), (32, 35), (96, 67)):
        image = fixtures.images(1, seed=sum(size), size=size)[0]
        found = keras_vit.image_processor.process_image(image, processor, (32, 32))
        assert np.abs(found - _eval_transform(image, 32)).max() <= 1.0, size


@pytest.mark.backends("tensorflow", "jax", "torch")
def test_quick_gelu_towers_equal_open_clips_on_every_backend(tmp_path_factory):
    model, reference = _made(tmp_path_factory, quick_gelu=True)
    assert model.image_encoder.get_layer("encoderblock_0").mlp_activation == "quick_gelu"
    ids = _open_clip().tokenizer.tokenize(TEXTS[:3])
    pixels = _reference_pixels([fixtures.images(1, size=(32, 32))[0]], 32)
    with torch.no_grad():
        texts = reference.encode_text(ids).numpy()
        images = reference.encode_image(pixels).numpy()
    _close(to_numpy(model.text_encoder(model.tokenize(TEXTS[:3]))), texts)
    _close(to_numpy(model.image_encoder(pixels.numpy().transpose(0, 2, 3, 1))), images)


def test_hub_id_reads_an_open_clip_repository_from_the_cache(tmp_path_factory, tmp_path, monkeypatch):
    from test_hub import fill_cache

    model, _ = _made(tmp_path_factory)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    fill_cache(str(tmp_path / "cache"), "someone/open-clip-tiny", model.path, "e" * 40)
    loaded = keras_vit.ImageTextModel(weights="hf-hub:someone/open-clip-tiny", cache_dir=str(tmp_path / "cache"))
    assert loaded.open_clip
    np.testing.assert_allclose(loaded.encode_texts(TEXTS[:2]), model.encode_texts(TEXTS[:2]), atol=1e-6)


def test_save_hf_writes_a_clip_folder_transformers_reads(tmp_path_factory, tmp_path):
    import transformers

    model, _ = _made(tmp_path_factory)
    folder = tmp_path / "hf"
    with pytest.warns(UserWarning, match="rounds"):
        model.save_hf(folder)
    loaded = transformers.CLIPModel.from_pretrained(folder).eval()
    ids = model.tokenize(TEXTS[:3])
    with torch.no_grad():
        expected = loaded.get_text_features(**fixtures.torch_inputs(ids))
    _close(model.text_encoder(ids), getattr(expected, "pooler_output", expected).numpy())


def test_a_stored_logit_bias_is_added_and_save_hf_will_not_drop_it(tmp_path):
    reference = _make(str(tmp_path / "biased"), logit_bias=-2.5)
    model = keras_vit.ImageTextModel(weights=str(tmp_path / "biased"))
    assert model.logit_bias == pytest.approx(-2.5)
    images = [fixtures.images(1, seed=3, size=(36, 32))[0]]
    ids = _open_clip().tokenizer.tokenize(TEXTS[:2])
    with torch.no_grad():
        expected = reference.get_logits(_reference_pixels(images, 32), ids)[0].numpy()
    _close(model.logits(images, TEXTS[:2]), expected)
    with pytest.raises(ValueError, match="logit_bias.*CLIPModel has no place for"):
        model.save_hf(tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def _copy(model, folder, *, leave_out=(), config=None):
    os.makedirs(folder)
    for name in os.listdir(model.path):
        if name not in leave_out:
            shutil.copy(os.path.join(model.path, name), os.path.join(folder, name))
    if config is not None:
        with open(os.path.join(folder, CONFIG_FILE), "w") as file:
            json.dump(config, file)
    return str(folder)


def test_unsupported_configs_and_missing_files_are_refused_by_name(tmp_path_factory, tmp_path):
    model, _ = _made(tmp_path_factory)
    with open(os.path.join(model.path, CONFIG_FILE)) as file:
        config = json.load(file)
    timm_tower = json.loads(json.dumps(config))
    timm_tower["model_cfg"]["vision_cfg"]["timm_model_name"] = "vit_base_patch16_224"
    with pytest.raises(CheckpointError, match="vision_cfg.timm_model_name is 'vit_base_patch16_224'"):
        keras_vit.ImageTextModel(weights=_copy(model, tmp_path / "timm", config=timm_tower))
    hf_text = json.loads(json.dumps(config))
    hf_text["model_cfg"]["text_cfg"]["hf_model_name"] = "roberta-base"
    with pytest.raises(CheckpointError, match="text_cfg.hf_model_name is 'roberta-base'"):
        keras_vit.ImageTextModel(weights=_copy(model, tmp_path / "hf_text", config=hf_text))
    longest = json.loads(json.dumps(config))
    longest["preprocess_cfg"]["resize_mode"] = "longest"
    with pytest.raises(CheckpointError, match="resize_mode is 'longest'"):
        keras_vit.ImageTextModel(weights=_copy(model, tmp_path / "longest", config=longest))
    with pytest.raises(CheckpointError, match="no tokenizer files.*tokenizer.json or vocab.json \\+ merges.txt"):
        keras_vit.ImageTextModel(weights=_copy(model, tmp_path / "bare", leave_out=("vocab.json", "merges.txt")))
    torch_only = _copy(model, tmp_path / "torch_only", leave_out=(WEIGHTS_FILE,))
    open(os.path.join(torch_only, TORCH_WEIGHTS_FILE), "wb").close()
    with pytest.raises(CheckpointError, match=f"no {WEIGHTS_FILE}.*{TORCH_WEIGHTS_FILE}.*convert it first"):
        keras_vit.ImageTextModel(weights=torch_only)


def test_zeroshot_command_on_an_open_clip_folder_prints_open_clips_probabilities(tmp_path, capsys):
    """`keras-vit zeroshot --weights FOLDER` on an open_clip folder: each label's probability is open_clip's
    softmax of its logits for the default template, on a photo that is not square."""
    from PIL import Image

    from keras_vit import cli

    # OpenAI's mean and std, as open_clip's CLIP checkpoints state: a classifier scales pixels with a named rule.
    clip_scaling = dict(PREPROCESS_CFG, mean=[0.48145466, 0.4578275, 0.40821073], std=[0.26862954, 0.26130258, 0.27577711])
    folder = str(tmp_path / "open_clip")
    reference = _make(folder, preprocess_cfg=clip_scaling)
    labels = ["cat", "dog", "airplane"]
    image = fixtures.images(1, seed=3, size=(40, 53))[0]
    photo = tmp_path / "photo.png"
    Image.fromarray(image).save(photo)
    ids = _open_clip().tokenizer.tokenize([f"This is a photo of {label}." for label in labels])
    with torch.no_grad():
        probabilities = reference.get_logits(_reference_pixels([image], 32, clip_scaling), ids)[0].softmax(-1)[0].numpy()
    assert cli.main(["zeroshot", "--weights", folder, "--labels", ",".join(labels), str(photo)]) == 0
    printed = {line.split()[1]: float(line.split()[0]) for line in capsys.readouterr().out.splitlines()
               if line.startswith("  ")}
    assert printed == pytest.approx(dict(zip(labels, probabilities.tolist())), abs=1e-4)
