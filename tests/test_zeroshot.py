"""Zero-shot classification (issue 52): `keras_vit.zeroshot_classifier` scores as transformers' zero-shot
pipeline does (CLIP's softmax, SigLIP's sigmoid of `logits_per_image`), keeps its labels through `.keras`
and exports, and `keras-vit zeroshot`, `embed --texts` and `search` answer on the command line.

The checkpoints are the tiny random two-tower folders of `tests/_image_text_fixtures.py`; the images are
non-square, so the checkpoint's processor (CLIP's shortest-edge resize and centre crop) matters.
"""

import os

import numpy as np
import pytest

import _image_text_fixtures as fixtures

pytestmark = pytest.mark.skipif(fixtures.missing() is not None, reason=str(fixtures.missing()))

LABELS = ["cat", "dog", "airplane"]


@pytest.fixture(scope="module")
def towers(tmp_path_factory):
    """kind -> (folder, the transformers model, ImageTextModel), shared with the other image-text modules."""
    return {kind: (*fixtures.made(kind, tmp_path_factory), fixtures.loaded(kind, tmp_path_factory))
            for kind in ("clip", "siglip")}


def _pipeline_scores(folder, hf, kind, images, labels=LABELS):
    """transformers' zero-shot pipeline's scores: its processor's pixels and tokens, softmax or sigmoid of the logits."""
    import torch

    pixels = fixtures.reference_pixels(folder, images)["pixel_values"]
    tokens = fixtures.reference_tokenizer(folder)([f"This is a photo of {label}." for label in labels],
                                                  return_tensors="pt", **fixtures.pipeline_kwargs(kind))
    with torch.no_grad():
        logits = hf(pixel_values=pixels, **tokens).logits_per_image
    return (logits.softmax(-1) if kind == "clip" else logits.sigmoid()).numpy()


def _scores(model, pixels):
    return np.asarray(model(pixels, training=False))


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_probabilities_equal_the_zero_shot_pipeline(towers, kind):
    import keras_vit
    from keras_vit.image_processor import process_images

    folder, hf, pair = towers[kind]
    model = keras_vit.zeroshot_classifier(pair, LABELS)
    images = fixtures.photos()
    pixels = process_images(images, model.vit_config["image_processor"], model.input_shape[1:3])
    np.testing.assert_allclose(_scores(model, pixels), _pipeline_scores(folder, hf, kind, images), atol=1e-5)
    assert model.layers[-1].activation.__name__ == ("softmax" if kind == "clip" else "sigmoid")


def test_keras_file_and_saved_model_keep_labels_and_scores(towers, tmp_path):
    import keras
    import PIL.Image

    import keras_vit
    from keras_vit.export import load_predictor, saved_model

    folder, hf, pair = towers["clip"]
    image = fixtures.images(1)[0]
    photo = str(tmp_path / "photo.png")
    PIL.Image.fromarray(image).save(photo)
    expected = _pipeline_scores(folder, hf, "clip", [image])
    model = keras_vit.zeroshot_classifier(pair, LABELS)
    path = str(tmp_path / "zeroshot.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.vit_config["class_names"] == LABELS
    pixels = np.random.default_rng(0).uniform(0, 255, (1, *model.input_shape[1:])).astype("float32")
    np.testing.assert_allclose(_scores(loaded, pixels), _scores(model, pixels), atol=1e-6)
    served = load_predictor(saved_model(loaded, str(tmp_path / "serving")))  # labels and processor from the model
    assert served.class_names == tuple(LABELS)
    np.testing.assert_allclose(served.predict_files([photo]), expected, atol=1e-5)


def test_sigmoid_classifier_exports_to_tflite_and_onnx(towers, tmp_path):
    """SigLIP's zero-shot head (sigmoid: each label its own probability) through TFLite (float, int8) and ONNX."""
    import keras_vit
    from keras_vit import export

    model = keras_vit.zeroshot_classifier(towers["siglip"][2], LABELS)
    pixels = np.random.default_rng(0).uniform(0, 255, (8, *model.input_shape[1:])).astype("float32")
    expected = _scores(model, pixels)
    assert np.abs(expected.sum(axis=1) - 1).max() > 0.05  # not a softmax: applying one would show
    files = {"float": export.tflite(model, str(tmp_path / "float.tflite"), class_names=LABELS).path,
             "onnx": export.onnx(model, str(tmp_path / "m.onnx"), class_names=LABELS).path}
    for kind, path in files.items():
        predictor = export.load_predictor(path)
        assert predictor.class_names == tuple(LABELS), kind
        np.testing.assert_allclose(predictor.predict(pixels), expected, atol=1e-4, err_msg=kind)
    int8 = export.tflite(model, str(tmp_path / "int8.tflite"), "int8", representative_data=pixels).path
    quantized = export.load_predictor(int8).predict(pixels)
    assert quantized.shape == expected.shape and np.isfinite(quantized).all()
    assert (quantized.argmax(axis=1) == expected.argmax(axis=1)).mean() >= 0.75


@pytest.mark.parametrize("class_names, templates, message", [
    (["cat", "cat"], None, "appear more than once"),
    (["cat", ""], None, "no label"),
    (["cat"], None, "always scores 1.0"),
    ("cat,dog", None, "expected a list"),
    (["cat", "dog"], ["a photo"], "one '{}'"),
])
def test_bad_labels_and_templates_are_refused_by_name(towers, class_names, templates, message):
    import keras_vit

    with pytest.raises(ValueError, match="class_names|templates") as error:
        keras_vit.zeroshot_classifier(towers["clip"][2], class_names, templates)
    assert message in str(error.value)


def test_a_folder_without_processor_files_is_refused_naming_them(towers, tmp_path):
    import shutil

    import keras_vit

    folder = tmp_path / "no_processor"
    shutil.copytree(towers["siglip"][0], folder, ignore=shutil.ignore_patterns("*processor_config.json"))
    with pytest.raises(ValueError, match="no preprocessor_config.json or processor_config.json"):
        keras_vit.zeroshot_classifier(str(folder), LABELS)


def test_imagenet_templates_average_the_normalised_prompt_embeddings(towers):
    from keras_vit.text.zeroshot import IMAGENET_TEMPLATES, class_embeddings

    pair = towers["siglip"][2]
    assert len(IMAGENET_TEMPLATES) == 80 and all(template.count("{}") == 1 for template in IMAGENET_TEMPLATES)
    templates = IMAGENET_TEMPLATES[:3]
    each = pair.encode_texts([template.format("dog") for template in templates])
    mean = each.mean(axis=0)
    np.testing.assert_allclose(class_embeddings(pair, ["dog"], templates)[0], mean / np.linalg.norm(mean), atol=1e-6)


def test_cli_zeroshot_embed_texts_and_search(towers, tmp_path, capsys):
    """zeroshot on a folder, embed of texts and of images (through the checkpoint's processor), search of the images."""
    import PIL.Image

    from keras_vit import cli

    folder, _, pair = towers["siglip"]  # its processor resizes with PIL's bicubic, not the data pipeline's bilinear
    data = tmp_path / "pets"
    images = fixtures.photos() + [fixtures.images(1, seed=5, size=(36, 60))[0], fixtures.images(1, seed=6, size=(64, 30))[0]]
    files = [str(data / LABELS[i % 2] / f"{i}.png") for i in range(4)]
    for path, image in zip(files, images):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        PIL.Image.fromarray(image).save(path)
    assert cli.main(["zeroshot", "--weights", folder, "--dataset", str(data)]) == 0
    assert "top-1 accuracy" in capsys.readouterr().out
    assert cli.main(["zeroshot", "--weights", folder, "--labels", "cat,cat", files[0]]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "class_names" in error and "more than once" in error

    texts = tmp_path / "texts.txt"
    texts.write_text("a red car\na cat\n")
    out = str(tmp_path / "texts.npz")
    assert cli.main(["embed", folder, "--texts", str(texts), "--out", out]) == 0
    np.testing.assert_allclose(np.load(out)["embeddings"], pair.encode_texts(["a red car", "a cat"]), atol=1e-6)
    embedded = str(tmp_path / "images.npz")
    assert cli.main(["embed", folder, "--dataset", str(data), "--out", embedded]) == 0
    with np.load(embedded) as found:
        order = [files.index(path) for path in found["files"]]
        embeddings = found["embeddings"] / np.linalg.norm(found["embeddings"], axis=1, keepdims=True)
    np.testing.assert_allclose(embeddings, pair.encode_images([images[i] for i in order]), atol=1e-5)
    capsys.readouterr()
    assert cli.main(["search", embedded, "--text", "a cat", "--weights", folder, "--top-k", "4"]) == 0
    ranked = [line.split()[-1] for line in capsys.readouterr().out.splitlines()]
    scores = embeddings @ pair.encode_texts(["a cat"])[0]
    assert ranked == [files[order[i]] for i in np.argsort(-scores, kind="stable")]
    assert cli.main(["search", out, "--text", "a cat", "--weights", folder]) == 2
    assert "text embeddings" in capsys.readouterr().err
