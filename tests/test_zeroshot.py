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
    """kind -> (folder, the transformers model, ImageTextModel), made once for the module."""
    from keras_vit.text.image_text_model import ImageTextModel

    made = {}
    for kind in ("clip", "siglip"):
        folder = str(tmp_path_factory.mktemp(kind))
        made[kind] = (folder, fixtures.MAKERS[kind](folder), ImageTextModel(weights=folder))
    return made


def _pipeline_scores(folder, hf, kind, images, labels=LABELS):
    """transformers' zero-shot pipeline's scores: its processor's pixels and tokens, softmax or sigmoid of the logits."""
    import PIL.Image
    import torch
    import transformers

    processor = transformers.AutoImageProcessor.from_pretrained(folder)
    pixels = processor(images=[PIL.Image.fromarray(image) for image in images], return_tensors="pt")["pixel_values"]
    tokens = fixtures.reference_tokenizer(folder)([f"This is a photo of {label}." for label in labels],
                                                  return_tensors="pt", **fixtures.pipeline_kwargs(kind))
    with torch.no_grad():
        logits = hf(pixel_values=pixels, **tokens).logits_per_image
    return (logits.softmax(-1) if kind == "clip" else logits.sigmoid()).numpy()


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_probabilities_equal_the_zero_shot_pipeline(towers, kind):
    import keras_vit
    from keras_vit.image_processor import process_images

    folder, hf, pair = towers[kind]
    model = keras_vit.zeroshot_classifier(pair, LABELS)
    images = fixtures.images(2)
    pixels = process_images(images, model.vit_config["image_processor"], model.input_shape[1:3])
    np.testing.assert_allclose(model.predict(pixels, verbose=0), _pipeline_scores(folder, hf, kind, images), atol=1e-5)
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
    np.testing.assert_allclose(loaded.predict(pixels, verbose=0), model.predict(pixels, verbose=0), atol=1e-6)
    served = load_predictor(saved_model(loaded, str(tmp_path / "serving")))  # labels and processor from the model
    assert served.class_names == tuple(LABELS)
    np.testing.assert_allclose(served.predict_files([photo]), expected, atol=1e-5)


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


def test_imagenet_templates_average_the_normalised_prompt_embeddings(towers):
    from keras_vit.text.zeroshot import IMAGENET_TEMPLATES, class_embeddings

    pair = towers["siglip"][2]
    assert len(IMAGENET_TEMPLATES) == 80 and all(template.count("{}") == 1 for template in IMAGENET_TEMPLATES)
    templates = IMAGENET_TEMPLATES[:3]
    each = pair.encode_texts([template.format("dog") for template in templates])
    mean = each.mean(axis=0)
    np.testing.assert_allclose(class_embeddings(pair, ["dog"], templates)[0], mean / np.linalg.norm(mean), atol=1e-6)


def test_cli_zeroshot_embed_texts_and_search(towers, tmp_path, capsys):
    import PIL.Image

    from keras_vit import cli

    folder, _, pair = towers["clip"]
    data = tmp_path / "pets"
    images = fixtures.images(4)
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
    embeddings = pair.encode_images(images)
    np.savez(tmp_path / "images.npz", embeddings=embeddings, files=np.array(files))
    capsys.readouterr()
    assert cli.main(["search", str(tmp_path / "images.npz"), "--text", "a cat", "--weights", folder, "--top-k", "4"]) == 0
    ranked = [line.split()[-1] for line in capsys.readouterr().out.splitlines()]
    assert ranked == [files[i] for i in np.argsort(-(embeddings @ pair.encode_texts(["a cat"])[0]), kind="stable")]
    assert cli.main(["search", out, "--text", "a cat", "--weights", folder]) == 2
    assert "text embeddings" in capsys.readouterr().err
