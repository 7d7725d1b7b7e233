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


@pytest.fixture(scope="module")
def siglip(tmp_path_factory):
    """The tiny SigLIP two-tower folder (the zeroshot command's --weights)."""
    return fixtures.made("siglip", tmp_path_factory)[0]


def _zeroshot(capsys, *argv):
    """(exit code, stdout, stderr) of `keras-vit zeroshot ARGV`."""
    from keras_vit import cli

    capsys.readouterr()
    code = cli.main(["zeroshot", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def _corrupt_folder(root):
    """A folder of 2 classes x 2 PNGs, plus cat/zz_cut.jpg (a JPEG cut short: its header reads) and dog/zz_text.jpg."""
    import PIL.Image

    for i, image in enumerate(fixtures.images(4, size=(20, 24))):
        os.makedirs(root / LABELS[i % 2], exist_ok=True)
        PIL.Image.fromarray(image).save(root / LABELS[i % 2] / f"{i}.png")
    PIL.Image.fromarray(fixtures.images(1, size=(32, 32))[0]).save(root / "cut.jpg", quality=95)
    (root / "cat" / "zz_cut.jpg").write_bytes((root / "cut.jpg").read_bytes()[:300])
    (root / "cut.jpg").unlink()
    (root / "dog" / "zz_text.jpg").write_text("not an image\n")
    return root


def test_cli_zeroshot_skips_corrupt_images_or_names_the_first(siglip, tmp_path, capsys):
    """--on-corrupt skip (the default) scores the rest and lists the skipped files; error names the bad file."""
    import PIL.Image

    data = _corrupt_folder(tmp_path / "data")
    code, out, err = _zeroshot(capsys, "--weights", siglip, "--dataset", data)
    assert code == 0, err
    assert "/4 images of 2 classes" in out and "2 corrupt file(s) skipped" in out
    assert f"Skipped 2 corrupt image files: {data / 'cat' / 'zz_cut.jpg'}, {data / 'dog' / 'zz_text.jpg'}" in out
    webp = tmp_path / "photo.webp"  # a format the predictor reads and the folder listing does not
    PIL.Image.open(data / "cat" / "0.png").save(webp)
    code, out, err = _zeroshot(capsys, "--weights", siglip, "--labels", "cat,dog", webp, data / "dog" / "zz_text.jpg")
    assert code == 0 and out.startswith(f"{webp}\n") and out.endswith(f"image file: {data / 'dog' / 'zz_text.jpg'}\n")
    code, out, err = _zeroshot(capsys, "--weights", siglip, "--labels", "cat,dog", "--on-corrupt", "error",
                               data / "cat" / "0.png", data / "cat" / "zz_cut.jpg")
    lines = err.strip().splitlines()  # the checkpoint's line, then the error's
    assert code == 2 and len(lines) == 2 and "template(s)" in lines[0]
    assert f"Corrupt image file {str(data / 'cat' / 'zz_cut.jpg')!r} (--on-corrupt error)" in lines[1]
    assert "0.png" not in err and "function_node" not in err


def test_cli_zeroshot_save_is_written_only_once_the_images_are_classified(siglip, tmp_path, capsys):
    """A failed run leaves the user's --save file as it was, and creates no new file or folder."""
    cut = _corrupt_folder(tmp_path / "data") / "cat" / "zz_cut.jpg"
    kept = tmp_path / "kept.keras"
    kept.write_bytes(b"the user's model")
    for save, extra in ((kept, ["--overwrite"]), (tmp_path / "new" / "z.keras", [])):
        code, _, err = _zeroshot(capsys, "--weights", siglip, "--labels", "cat,dog", "--save", save, *extra, cut)
        assert code == 2 and "No image could be classified" in err
    assert kept.read_bytes() == b"the user's model"
    assert not (tmp_path / "new").exists()


def _refused(capsys, tmp_path, *argv):
    """stderr of `keras-vit zeroshot ARGV` with missing --weights, which must fail, in one line, before loading them."""
    code, _, err = _zeroshot(capsys, "--weights", tmp_path / "no-such-checkpoint", *argv)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "no-such-checkpoint" not in err
    return err


def test_cli_zeroshot_refuses_a_bad_save_up_front(tmp_path, capsys):
    image = _corrupt_folder(tmp_path / "data") / "cat" / "0.png"
    (tmp_path / "afile").write_text("x")
    (tmp_path / "dir.keras").mkdir()
    err = _refused(capsys, tmp_path, "--labels", "cat,dog", "--save", tmp_path / "afile" / "z.keras", image)
    assert "Invalid --save=" in err and "afile" in err
    err = _refused(capsys, tmp_path, "--labels", "cat,dog", "--save", tmp_path / "dir.keras", "--overwrite", image)
    assert "Invalid --save=" in err and "it is a folder" in err
    if os.path.isdir("/proc"):  # no file can be made there, even by root
        err = _refused(capsys, tmp_path, "--labels", "cat,dog", "--save", "/proc/z.keras", image)
        assert "Invalid --save=" in err and "cannot write" in err


def test_cli_zeroshot_names_the_text_file_it_cannot_read(tmp_path, capsys):
    """--labels-file and --templates: a folder, or a file that is not UTF-8 text, is refused naming the argument."""
    image = _corrupt_folder(tmp_path / "data") / "cat" / "0.png"
    err = _refused(capsys, tmp_path, "--labels-file", image, image)
    assert f"Invalid --labels-file={str(image)!r}: not UTF-8 text" in err
    err = _refused(capsys, tmp_path, "--labels-file", tmp_path / "data", image)
    assert "Invalid --labels-file=" in err and "it is a folder" in err
    err = _refused(capsys, tmp_path, "--labels", "cat,dog", "--templates", image, image)
    assert f"Invalid --templates={str(image)!r}: not UTF-8 text" in err


def test_cli_zeroshot_templates_name_is_never_a_folder_nor_silently_a_file(siglip, tmp_path, capsys, monkeypatch):
    """--templates imagenet is the built-in set beside a folder of that name; beside a file, the user says which."""
    from keras_vit import cli

    image = _corrupt_folder(tmp_path / "data") / "cat" / "0.png"
    monkeypatch.chdir(tmp_path)
    os.makedirs("imagenet")
    err = _refused(capsys, tmp_path, "--labels", "cat,dog", "--templates", "data", image)
    assert "Invalid --templates='data': it is a folder" in err
    code, out, err = _zeroshot(capsys, "--weights", siglip, "--labels", "cat,dog", "--templates", "imagenet", image)
    assert code == 0 and "imagenet template(s)" in err and out.startswith(str(image))
    os.rmdir("imagenet")
    (tmp_path / "imagenet").write_text("a drawing of {}.\n")
    err = _refused(capsys, tmp_path, "--labels", "cat,dog", "--templates", "imagenet", image)
    assert "Invalid --templates='imagenet'" in err and os.path.join(".", "imagenet") in err
    with pytest.raises(SystemExit):
        cli.main(["zeroshot", "--help"])
    assert "a photo of {}." in " ".join(capsys.readouterr().out.split())
