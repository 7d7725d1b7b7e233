"""Data sources (arrays, tfds via mock_data, image folders) and the input pipeline."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_vit.data import augment, pipeline, sources


def _folder(tmp_path, per_class=3, size=(12, 10), corrupt=0):
    rng = np.random.default_rng(0)
    for name in ("cat", "dog"):
        os.makedirs(tmp_path / name)
        for i in range(per_class):
            pixels = rng.integers(0, 255, size + (3,), dtype=np.uint8)
            tf.io.write_file(str(tmp_path / name / f"{i}.png"), tf.io.encode_png(pixels))
    for i in range(corrupt):
        (tmp_path / "dog" / f"broken{i}.jpg").write_bytes(b"not an image at all")
    return str(tmp_path)


def test_arrays_pipeline_shapes_scaling_and_one_hot():
    images = np.full((10, 28, 28), 255, np.uint8)
    source = sources.from_arrays(images, np.arange(10) % 3)
    assert source.class_names == ("0", "1", "2")
    ds = pipeline.make_pipeline(source, image_size=14, channels=3, scaling="symmetric", batch_size=4)
    batches = list(ds)
    assert [tuple(b[0].shape) for b in batches] == [(4, 14, 14, 3), (4, 14, 14, 3), (2, 14, 14, 3)]
    np.testing.assert_allclose(batches[0][0].numpy(), 1.0)  # 255 -> +1 in [-1, 1]
    np.testing.assert_array_equal(batches[0][1].numpy().argmax(-1), [0, 1, 2, 0])
    train = pipeline.make_pipeline(source, image_size=28, channels=1, batch_size=4, training=True, seed=1)
    assert len(list(train)) == 2  # drop_remainder while training: static batch shapes for XLA


def test_pipelines_run_without_tf_data_autotuning():
    """With it, deleting an epoch's iterator after busy training steps waited for seconds (issue 16)."""
    source = sources.from_arrays(np.zeros((8, 28, 28), np.uint8), np.arange(8) % 2)
    for training in (True, False):
        ds = pipeline.make_pipeline(source, image_size=28, channels=1, batch_size=4, training=training)
        assert ds.options().autotune.enabled is False
        assert len(list(ds)) == 2


def test_arrays_bad_input():
    with pytest.raises(ValueError, match="differ in length"):
        sources.from_arrays(np.zeros((3, 8, 8)), np.zeros(2))
    with pytest.raises(ValueError, match="scaling"):
        pipeline.make_pipeline(sources.from_arrays(np.zeros((3, 8, 8)), np.zeros(3)), image_size=8, scaling="minmax")


def test_eval_center_crop():
    image = np.zeros((1, 16, 16), np.uint8)
    image[0, 4:12, 4:12] = 255
    source = sources.from_arrays(image, [0])
    ds = pipeline.make_pipeline(source, image_size=8, channels=1, batch_size=1, crop_fraction=0.5)
    np.testing.assert_allclose(next(iter(ds))[0].numpy(), 1.0)  # the center half, upscaled


@pytest.mark.parametrize("preset", ["none", "light", "medium", "strong"])
@pytest.mark.parametrize("channels", [1, 3])
def test_augmentation_presets_shape_dtype(preset, channels):
    rng = np.random.default_rng(0)
    source = sources.from_arrays(rng.integers(0, 255, (8, 20, 20, 3), dtype=np.uint8), np.arange(8) % 4)
    ds = pipeline.make_pipeline(
        source, image_size=16, channels=channels, batch_size=8, training=True, augment=preset, seed=3
    )
    images, labels = next(iter(ds))
    assert tuple(images.shape) == (8, 16, 16, channels) and images.dtype == tf.float32
    assert tuple(labels.shape) == (8, 4) and labels.dtype == tf.float32
    np.testing.assert_allclose(labels.numpy().sum(-1), 1.0, rtol=1e-5)  # mixed labels stay distributions
    assert 0.0 <= float(tf.reduce_min(images)) and float(tf.reduce_max(images)) <= 1.0 + 1e-5


def test_user_augmentation_layer_and_unknown_preset():
    source = sources.from_arrays(np.zeros((4, 8, 8, 3), np.uint8), [0, 1, 0, 1])
    layer = keras.layers.RandomContrast(0.5, seed=1)
    ds = pipeline.make_pipeline(source, image_size=8, batch_size=4, training=True, augment=[layer])
    assert tuple(next(iter(ds))[0].shape) == (4, 8, 8, 3)
    with pytest.raises(ValueError, match="augment='heavy'"):
        pipeline.make_pipeline(source, image_size=8, batch_size=4, training=True, augment="heavy")


def test_random_resized_crop_covers_scale():
    image = tf.reshape(tf.range(32 * 32, dtype=tf.float32), (32, 32, 1))
    crop = augment.random_resized_crop(image, (8, 8), scale=(1.0, 1.0), ratio=(1.0, 1.0), seed=0)
    np.testing.assert_allclose(crop.numpy(), tf.image.resize(image, (8, 8)).numpy(), atol=1e-3)


def test_tfds_with_mock_data():
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=6):
        source = sources.from_tfds("fashion_mnist", split="train")
        assert source.class_names[0] == "T-shirt/top" and source.num_classes == 10
        ds = pipeline.make_pipeline(source, image_size=32, channels=3, batch_size=3, scaling="imagenet")
        images, labels = next(iter(ds))
        assert tuple(images.shape) == (3, 32, 32, 3) and tuple(labels.shape) == (3, 10)
        assert sources.load_source("cifar10", split="test[:50%]").dataset.element_spec[0].shape == (32, 32, 3)
    with pytest.raises(ValueError, match="no_such_dataset_xyz"):
        sources.from_tfds("no_such_dataset_xyz")


def test_folder_loading_and_mixed_sizes(tmp_path):
    directory = _folder(tmp_path)
    source = sources.from_folder(directory)
    assert source.class_names == ("cat", "dog") and source.num_examples == 6 and source.skipped == 0
    ds = pipeline.make_pipeline(source, image_size=8, batch_size=6)
    images, labels = next(iter(ds))
    assert tuple(images.shape) == (6, 8, 8, 3)
    np.testing.assert_array_equal(labels.numpy().argmax(-1), [0, 1, 0, 1, 0, 1])  # classes in turn


def test_folder_corrupt_files_skip_or_error(tmp_path):
    directory = _folder(tmp_path, corrupt=2)
    source = sources.from_folder(directory, on_corrupt="skip")
    assert source.num_examples == 6 and source.skipped == 2
    with pytest.raises(ValueError, match="broken0.jpg"):
        sources.from_folder(directory, on_corrupt="error")


def test_folder_empty_missing_and_unreadable(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="not found"):
        sources.from_folder(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="no class sub-folders"):
        sources.from_folder(str(tmp_path))
    os.makedirs(tmp_path / "a")
    (tmp_path / "a" / "notes.txt").write_text("no images here")
    with pytest.raises(ValueError, match="holds no images"):
        sources.from_folder(str(tmp_path))
    (tmp_path / "a" / "x.png").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="No readable image"):
        sources.from_folder(str(tmp_path))

    def denied(path):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(os, "scandir", denied)  # tests run as root, where chmod 000 does not bite
    with pytest.raises(ValueError, match="not readable"):
        sources.from_folder(str(tmp_path))


def test_load_source_sample_and_folder_splits(tmp_path):
    sample = sources.load_source("sample", "test")
    assert sample.num_examples == 2000 and sample.class_names[-1] == "Ankle boot"
    with pytest.raises(ValueError, match="split='validation'"):
        sources.load_source("sample", "validation")
    _folder(tmp_path / "train")
    assert sources.load_source(str(tmp_path), "train").num_examples == 6
    with pytest.raises(FileNotFoundError):
        sources.load_source(str(tmp_path / "nope"), "train")


def test_tfds_download_path_is_importable_and_its_failure_is_clear(tmp_path, monkeypatch):
    """`download=True` reaches tfds' preparation code (which needs importlib_resources, an
    undeclared tfds dependency) and a failed download becomes one clear ConnectionError."""
    tfds = pytest.importorskip("tensorflow_datasets")
    requests = pytest.importorskip("requests")
    assert tfds.builder("mnist", data_dir=str(tmp_path)).code_path.name == "mnist.py"

    def no_network(self, *args, **kwargs):
        raise requests.exceptions.ConnectionError("Failed to resolve 'storage.googleapis.com'")

    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", no_network)
    monkeypatch.setattr(sources, "_probe_network", lambda: None)  # past the quick check, to tfds' own download
    with pytest.raises(ConnectionError, match=r"Could not download dataset='mnist': ConnectionError: Failed to resolve"):
        sources.from_tfds("mnist", data_dir=str(tmp_path), download=True)
    assert not any(tmp_path.iterdir())


def test_tfds_training_order_reads_files_in_a_fresh_order(monkeypatch):
    tfds = pytest.importorskip("tensorflow_datasets")
    calls = []
    as_dataset = tfds.core.DatasetBuilder.as_dataset

    def recording(self, *args, **kwargs):
        calls.append(kwargs.get("shuffle_files"))
        return as_dataset(self, *args, **kwargs)

    monkeypatch.setattr(tfds.core.DatasetBuilder, "as_dataset", recording)
    with tfds.testing.mock_data(num_examples=6):
        source = sources.from_tfds("mnist", split="train")
        assert len(list(source.shuffled(seed=0, buffer_size=4))) == 6
        assert source.take(3).reorder is None and len(list(source.take(3).shuffled(seed=0))) == 3
    assert calls == [False, True]  # the fixed order for evaluation, shuffled files for training


@pytest.mark.parametrize("cache", [False, True])
def test_a_repeated_training_pipeline_gives_every_example_once_a_pass(cache):
    # Repeated before its parallel maps (not deterministic in training), an example of the next
    # pass could enter this one's last batches: a pass held one image twice and missed another.
    images = np.arange(64, dtype=np.uint8).reshape(64, 1, 1, 1) * np.ones((1, 4, 4, 1), np.uint8)
    source = sources.from_arrays(images, np.zeros(64, np.int32), class_names=["a"])
    dataset = pipeline.make_pipeline(source, image_size=4, channels=1, batch_size=16, training=True, seed=0,
                                     cache=cache, repeat=True, scaling=None)
    batches = iter(dataset)
    passes = [np.concatenate([next(batches)[0].numpy()[:, 0, 0, 0] for _ in range(4)]) for _ in range(20)]
    for seen in passes:
        assert sorted(seen.astype(int).tolist()) == list(range(64))
    assert len({tuple(seen) for seen in passes}) == 20  # a fresh order each pass
