"""Image folders as data: a whole-set shuffle every epoch, streaming, header sizes, honest splits."""

import csv
import io
import json
import os
import socket

import numpy as np
import pytest
import tensorflow as tf

from keras_vit import cli
from keras_vit.data import image_io, pipeline, sources

# Chi-square with 9 degrees of freedom (10 classes) exceeds this with probability 0.001.
CHI2_9_P001 = 27.88


def _png(size=(8, 8), value=0):
    return tf.io.encode_png(tf.fill(size + (3,), tf.constant(value, tf.uint8))).numpy()


def _class_folder(root, classes=10, per_class=60, size=(8, 8)):
    """A class-sorted folder `root/c0 .. c9/NNN.png` (the usual class/image.jpg layout)."""
    data = _png(size)
    for c in range(classes):
        os.makedirs(root / f"c{c}")
        for i in range(per_class):
            (root / f"c{c}" / f"{i:03d}.png").write_bytes(data)
    return str(root)


def _chi_square(labels, classes):
    counts = np.bincount(labels, minlength=classes)
    expected = len(labels) / classes
    return float(((counts - expected) ** 2 / expected).sum())


def test_class_sorted_folder_is_shuffled_whole_every_epoch(tmp_path):
    """The buffer of a listable source does not bound its shuffle: the keys of the whole folder
    are shuffled before decoding, so the first batches hold every class in proportion (with a
    60-image buffer over 600 sorted files, as a 10,000 buffer over CIFAR-10's 50,000, the old
    pipeline gave batches of one or two classes)."""
    source = sources.from_folder(_class_folder(tmp_path))
    ds = pipeline.make_pipeline(source, image_size=8, batch_size=60, training=True, shuffle_buffer=60, seed=0)
    epochs = [[labels.numpy().argmax(-1) for _, labels in ds] for _ in range(2)]
    for batch in epochs[0][:5]:
        assert _chi_square(batch, 10) < CHI2_9_P001, np.bincount(batch, minlength=10)
    first, second = (np.concatenate(epoch) for epoch in epochs)
    assert np.bincount(first).tolist() == [60] * 10 == np.bincount(second).tolist()  # each image once per epoch
    assert (first != second).mean() > 0.5  # a fresh order every epoch


def test_sorted_arrays_are_shuffled_whole():
    labels = np.repeat(np.arange(10), 100)
    source = sources.from_arrays(np.zeros((1000, 2, 2), np.uint8), labels)
    batch = next(iter(source.shuffled(seed=0, buffer_size=10).batch(100)))[1].numpy()
    assert _chi_square(batch, 10) < CHI2_9_P001, np.bincount(batch, minlength=10)
    assert source.take(300).num_examples == 300
    assert sorted(int(y) for _, y in source.take(300).shuffled(seed=1)) == sorted(labels[:300].tolist())


def test_folder_listing_streams_and_skips_hidden_entries(tmp_path, monkeypatch):
    root = _class_folder(tmp_path, classes=2, per_class=20)
    os.makedirs(tmp_path / ".ipynb_checkpoints")
    (tmp_path / ".ipynb_checkpoints" / "x.png").write_bytes(_png())
    (tmp_path / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (tmp_path / "c0" / ".hidden.png").write_bytes(b"not even an image")
    calls = []
    decode_image = tf.io.decode_image
    monkeypatch.setattr(tf.io, "decode_image", lambda *a, **k: calls.append(1) or decode_image(*a, **k))
    source = sources.from_folder(root)
    assert len(calls) <= 2  # traced into tf.data, not run once per file up front
    assert source.class_names == ("c0", "c1") and source.num_examples == 40 and source.skipped == 0
    assert source.image_size == (8, 8) and tuple(source.dataset.element_spec[0].shape) == (8, 8, 3)


def test_corrupt_file_bodies_are_skipped_in_the_pipeline_and_counted(tmp_path):
    root = _class_folder(tmp_path, classes=2, per_class=5)
    good = _png()
    (tmp_path / "c1" / "truncated.png").write_bytes(good[: len(good) // 2])  # header fine, body cut
    (tmp_path / "c1" / "text.jpg").write_bytes(b"plain text, no image")
    source = sources.from_folder(root)
    assert source.skipped == 1 and source.num_examples == 11  # the header check caught text.jpg
    labels = [int(y) for _, y in source.shuffled(seed=0)]
    assert sorted(labels) == [0] * 5 + [1] * 5
    corrupt = sorted(os.path.basename(p) for p in source.corrupt_files())
    assert corrupt == ["text.jpg", "truncated.png"]
    with pytest.raises(ValueError, match="text.jpg"):
        sources.from_folder(root, on_corrupt="error")
    os.remove(tmp_path / "c1" / "text.jpg")
    with pytest.raises(tf.errors.InvalidArgumentError, match="Corrupt image file .*truncated.png"):
        list(sources.from_folder(root, on_corrupt="error").dataset)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "GIF", "BMP"])
def test_header_sizes_match_decoded_sizes(fmt, tmp_path):
    Image = pytest.importorskip("PIL.Image")
    path = tmp_path / f"x.{fmt.lower()}"
    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (13, 21, 3), dtype=np.uint8))
    options = {"progressive": True, "exif": b"Exif\0\0" + bytes(3000)} if fmt == "JPEG" else {}
    image.save(path, fmt, **options)
    decoded = tf.io.decode_image(path.read_bytes(), expand_animations=False)
    assert image_io.image_size(str(path)) == tuple(decoded.shape[:2]) == (13, 21)
    assert image_io.read_size(io.BytesIO(path.read_bytes()[:8])) is None  # a header cut short


def test_image_size_is_the_folders_own_or_must_be_given(tmp_path):
    from keras_vit.models.spec import resolve_image_size

    same = sources.from_folder(_class_folder(tmp_path / "same", classes=2, per_class=2, size=(32, 32)))
    assert resolve_image_size(None, None, same.image_size) == (
        32, "the images' own (32x32)")
    mixed_root = _class_folder(tmp_path / "mixed", classes=2, per_class=2)
    (tmp_path / "mixed" / "c1" / "big.png").write_bytes(_png((16, 16)))
    with pytest.raises(ValueError, match=r"differ in size.*--image-size"):
        resolve_image_size(None, None, sources.from_folder(mixed_root).image_size)
    assert resolve_image_size(24, None, sources.from_folder(mixed_root).image_size)[0] == 24
    wide = sources.from_folder(_class_folder(tmp_path / "wide", classes=2, per_class=1, size=(8, 12)))
    with pytest.raises(ValueError, match="8x12, not square"):
        resolve_image_size(None, None, wide.image_size)


def test_flat_folder_holds_out_validation_and_has_no_test(tmp_path):
    root = _class_folder(tmp_path, classes=2, per_class=20)
    train, validation, test = sources.load_splits(root, seed=3)
    assert test is None and (train.num_examples, validation.num_examples) == (36, 4)
    assert not set(train.files) & set(validation.files)  # never evaluated on images trained on
    assert set(train.files) | set(validation.files) == set(sources.from_folder(root).files)
    assert sources.load_splits(root, seed=3)[1].files == validation.files  # deterministic by seed
    assert "held-out 10% (seed 3)" in validation.description
    with pytest.raises(ValueError, match="has no test images.*'validation'"):
        sources.load_source(root, "test")
    with pytest.raises(ValueError, match="split='validaton'.*'train', 'validation'"):
        sources.load_source(root, "validaton")


def test_split_folder_without_test_refuses_before_training(tmp_path, capsys):
    _class_folder(tmp_path / "data" / "train", classes=2, per_class=8)
    run_dir = tmp_path / "run"
    argv = ["train", "--dataset", str(tmp_path / "data"), "--run-dir", str(run_dir), "--output-dir", str(tmp_path / "out"),
            "--variant", "tiny", "--image-size", "8", "--patch-size", "4", "--batch-size", "4", "--epochs", "1",
            "--jit-compile", "off", "--quiet", "--no-export"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "split='test'" in err and "--validation-split" in err
    assert not run_dir.exists()  # refused before anything ran
    train, validation, test = sources.load_splits(str(tmp_path / "data"), validation_split=0.25)
    assert test is None and (train.num_examples, validation.num_examples) == (12, 4)


def test_cli_trains_a_flat_folder_at_its_own_size_with_validation(tmp_path, capsys):
    """A folder of 32x32 images with --patch-size 4 builds a 32 px model (64 tokens; it built
    224 px and 3,137 tokens), validates every epoch on the held-out tenth, reports no test
    accuracy and counts the corrupt files it skipped."""
    root = _class_folder(tmp_path / "data", classes=2, per_class=20, size=(32, 32))
    good = _png((32, 32))
    (tmp_path / "data" / "c0" / "cut.png").write_bytes(good[: len(good) // 2])
    (tmp_path / "data" / "c1" / "empty.jpg").write_bytes(b"")
    argv = ["train", "--dataset", root, "--run-dir", str(tmp_path / "run"), "--output-dir", str(tmp_path / "out"),
            "--patch-size", "4", "--hidden-size", "16", "--num-layers", "1", "--num-heads", "2", "--mlp-dim", "16",
            "--batch-size", "8", "--epochs", "2", "--jit-compile", "off", "--quiet", "--no-export", "--name", "m"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "Test accuracy" not in out and "Validation accuracy:" in out and "held-out 10%" in out
    assert "Skipped 2 corrupt image files" in out and "cut.png" in out
    summary = json.loads((tmp_path / "out" / "m.json").read_text())
    assert summary["settings"]["image_size"] == 32 and summary["data"]["image_size"] == "the images' own (32x32)"
    with open(tmp_path / "run" / "history.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 and all(0.0 <= float(row["val_accuracy"]) <= 1.0 for row in rows)

    model = str(tmp_path / "out" / "m.keras")
    assert cli.main(["evaluate", model, "--dataset", root, "--split", "train"]) == 0
    assert "(training data)" in capsys.readouterr().out
    assert cli.main(["evaluate", model, "--dataset", root, "--split", "validation"]) == 0
    assert "on 4 examples" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--max-examples", "-5"], "--max-examples=-5"),
        (["--max-examples", "0"], "--max-examples=0"),
        (["--split", "validaton"], "split='validaton'"),
        (["--validation-split", "1.5"], "--validation-split=1.5"),
    ],
)
def test_evaluate_bad_data_arguments_are_one_line(argv, message, tmp_path, capsys):
    import keras_vit

    model = str(tmp_path / "m.keras")
    keras_vit.ViT("tiny", num_classes=10, input_shape=(28, 28, 1), num_layers=1, preprocessing="unit").save(model)
    assert cli.main(["evaluate", model] + argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and "Traceback" not in err


def test_download_without_network_fails_fast(tmp_path, monkeypatch):
    """No network: one ConnectionError from a 3-second probe, before tfds' own download (which
    retries for minutes)."""
    tfds = pytest.importorskip("tensorflow_datasets")
    calls = []
    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", lambda self, *a, **k: calls.append(1))

    def unreachable(address, timeout=None):
        assert timeout is not None and timeout <= 5
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "create_connection", unreachable)
    with pytest.raises(ConnectionError, match=r"Could not download dataset='mnist': gaierror"):
        sources.from_tfds("mnist", data_dir=str(tmp_path), download=True)
    assert not calls
    monkeypatch.setattr(tfds.core.DatasetBuilder, "is_prepared", lambda self: True)
    with tfds.testing.mock_data(num_examples=2):  # prepared data needs no network, even with download=True
        assert sources.from_tfds("mnist", download=True).num_classes == 10


def test_folder_pipeline_benchmark_runs_on_a_small_folder():
    from benchmarks import folder_pipeline as module

    record = module.measure_pipeline(files=300, batch_size=32, max_seconds=1.0)
    assert record["files"] == 300 and record["pipeline_images_per_second"] > 0
    assert 0 < record["list_seconds"] <= record["first_batch_seconds"] <= record["first_step_seconds"]


def test_folder_images_decode_as_served(tmp_path):
    # One route from a file to pixels: the folder source decodes as the SavedModel's serve_bytes
    # does, so a colour-palette BMP (TensorFlow alone decodes it to palette indices) is refused
    # and skipped, not trained on, and grey comes from colour by the same luma weights.
    from keras_vit.export.saved_model import decode_images

    Image = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(0)
    colour = rng.integers(0, 255, (6, 6, 3), dtype=np.uint8)
    for name in ("a", "b"):
        os.makedirs(tmp_path / name)
    Image.fromarray(colour).save(tmp_path / "a" / "photo.png")
    Image.fromarray(colour).quantize(16).save(tmp_path / "b" / "palette.bmp")
    source = sources.from_folder(str(tmp_path), channels=1)
    decoded = [image.numpy() for image, _ in source.dataset]
    assert len(decoded) == 1 and source.corrupt_files() == (str(tmp_path / "b" / "palette.bmp"),)
    served = decode_images(tf.constant([(tmp_path / "a" / "photo.png").read_bytes()]), 6, 6, 1).numpy()[0]
    np.testing.assert_array_equal(decoded[0], np.round(served).astype("uint8"))


@pytest.mark.parametrize("size, patch", [(32, 8)])
def test_a_square_folder_of_any_size_trains_with_no_model_flags(size, patch, tmp_path, capsys):
    """Issue 27: the default model's patch 7 (made for 28 px) stopped every 32 px folder at once.

    One size here; the rule's other sizes are `keras_vit.models.spec.default_patch_size`'s doctest, and 32, 48 and
    96 px folders train under a budget in tests/test_budget.py.
    """
    root = _class_folder(tmp_path / "data", classes=2, per_class=8, size=(size, size))
    argv = ["train", "--dataset", root, "--run-dir", str(tmp_path / "run"), "--output-dir", str(tmp_path / "out"),
            "--num-layers", "1", "--batch-size", "8", "--epochs", "1", "--jit-compile", "off", "--quiet", "--no-export"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    header = capsys.readouterr().out
    grid = size // patch
    assert f"(patch {patch} (chosen for {size} px images: a {grid}x{grid} grid of patches" in header
    assert f"{grid * grid + 1} tokens" in header
