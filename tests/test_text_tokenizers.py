"""The tokenizers of image-text checkpoints give the ids transformers 5's zero-shot pipeline gives (and open_clip's, for CLIP).

The folders (tests/_image_text_fixtures.py) hold CLIP's real vocabulary, a SentencePiece model
and a Gemma-style tokenizer.json trained on local text; the reference is the tokenizer
transformers' AutoTokenizer loads from the same folder, called with the pipeline's arguments.
"""

import json
import os
import shutil
import sys
import warnings

import numpy as np
import pytest

import _image_text_fixtures as fixtures

if fixtures.missing():
    pytest.skip(fixtures.missing(), allow_module_level=True)

from keras_vit.text.tokenizers import read_tokenizer  # noqa: E402
from keras_vit.weights import CheckpointError  # noqa: E402

PROBES = [
    "This is a photo of a Cat.", "", " ", "hello   WORLD,  it's über-cool! 123", "naïve café — 東京 😀",
    "</s> and <unk> and <|endoftext|> <eos><bos><pad>", "tab\tnew\nline", "▁under ▁score", "'s 't 're a.b,c!d?e",
    " ".join(["word"] * 90),  # past every context: truncated
]


def _reference(folder, kind, texts):
    kwargs = fixtures.pipeline_kwargs(kind)
    if kind == "clip":  # the pipeline does not truncate CLIP; open_clip (and a 77-token tower) cut at 77
        kwargs.update(truncation=True, max_length=77)
    found = fixtures.reference_tokenizer(folder)(texts, **kwargs)
    return {key: np.asarray(found[key]) for key in ("input_ids", "attention_mask")}


def _assert_equal(found, expected):
    assert set(found) == set(expected)
    for key in expected:
        assert found[key].dtype == np.int32 and found[key].shape == expected[key].shape, key
        np.testing.assert_array_equal(found[key], expected[key], err_msg=key)


@pytest.mark.parametrize("kind", ["clip", "siglip", "siglip2"])
def test_ids_equal_transformers_pipeline_and_long_texts_are_said_once(kind, tmp_path_factory):
    folder, _ = fixtures.made(kind, tmp_path_factory)
    tokenizer = read_tokenizer(folder, kind, 77)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = tokenizer(PROBES)
    said = [str(w.message) for w in caught if "truncated" in str(w.message)]
    assert len(said) == 1 and "1 of 10 texts" in said[0], said
    _assert_equal(found, _reference(folder, kind, PROBES))
    assert found["input_ids"].shape[1] == (77 if kind == "clip" else 64)
    # One text at a time pads to its own length (CLIP) or to 64 (SigLIP), as the reference does.
    for text in PROBES[:4]:
        _assert_equal(tokenizer([text]), _reference(folder, kind, [text]))


def test_clip_ids_equal_open_clip_and_vocab_merges_read_as_tokenizer_json(tmp_path_factory, tmp_path):
    folder, _ = fixtures.made("clip", tmp_path_factory)
    from _timm_import import _Finder, _forget_torchvision

    finder = _Finder()  # open_clip imports torchvision, which its tokenizer does not use
    sys.meta_path.insert(0, finder)
    try:
        from open_clip.tokenizer import tokenize
    finally:
        sys.meta_path.remove(finder)
        _forget_torchvision()
    texts = [text for text in PROBES if "<" not in text]  # open_clip has no special-token splitting of its own
    expected = tokenize(texts).numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = read_tokenizer(folder, "clip", 77)(texts)
    lengths = found["attention_mask"].sum(axis=1)
    for row, ids, length in zip(expected, found["input_ids"], lengths):
        np.testing.assert_array_equal(ids[:length], row[:length])
        assert not row[length:].any()  # open_clip pads with 0 where the mask says padding
    plain = tmp_path / "vocab_merges"
    plain.mkdir()
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copy(os.path.join(folder, name), plain / name)
    _assert_equal(read_tokenizer(str(plain), "clip", 77)(texts[:4]), _reference(folder, "clip", texts[:4]))


def test_siglip2_pads_left_where_its_config_is_silent_as_its_class(tmp_path_factory, tmp_path):
    folder, _ = fixtures.made("siglip2", tmp_path_factory)
    for name in ("tokenizer.json", "config.json"):
        shutil.copy(os.path.join(folder, name), tmp_path / name)
    with open(os.path.join(folder, "tokenizer_config.json")) as file:
        config = json.load(file)
    del config["padding_side"]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    found = read_tokenizer(str(tmp_path), "siglip2", 64)(PROBES[:3])
    assert found["attention_mask"][0, -1] == 1 and found["attention_mask"][0, 0] == 0
    _assert_equal(found, _reference(str(tmp_path), "siglip2", PROBES[:3]))


@pytest.mark.parametrize("kind, named", [("clip", "vocab.json + merges.txt"), ("siglip", "spiece.model"),
                                         ("siglip2", "tokenizer.json")])
def test_folder_without_tokenizer_files_is_refused_naming_them(kind, named, tmp_path):
    with pytest.raises(CheckpointError, match="no tokenizer files.*" + named.replace("+", r"\+")):
        read_tokenizer(str(tmp_path), kind, 77)


@pytest.mark.parametrize("texts, message", [([], r"texts=\[\]"), ([3], "item 0 is 3"), (None, "texts=None")])
def test_bad_texts_are_refused_naming_texts(texts, message, tmp_path_factory):
    folder, _ = fixtures.made("siglip2", tmp_path_factory)
    with pytest.raises(ValueError, match=message):
        read_tokenizer(folder, "siglip2", 64)(texts)
