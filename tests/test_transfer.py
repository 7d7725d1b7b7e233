"""keras_vit.transfer: the one loader of a pre-trained backbone, its features, few-shot and k-NN accuracy, the CLI."""

import json
import os
import re
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit import cli
from keras_vit.transfer import extract_features, fewshot, knn_accuracy, linear_fewshot, load_pretrained
from keras_vit.weights import Checkpoint, save_hf, save_npz


def _separable_split(seed=0, classes=5):
    rng = np.random.default_rng(seed)
    centres = 10 * rng.normal(size=(classes, 24))
    train_labels, test_labels = np.repeat(np.arange(classes), 30), np.repeat(np.arange(classes), 20)
    train = centres[train_labels] + 0.3 * rng.normal(size=(len(train_labels), 24))
    test = centres[test_labels] + 0.3 * rng.normal(size=(len(test_labels), 24))
    return train, train_labels, test, test_labels


def _random_split(seed=0, classes=4):
    rng = np.random.default_rng(seed)
    train_labels = np.repeat(np.arange(classes), 50)
    return (rng.normal(size=(len(train_labels), 16)), train_labels, rng.normal(size=(3000, 16)),
            rng.integers(0, classes, size=3000))


# --------------------------------------------------------------------------------------------
# Few-shot and k-NN on synthetic features


def test_fewshot_on_separable_features_is_perfect_at_every_shot_count():
    result = linear_fewshot(*_separable_split(), shots=(1, 5, 10, 25), draws=3)
    assert sorted(result) == [1, 5, 10, 25]
    for scores in result.values():
        assert scores["mean"] == 1.0 and scores["std"] == 0.0 and scores["draws"] == (1.0, 1.0, 1.0)


def test_fewshot_on_random_labels_is_near_chance():
    result = linear_fewshot(*_random_split(), shots=(1, 5, 10, 25), draws=5, seed=3)
    for count, scores in result.items():
        assert abs(scores["mean"] - 0.25) < 0.1, (count, scores)
        assert len(scores["draws"]) == 5 and scores["std"] == pytest.approx(np.std(scores["draws"]))


def test_fewshot_solves_the_regularised_least_squares_of_whitened_features_with_a_bias():
    """Both closed forms (few points, many points) equal the ridge solution computed as one stacked lstsq."""
    rng = np.random.default_rng(2)
    for n, d in ((6, 20), (60, 5)):
        x, targets, x_test = rng.normal(size=(n, d)), rng.integers(0, 3, size=n), rng.normal(size=(40, d))
        mean, std = x.mean(0), x.std(0) + 1e-5
        design = lambda f: np.hstack([(f - mean) / std, np.full((len(f), 1), fewshot.BIAS_CONSTANT)])  # noqa: E731
        y = 2 * np.eye(3)[targets] - 1
        l2 = 7.0
        stacked = np.vstack([design(x), np.sqrt(l2) * np.eye(d + 1)])
        weights = np.linalg.lstsq(stacked, np.vstack([y, np.zeros((d + 1, 3))]), rcond=None)[0]
        expected = np.argmax(design(x_test) @ weights, axis=1)
        np.testing.assert_array_equal(fewshot._ridge_predict(x, targets, 3, x_test, l2), expected)


def test_fewshot_draws_are_seeded_and_nested():
    data = _random_split(seed=4)
    first = linear_fewshot(*data, shots=(1, 5), draws=2, seed=7)
    assert first == linear_fewshot(*data, shots=(5, 1), draws=2, seed=7)
    assert first != linear_fewshot(*data, shots=(1, 5), draws=2, seed=8)


def test_fewshot_refuses_shots_a_class_cannot_fill_naming_shots_and_the_class():
    train, labels, test, test_labels = _separable_split()
    keep = (labels != 2) | (np.arange(len(labels)) % 30 < 4)  # class 2 keeps 4 images
    with pytest.raises(ValueError, match=r"Invalid shots=\(1, 5\): 1 class\(es\) have fewer than 5 .*class 2: 4\)"):
        linear_fewshot(train[keep], labels[keep], test, test_labels, shots=(1, 5))
    with pytest.raises(ValueError, match="Invalid shots=.*integers >= 1"):
        linear_fewshot(train, labels, test, test_labels, shots=(0, 1))
    with pytest.raises(ValueError, match="needs at least 2"):
        linear_fewshot(train[:30], labels[:30], test[:20], test_labels[:20], shots=(1,))


def test_knn_on_separable_features_is_perfect_and_on_random_labels_near_chance():
    assert knn_accuracy(*_separable_split(), k=20) == 1.0
    assert abs(knn_accuracy(*_random_split(), k=20) - 0.25) < 0.1


def test_knn_votes_are_weighted_by_exp_similarity_over_temperature():
    """One very close neighbour of class 0 outvotes two far ones of class 1 at T=0.07, not at a high T."""
    train = np.array([[1.0, 0.0], [0.5, 0.866], [0.5, -0.866]])
    labels, test = np.array([0, 1, 1]), np.array([[1.0, 0.05]])
    assert knn_accuracy(train, labels, test, [0], k=3, temperature=0.07) == 1.0
    assert knn_accuracy(train, labels, test, [0], k=3, temperature=100.0) == 0.0  # nearly a plain majority
    # Cosine: the length of a feature does not count.
    assert knn_accuracy(train * [[100.0], [1.0], [1.0]], labels, 50 * test, [0], k=3) == 1.0


def test_knn_in_chunks_equals_knn_at_once(monkeypatch):
    data = _random_split(seed=5, classes=3)
    at_once = knn_accuracy(*data, k=7)
    monkeypatch.setattr(fewshot, "_SIMILARITY_CHUNK", 3 * len(data[0]) + 1)  # 3 test rows per chunk
    assert knn_accuracy(*data, k=7) == at_once


@pytest.mark.parametrize("arguments, message", [
    (dict(k=0), r"Invalid k=0\. Expected an integer >= 1"),
    (dict(k=201), r"Invalid k=201: there are only 200 training examples"),
    (dict(temperature=0.0), r"Invalid temperature=0\.0\. Expected a number in \(0, inf\)"),
    (dict(num_classes=2), r"Invalid num_classes=2: the labels go up to 3"),
])
def test_knn_bad_arguments_are_refused_by_name(arguments, message):
    with pytest.raises(ValueError, match=message):
        knn_accuracy(*_random_split(), **arguments)


def test_a_probe_of_features_that_are_not_one_vector_per_image_is_refused():
    tokens = np.zeros((10, 5, 8))
    with pytest.raises(ValueError, match=r"Invalid train_features of shape \(10, 5, 8\)\. Expected \(examples, features\)"):
        knn_accuracy(tokens, np.arange(10) % 2, tokens, np.arange(10) % 2, k=1)


# --------------------------------------------------------------------------------------------
# load_pretrained


def _randomized(model, seed=0):
    """The model with every weight random (heads built zero would hide a head that was not replaced)."""
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        if variable.trainable:
            variable.assign(0.2 * rng.normal(size=variable.shape).astype("float32"))
    return model


def _images(size, seed=0, count=2):
    return np.random.default_rng(seed).uniform(0, 255, size=(count, size, size, 3)).astype("float32")


def _pre_head(model):
    return keras.Model(model.inputs, model.get_layer("head").input)


def _assert_same_weights_but_head(model, source, skipped=("head", "preprocessing")):
    compared = 0
    for layer in model.layers:
        if layer.name in skipped or not layer.weights:
            continue
        for new, old in zip(layer.get_weights(), source.get_layer(layer.name).get_weights()):
            np.testing.assert_array_equal(new, old)
            compared += 1
    assert compared > 10


@pytest.fixture(scope="module")
def npz_checkpoint(tmp_path_factory):
    """A tiny vit_jax checkpoint with a pre-logits layer and a random 10-class head, and the model it came from."""
    source = _randomized(keras_vit.ViT("tiny", num_classes=10, approximate_gelu=True, representation_size=16))
    path = str(tmp_path_factory.mktemp("npz") / "tiny.npz")
    save_npz(source, path)
    return path, source


def test_load_pretrained_npz_feature_model_gives_the_source_models_pre_head_features(npz_checkpoint):
    path, source = npz_checkpoint
    model, info = load_pretrained(path, scaling="unit")
    images = _images(32)
    np.testing.assert_allclose(model.predict_on_batch(images), _pre_head(source).predict_on_batch(images / 255),
                               atol=1e-5)
    assert (info.spec, info.source, info.kind, info.scaling, info.scaling_reason) == (
        path, path, "vit_jax", "unit", "given")
    assert info.image_size == (32, 32) and info.image_size_reason == "the checkpoint's"
    assert info.dropped == ("head (10 classes)",) and info.num_features == 16 == model.output_shape[-1]


@pytest.mark.parametrize("num_classes", [3, 10])
def test_load_pretrained_npz_with_num_classes_has_a_new_zero_head_and_the_rest_equal(npz_checkpoint, num_classes):
    """Also with the checkpoint's own class count: the head is new, and the pre-logits layer dropped."""
    path, source = npz_checkpoint
    model, info = load_pretrained(path, num_classes=num_classes, scaling="symmetric", classifier_activation=None)
    head = model.get_layer("head")
    assert head.units == num_classes and all(not np.any(w) for w in head.get_weights())
    assert "pre_logits" not in [layer.name for layer in model.layers]
    assert model.vit_config["representation_size"] is None and model.get_layer("preprocessing") is not None
    _assert_same_weights_but_head(model, source)
    assert info.dropped == ("head (10 classes)", "pre_logits (16)") and info.num_features == 32
    np.testing.assert_array_equal(model.predict_on_batch(_images(32)), np.zeros((2, num_classes)))


def test_load_pretrained_resamples_to_a_given_image_size_and_says_so(npz_checkpoint):
    model, info = load_pretrained(npz_checkpoint[0], image_size=48, scaling="unit")
    assert model.input_shape == (None, 48, 48, 3) and info.image_size == (48, 48)
    assert info.image_size_reason == "given (position embedding resampled from 8x8 to 12x12)"


def test_load_pretrained_refuses_a_checkpoint_that_states_no_scaling(npz_checkpoint):
    with pytest.raises(ValueError, match=r"tiny\.npz' states no pixel scaling: pass scaling= \(keras-vit: --scaling\)"):
        load_pretrained(npz_checkpoint[0])
    with pytest.raises(ValueError, match=r"Invalid scaling='raw'"):
        load_pretrained(npz_checkpoint[0], scaling="raw")
    with pytest.raises(ValueError, match=r"Invalid image_size=0"):
        load_pretrained(npz_checkpoint[0], scaling="unit", image_size=0)


def test_load_pretrained_takes_the_checkpoints_preprocessing_record(npz_checkpoint, monkeypatch):
    """Checkpoint.preprocessing (what the checkpoint's files state): its scaling and its size, or a refusal."""
    from keras_vit.weights import Preprocessing

    record = Preprocessing("symmetric", (0.5,) * 3, (0.5,) * 3, (24, 24), "bicubic", 0.9, "/x/preprocessor_config.json")
    monkeypatch.setattr(Checkpoint, "preprocessing", record, raising=False)
    model, info = load_pretrained(npz_checkpoint[0])
    assert (info.scaling, info.scaling_reason) == ("symmetric", "from /x/preprocessor_config.json")
    assert info.image_size == (24, 24) and model.input_shape == (None, 24, 24, 3)
    assert info.image_size_reason == "from /x/preprocessor_config.json (position embedding resampled from 8x8 to 6x6)"
    unknown = Preprocessing(None, (0.3,) * 3, (0.2,) * 3, None, None, None, "p.json")
    monkeypatch.setattr(Checkpoint, "preprocessing", unknown)
    with pytest.raises(ValueError, match=r"states pixel mean=\[0\.3, 0\.3, 0\.3\] and std=\[0\.2, 0\.2, 0\.2\] \(p\.json\).*pass scaling="):
        load_pretrained(npz_checkpoint[0])
    assert load_pretrained(npz_checkpoint[0], scaling="unit")[1].scaling_reason == "given"


def test_load_pretrained_hugging_face_folder(tmp_path):
    source = _randomized(keras_vit.ViT("tiny_dinov2", mlp_dim=48, include_top=False))
    folder = str(tmp_path / "dinov2")
    save_hf(source, folder)
    with open(os.path.join(folder, "preprocessor_config.json"), "w") as f:
        json.dump({"image_processor_type": "BitImageProcessor", "do_normalize": True, "do_rescale": True,
                   "rescale_factor": 1 / 255, "image_mean": [0.485, 0.456, 0.406],
                   "image_std": [0.229, 0.224, 0.225], "crop_size": {"height": 16, "width": 16}}, f)
    model, info = load_pretrained(folder, scaling="imagenet")
    images = _images(16)
    mean, std = (np.array(v, "float32") for v in keras_vit.configs.SCALINGS["imagenet"])
    np.testing.assert_allclose(model.predict_on_batch(images), source.predict_on_batch((images - mean) / std),
                               atol=1e-5)
    assert info.kind == "hf" and info.dropped == () and info.num_features == 24
    if getattr(Checkpoint(folder), "preprocessing", None) is None:
        pytest.skip("keras_vit.weights.Checkpoint reads no preprocessor_config.json yet (another branch adds it)")
    info = load_pretrained(folder)[1]
    assert info.scaling == "imagenet" and info.scaling_reason.startswith("from ")


@pytest.fixture(scope="module")
def keras_file(tmp_path_factory):
    source = _randomized(keras_vit.ViT("tiny", num_classes=10, preprocessing="unit"))
    path = str(tmp_path_factory.mktemp("keras") / "vit.keras")
    source.save(path)
    return path, source


def test_load_pretrained_keras_feature_model_is_the_model_up_to_its_head(keras_file):
    path, source = keras_file
    model, info = load_pretrained(path)
    images = _images(32)
    np.testing.assert_allclose(model.predict_on_batch(images), _pre_head(source).predict_on_batch(images), atol=1e-6)
    assert (info.kind, info.scaling, info.scaling_reason, info.image_size_reason) == (
        "keras", "unit", "the .keras model's own", "the .keras model's own")
    assert info.dropped == ("head (10 classes)",) and info.num_features == 32


def test_load_pretrained_keras_with_num_classes_rebuilds_with_a_new_zero_head(keras_file):
    path, source = keras_file
    model, info = load_pretrained(path, num_classes=4, drop_path_rate=0.1)
    assert isinstance(model, keras_vit.models.vit.VisionTransformer) and model.output_shape == (None, 4)
    assert all(not np.any(w) for w in model.get_layer("head").get_weights())
    assert model.vit_config["drop_path_rate"] == 0.1
    _assert_same_weights_but_head(model, source)
    images = _images(32)
    np.testing.assert_allclose(_pre_head(model).predict_on_batch(images), _pre_head(source).predict_on_batch(images),
                               atol=1e-6)
    # Another scaling or size: rebuilt too, the position embedding resampled.
    model, info = load_pretrained(path, scaling="symmetric", image_size=16)
    assert (info.scaling, info.scaling_reason, model.input_shape) == ("symmetric", "given", (None, 16, 16, 3))
    assert info.image_size_reason == "given (position embedding resampled from 8x8 to 4x4)"


def test_load_pretrained_refuses_keras_models_with_no_features(tmp_path):
    plain = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
    plain.save(tmp_path / "plain.keras")
    with pytest.raises(ValueError, match=r"plain\.keras'.*no keras_vit Vision Transformer"):
        load_pretrained(str(tmp_path / "plain.keras"))
    keras_vit.ViT("tiny", include_top=False, pooling=None, preprocessing="unit").save(tmp_path / "tokens.keras")
    with pytest.raises(ValueError, match=r"tokens\.keras'.*pooling=None.*no pooled features"):
        load_pretrained(str(tmp_path / "tokens.keras"), num_classes=3)
    keras_vit.ViT("tiny", num_classes=3).save(tmp_path / "unscaled.keras")
    with pytest.raises(ValueError, match=r"unscaled\.keras' states no pixel scaling.*pass scaling="):
        load_pretrained(str(tmp_path / "unscaled.keras"))
    with pytest.raises(FileNotFoundError, match="missing.keras"):
        load_pretrained(str(tmp_path / "missing.keras"))


def _write_folder(root, classes=("a", "b", "c"), per_class=6, size=16):
    """Images of one colour per class, a little noise apart."""
    rng = np.random.default_rng(0)
    for index, name in enumerate(classes):
        os.makedirs(os.path.join(root, name))
        colour = np.array([255 * (index == 0), 255 * (index == 1), 255 * (index == 2)])
        for i in range(per_class):
            pixels = np.clip(colour + rng.normal(0, 20, size=(size, size, 3)), 0, 255).astype("uint8")
            tf.io.write_file(os.path.join(root, name, f"{i}.png"), tf.io.encode_png(pixels))
    return str(root)


def _tiny_npz(tmp_path, size):
    path = str(tmp_path / f"tiny{size}.npz")
    if not os.path.exists(path):
        save_npz(_randomized(keras_vit.ViT("tiny", num_classes=10, image_size=size)), path)
    return path


def test_extract_features_follows_the_source_order_and_names_files(tmp_path):
    root = _write_folder(tmp_path / "images", classes=("a", "b"), per_class=2, size=8)
    source = keras_vit.data.sources.from_folder(root)
    model, _ = load_pretrained(_tiny_npz(tmp_path, 8), scaling="unit")
    result = extract_features(model, source, batch_size=3)
    assert result.features.shape == (4, 32) and result.features.dtype == np.float32
    assert result.labels.tolist() == [0, 1, 0, 1] and result.class_names == ("a", "b")
    assert [os.path.relpath(f, root) for f in result.files] == ["a/0.png", "b/0.png", "a/1.png", "b/1.png"]
    pixels = np.stack([tf.io.decode_png(tf.io.read_file(f)).numpy() for f in result.files]).astype("float32")
    np.testing.assert_allclose(result.features, model.predict_on_batch(pixels), atol=1e-5)
    tokens = keras_vit.ViT("tiny", include_top=False, pooling=None, image_size=8)
    with pytest.raises(ValueError, match="expected one feature vector per image"):
        extract_features(tokens, source)


# --------------------------------------------------------------------------------------------
# The command line


def test_cli_embed_writes_embeddings_labels_files_and_class_names(tmp_path, capsys):
    root = _write_folder(tmp_path / "images")
    out = str(tmp_path / "out" / "train.npz")
    assert cli.main(["embed", _tiny_npz(tmp_path, 16), "--dataset", root, "--scaling", "unit", "--out", out]) == 0
    captured = capsys.readouterr()
    assert re.fullmatch(rf"{re.escape(out)}: embeddings 16x32 of .*\n", captured.out)
    assert "(vit_jax): 32 features; image 16x16 (the checkpoint's); scaling unit (given)" in captured.err
    with np.load(out) as data:
        assert sorted(data) == ["class_names", "embeddings", "files", "labels"]
        assert data["embeddings"].shape == (16, 32) and data["class_names"].tolist() == ["a", "b", "c"]
        assert all(os.path.isfile(f) for f in data["files"]) and len(data["files"]) == 16
        assert [os.path.basename(os.path.dirname(f)) for f in data["files"]] == ["abc"[i] for i in data["labels"]]
    assert [name for name in os.listdir(tmp_path / "out")] == ["train.npz"]


def test_cli_fewshot_and_knn_on_a_folder(tmp_path, capsys):
    root = _write_folder(tmp_path / "images")
    spec = _tiny_npz(tmp_path, 16)
    common = ["--dataset", root, "--scaling", "unit", "--validation-split", "0.5"]
    assert cli.main(["fewshot", spec, *common, "--shots", "1", "--draws", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("linear few-shot accuracy, 2 draws, l2_reg 1024: 9 train images") and out[1] == "shots  accuracy"
    assert [line.split()[0] for line in out[2:]] == ["1"]
    assert all(0 <= float(line.split()[1]) <= 1 and line.split()[2] == "+-" for line in out[2:])
    assert cli.main(["knn", spec, *common, "--k", "3"]) == 0
    line = capsys.readouterr().out
    assert re.fullmatch(r"3-NN accuracy \(temperature 0\.07\): [01]\.\d{4} on 9 test images .*9 train images .*\n", line)


def test_cli_fewshot_and_knn_on_the_grey_sample(tmp_path, capsys):
    """Fashion-MNIST is grey, 28 px: repeated to the checkpoint's 3 channels."""
    spec = _tiny_npz(tmp_path, 28)
    common = ["--max-train-examples", "100", "--max-test-examples", "50", "--scaling", "unit"]
    assert cli.main(["fewshot", spec, *common, "--shots", "1,5", "--draws", "2"]) == 0
    out = capsys.readouterr().out
    assert "100 train images" in out and "50 test images" in out and len(out.splitlines()) == 4
    assert cli.main(["knn", spec, *common, "--k", "5"]) == 0
    assert capsys.readouterr().out.startswith("5-NN accuracy (temperature 0.07): ")


@pytest.mark.parametrize("arguments, message", [
    (["fewshot", "SPEC", "--shots", "1,x"], r"Invalid --shots='1,x'\. Expected integers >= 1 separated by commas"),
    (["fewshot", "SPEC", "--shots", "0,5"], r"Invalid --shots=\[0, 5\]\. Expected one or more integers >= 1"),
    (["fewshot", "SPEC", "--shots", "1,10", "--scaling", "unit", "--validation-split", "0.5"],
     r"Invalid --shots=\(1, 10\): 3 class\(es\) have fewer than 10 training examples \(a: \d"),
    (["knn", "SPEC", "--k", "0"], r"Invalid --k=0\. Expected an integer >= 1"),
    (["knn", "SPEC", "--k", "17"], r"Invalid --k=17: there are only 16 training examples"),
    (["knn", "SPEC", "--temperature", "0"], r"Invalid --temperature=0\.0\. Expected a number in \(0, inf\)"),
    (["knn", "SPEC", "--dataset", "ONE_CLASS"], r"one'.* has one class sub-folder, 'only': a classifier needs at least 2"),
    (["embed", "SPEC", "--image-size", "0"], r"Invalid --image-size=0\. Expected an integer >= 1"),
    (["embed", "missing.npz"], r"Checkpoint file not found: 'missing\.npz'"),
    (["embed", "SPEC"], r"states no pixel scaling: pass scaling= \(keras-vit: --scaling\)"),
    (["embed", "SPEC", "--scaling", "unit", "--out", "x.txt"], r"Invalid --out='x\.txt'\. Expected a file name ending in \.npz"),
])
def test_cli_bad_inputs_exit_2_with_one_line(arguments, message, tmp_path, capsys):
    root = _write_folder(tmp_path / "images", per_class=6)
    one = _write_folder(tmp_path / "one", classes=("only",), per_class=2)
    spec = _tiny_npz(tmp_path, 16)
    arguments = [spec if a == "SPEC" else one if a == "ONE_CLASS" else a for a in arguments]
    if "--dataset" not in arguments:
        arguments += ["--dataset", root]
    assert cli.main(arguments) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # One line of error, no traceback; before it at most the line saying which backbone was loaded.
    assert [line for line in err if "error:" in line] == err[-1:] and len(err) <= 2, err
    assert err[-1].startswith(f"keras-vit {arguments[0]}: error: ") and re.search(message, err[-1]), err


def test_cli_fewshot_on_one_image_per_class_says_which_class_is_short_and_why(tmp_path, capsys):
    """3 classes of 1 image: the held-out share takes one class's only image; no shot count fits that class."""
    root = _write_folder(tmp_path / "oneper", classes=("cat", "dog", "owl"), per_class=1)
    spec = _tiny_npz(tmp_path, 16)
    for shots in ([], ["--shots", "1"]):
        assert cli.main(["fewshot", spec, "--dataset", root, "--scaling", "unit", *shots]) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert "at most 0" not in err, err
        empty = re.search(r"\((?:\w+: 1; )*(\w+): 0, the held-out share took its only image", err)
        assert empty, err
        assert re.search(rf"add images to {empty.group(1)}\b.*train/ and test/ sub-folders", err), err
    # Classes that keep some images: the shot counts that fit are named, and the held-out share's part.
    root = _write_folder(tmp_path / "six", per_class=6)
    assert cli.main(["fewshot", spec, "--dataset", root, "--scaling", "unit", "--validation-split", "0.5",
                     "--shots", "1,2,5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    smallest = re.search(r"Pass --shots of at most (\d)", err)
    assert smallest and "more held out" in err and "--validation-split" in err, err
    assert int(smallest.group(1)) >= 1 and f"(of those asked for: 1{',2' if int(smallest.group(1)) >= 2 else ''})" in err


def test_cli_commands_that_read_a_folder_say_which_corrupt_files_they_skipped(tmp_path, capsys):
    """knn, fewshot and embed print the line train and evaluate print, once, for a zero-byte .jpg."""
    root = _write_folder(tmp_path / "images", per_class=4)
    broken = os.path.join(root, "a", "broken.jpg")
    open(broken, "wb").close()
    spec = _tiny_npz(tmp_path, 16)
    common = ["--dataset", root, "--scaling", "unit"]
    for command in (["knn", "--k", "3", "--validation-split", "0.25"],
                    ["fewshot", "--shots", "1", "--draws", "1", "--validation-split", "0.25"],
                    ["embed", "--out", str(tmp_path / "e.npz")]):
        assert cli.main([command[0], spec, *common, *command[1:]]) == 0, command
        out = capsys.readouterr().out.splitlines()
        assert out.count(f"Skipped 1 corrupt image file: {broken}") == 1, (command, out)


def test_cli_embed_refuses_an_existing_out_file_without_overwrite(tmp_path, capsys):
    """One overwrite rule for every command that writes a user's file (README, Command line): as export does."""
    root = _write_folder(tmp_path / "images", per_class=2)
    out = tmp_path / "e.npz"
    out.write_bytes(b"precious")
    argv = ["embed", _tiny_npz(tmp_path, 16), "--dataset", root, "--scaling", "unit", "--out", str(out)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"'{out}' already exists; pass overwrite=True (--overwrite) to replace it" in err[0], err
    assert out.read_bytes() == b"precious"
    assert cli.main(argv + ["--overwrite"]) == 0
    with np.load(out) as data:
        assert data["embeddings"].shape[0] == 5  # 90% of 6 files


def _stderr_line(capsys):
    """The one line a user mistake prints (no backbone line before it, no traceback)."""
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error: " in err[0], err
    return err[0]


def test_cli_fewshot_names_max_train_examples_when_it_left_a_class_short_before_the_model_loads(tmp_path, capsys):
    """The first 2 training images are of 2 classes: the cut, not the held-out share, leaves the third empty.
    The labels come from the folder, so the check runs before SPEC (here a file that is not there) loads."""
    root = _write_folder(tmp_path / "images", per_class=6)
    spec = str(tmp_path / "never-loaded.npz")
    common = ["fewshot", spec, "--dataset", root, "--scaling", "unit", "--draws", "1"]
    assert cli.main([*common, "--max-train-examples", "2", "--shots", "1"]) == 2
    err = _stderr_line(capsys)
    assert re.search(r"Invalid --max-train-examples=2: .*\(\w: 0 of \d\)\. Pass --max-train-examples of at least "
                     r"\d+ .* or leave it out\.", err) and "held-out share" not in err, err
    assert cli.main([*common, "--shots", "25"]) == 2
    assert "Invalid --shots=(25,): 3 class(es) have fewer than 25" in _stderr_line(capsys)


def test_cli_embed_split_all_of_a_folder_embeds_its_held_out_share_too(tmp_path, capsys):
    root = _write_folder(tmp_path / "images", per_class=6)
    out = str(tmp_path / "all.npz")
    assert cli.main(["embed", _tiny_npz(tmp_path, 16), "--dataset", root, "--scaling", "unit", "--split", "all",
                     "--out", out]) == 0
    with np.load(out) as data:
        assert len(data["embeddings"]) == 18 and len(set(data["files"])) == 18
    capsys.readouterr()
    os.makedirs(tmp_path / "split" / "train")
    os.rename(root, tmp_path / "split" / "train" / "images")
    assert cli.main(["embed", "SPEC", "--dataset", str(tmp_path / "split"), "--split", "all", "--out", out,
                     "--overwrite"]) == 2
    assert "Invalid --split='all' for --dataset=" in _stderr_line(capsys)


@pytest.mark.parametrize("arguments, message", [
    (["knn", "CUT_KERAS", "--k", "1"], r"Invalid SPEC='[^']*cut\.keras': not a readable \.keras file \(no zip archive"),
    (["embed", "CUT_KERAS"], r"Invalid SPEC='[^']*cut\.keras': not a readable \.keras file \(no zip archive"),
    (["embed", "KERAS", "--texts", "TEXTS"], r"Invalid SPEC='[^']*cut\.keras': expected a Hugging Face two-tower"),
    (["embed", "KERAS", "--texts", "TEXTS", "--dataset", "x", "--max-examples", "3", "--download"],
     r"Invalid --dataset='x', --max-examples=3, --download with --texts: options of the images to embed"),
    (["embed", "KERAS", "--texts", "JPEG"], r"Invalid --texts='[^']*\.jpg': not UTF-8 text"),
    (["search", "CUT_NPZ", "--text", "a cat", "--weights", "nosuch"], r"Invalid EMBEDDINGS='[^']*cut\.npz': not an "
     r"\.npz file keras-vit embed writes"),
    (["search", "NPZ", "--text", "a cat", "--weights", "nosuch"], r"Invalid --weights='nosuch': not found; expected"),
])
def test_cli_unreadable_or_ignored_inputs_of_embed_search_and_knn_exit_2_naming_the_argument(
        arguments, message, tmp_path, capsys):
    root = _write_folder(tmp_path / "images", per_class=2)
    cut = tmp_path / "cut.keras"
    cut.write_bytes(b"PK\x03\x04" + bytes(3000))  # the start of a .keras file, cut off
    np.savez(tmp_path / "e.npz", embeddings=np.ones((2, 4), "float32"), files=np.array(["a.jpg", "b.jpg"]))
    (tmp_path / "cut.npz").write_bytes((tmp_path / "e.npz").read_bytes()[:300])
    (tmp_path / "texts.txt").write_text("a cat\n")
    jpeg = tmp_path / "photo.jpg"
    jpeg.write_bytes(tf.io.encode_jpeg(np.zeros((4, 4, 3), "uint8")).numpy())
    paths = {"CUT_KERAS": cut, "KERAS": cut, "TEXTS": tmp_path / "texts.txt", "JPEG": jpeg,
             "CUT_NPZ": tmp_path / "cut.npz", "NPZ": tmp_path / "e.npz"}
    arguments = [str(paths.get(a, a)) for a in arguments]
    if arguments[0] in ("knn", "embed") and "--texts" not in arguments:
        arguments += ["--dataset", root]
    if arguments[0] == "embed":
        arguments += ["--out", str(tmp_path / "out.npz")]
    assert cli.main(arguments) == 2
    err = _stderr_line(capsys)
    assert re.search(message, err) and "File not found" not in err, err
