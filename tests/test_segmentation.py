"""The linear segmentation probe (DINOv2's linear head on frozen patch features), its metrics and its data."""

import keras
import numpy as np
import pytest

import keras_vit
from helpers import ALL_BACKENDS, FAMILY_ROWS, to_numpy
from keras_vit.data import canvas_segmentation_set, check_masks, load_sample
from keras_vit.layers import ResizeLike
from keras_vit.models import segmentation_metrics


def _backbone(variant="tiny", **kwargs):
    return keras_vit.ViT(variant, image_size=None, include_top=False, **kwargs)


# The head reads every family's maps alike (tests/test_dense.py runs each family's maps on every
# backend): off TensorFlow, where each eager call of a new model costs seconds, two rows suffice.
OFF_TENSORFLOW_ROWS = ("tiny_dinov2", "R_tiny")


@pytest.mark.parametrize("variant", [
    pytest.param(variant, marks=ALL_BACKENDS if variant in OFF_TENSORFLOW_ROWS else pytest.mark.backends("tensorflow"))
    for variant in FAMILY_ROWS + ("tiny", "R_tiny")
])
def test_probe_gives_float32_logits_at_the_size_of_a_non_square_image_for_every_family(variant):
    backbone = _backbone(variant)
    side = backbone.pixel_multiple
    probe = keras_vit.LinearSegmenter(backbone, num_classes=3, indices=2)
    logits = probe(np.random.default_rng(0).uniform(0, 1, (2, 2 * side, 3 * side, 3)).astype("float32"))
    assert tuple(logits.shape) == (2, 2 * side, 3 * side, 3)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"
    width = backbone.vit_config["hidden_size"]
    assert probe.get_layer("head").kernel.shape == (1, 1, 2 * width, 3)  # two blocks' maps on channels
    assert [w.path.split("/")[0] for w in probe.trainable_weights] == ["head_norm"] * 2 + ["head"] * 2


@ALL_BACKENDS
def test_probe_learns_a_toy_task_on_a_frozen_backbone_and_survives_a_keras_round_trip(tmp_path):
    """Bright 4 px patches are class 1, dark ones class 0: a probe fits that from a random backbone's features."""
    backbone = _backbone("tiny", dropout_rate=0.5)  # inference mode in fit: dropout would change nothing frozen
    probe = keras_vit.compile_segmenter(keras_vit.LinearSegmenter(backbone, num_classes=2),
                                        optimizer=keras.optimizers.Adam(0.05))
    rng = np.random.default_rng(0)
    masks = np.kron(rng.integers(0, 2, (32, 4, 4)), np.ones((4, 4), "int64")).astype("int32")
    images = (masks[..., None] * 0.8 + rng.uniform(0, 0.2, (32, 16, 16, 3))).astype("float32")
    check_masks(images, masks, num_classes=2)
    frozen = [to_numpy(w).copy() for w in backbone.weights]
    features_before = to_numpy(backbone(images[:4]))
    history = probe.fit(images, masks, epochs=4, batch_size=8, verbose=0).history
    assert history["loss"][-1] < 0.5 * history["loss"][0], history["loss"]
    assert history["mean_iou"][-1] > 0.8 and history["pixel_accuracy"][-1] > 0.9, history
    assert all(np.array_equal(before, to_numpy(w)) for before, w in zip(frozen, backbone.weights))
    np.testing.assert_array_equal(to_numpy(backbone(images[:4])), features_before)
    path = str(tmp_path / "probe.keras")
    probe.save(path)
    restored = keras.saving.load_model(path)
    np.testing.assert_allclose(to_numpy(restored.predict(images[:4], verbose=0)),
                               to_numpy(probe.predict(images[:4], verbose=0)), atol=1e-5)
    assert [w.path.split("/")[0] for w in restored.trainable_weights] == ["head_norm"] * 2 + ["head"] * 2
    # The backbone's dropout stays off in training calls too (fit's): two calls agree.
    np.testing.assert_array_equal(to_numpy(restored(images[:4], training=True)),
                                  to_numpy(restored(images[:4], training=True)))


@ALL_BACKENDS
def test_mean_iou_and_pixel_accuracy_on_a_hand_made_case():
    # Pixels (true, predicted): (0, 0), (0, 1), (1, 1), (2, 1), (255, 2).
    true, logits = np.array([[0, 0, 1, 2, 255]]), np.eye(3, dtype="float32")[[[0, 1, 1, 1, 2]]]
    (mean_iou,) = segmentation_metrics(3, ignore_index=255)
    mean_iou.update_state(true, logits)
    # IoU = TP / (TP + FP + FN): class 0 1/2, class 1 1/3 (two false positives), class 2 0/1;
    # the ignored pixel, predicted 2, is no false positive of class 2.
    np.testing.assert_allclose(float(mean_iou.result()), (1 / 2 + 1 / 3 + 0) / 3, rtol=1e-6)
    mean_iou, accuracy = segmentation_metrics(3)
    mean_iou.update_state(true[:, :4], logits[:, :4])
    accuracy.update_state(true[:, :4], logits[:, :4])
    np.testing.assert_allclose([float(mean_iou.result()), float(accuracy.result())], [(1 / 2 + 1 / 3 + 0) / 3, 2 / 4])


@ALL_BACKENDS
def test_resize_like_matches_pytorch_bilinear_interpolation_without_aligned_corners():
    torch = pytest.importorskip("torch")
    maps = np.random.default_rng(0).normal(size=(2, 3, 5, 4)).astype("float32")
    got = to_numpy(ResizeLike()(maps, np.zeros((2, 12, 20, 1), "uint8")))
    expected = torch.nn.functional.interpolate(torch.from_numpy(maps.transpose(0, 3, 1, 2)), size=(12, 20),
                                               mode="bilinear", align_corners=False).numpy().transpose(0, 2, 3, 1)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    layer = ResizeLike("nearest", dtype="mixed_bfloat16")
    assert ResizeLike.from_config(layer.get_config()).get_config() == layer.get_config()
    assert keras.backend.standardize_dtype(layer(maps, np.zeros((1, 6, 10, 3))).dtype) == "bfloat16"
    assert tuple(ResizeLike()(keras.Input((None, None, 4)), keras.Input((None, None, 3))).shape) == (None,) * 3 + (4,)
    with pytest.raises(ValueError, match="interpolation='area'"):
        ResizeLike("area")


@ALL_BACKENDS
def test_probe_refuses_bad_backbones_classes_and_image_sizes_by_name():
    with pytest.raises(ValueError, match="num_classes=1"):
        keras_vit.LinearSegmenter(_backbone(), num_classes=1)
    with pytest.raises(ValueError, match="Invalid backbone=.*expected a keras_vit model"):
        keras_vit.LinearSegmenter(keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 1)]), 2)
    with pytest.raises(ValueError, match="naflex=False"):
        keras_vit.LinearSegmenter(keras_vit.ViT("tiny_siglip2"), 2)
    with pytest.raises(ValueError, match="indices=3: an int chooses the last n blocks, 1 to 2"):
        keras_vit.LinearSegmenter(_backbone(), 2, indices=3)
    with pytest.raises(ValueError, match="height=18"):
        keras_vit.LinearSegmenter(_backbone(), 2)(np.zeros((1, 18, 16, 3), "float32"))
    with pytest.raises(ValueError, match=r"ignore_index=1: expected None or an int outside the classes 0 to 2"):
        segmentation_metrics(3, ignore_index=1)


@pytest.mark.parametrize("masks, kwargs, message", [
    (np.zeros((2, 8, 6), "int32"), {}, r"masks of shape \(2, 8, 6\): expected .* shape \(2, 8, 8\)"),
    (np.zeros((2, 8, 8, 1), "int32"), {}, r"masks of shape \(2, 8, 8, 1\)"),
    (np.zeros((3, 8, 8), "int32"), {}, r"masks of shape \(3, 8, 8\)"),
    (np.zeros((2, 8, 8), "float32"), {}, r"masks of dtype float32: expected integer class indices"),
    (np.full((2, 8, 8), 3), {}, r"values \[3\] outside the classes 0 to 2 of num_classes=3"),
    (np.full((2, 8, 8), -1), {"ignore_index": 255}, r"values \[-1\] outside .* or ignore_index=255"),
])
def test_check_masks_refuses_masks_that_do_not_fit_by_name(masks, kwargs, message):
    images = np.zeros((2, 8, 8, 3), "uint8")
    with pytest.raises(ValueError, match=message):
        check_masks(images, masks, 3, **kwargs)
    check_masks(images, np.where(np.eye(8, dtype=bool), 255, 2)[None].repeat(2, 0), 3, ignore_index=255)


def test_canvas_set_masks_each_item_pixel_with_its_class_plus_one():
    (items, labels), _ = load_sample()
    images, masks = canvas_segmentation_set(items[:50], labels[:50], count=20, canvas_size=40, max_items=3, seed=1)
    assert images.shape == masks.shape == (20, 40, 40) and images.dtype == masks.dtype == np.uint8
    np.testing.assert_array_equal(masks > 0, images > 0)  # the background is 0 exactly where no item is
    assert set(np.unique(masks)) <= set(labels[:50].astype(int) + 1) | {0}
    assert all((mask > 0).any() for mask in masks)
    again, _ = canvas_segmentation_set(items[:50], labels[:50], count=20, canvas_size=40, max_items=3, seed=1)
    np.testing.assert_array_equal(again, images)
    # One item, alone: its pixels at one place, resized.
    one, one_mask = canvas_segmentation_set(items[:1], labels[:1], count=1, canvas_size=14, item_size=14, max_items=1)
    np.testing.assert_array_equal(one[0], items[0, ::2, ::2])
    assert set(np.unique(one_mask)) == {0, int(labels[0]) + 1}
    with pytest.raises(ValueError, match=r"item_size=30: items of 30x30 px do not fit on a canvas_size=28"):
        canvas_segmentation_set(items[:2], labels[:2], count=1, canvas_size=28, item_size=30)
    with pytest.raises(ValueError, match=r"labels of shape \(1,\)"):
        canvas_segmentation_set(items[:2], labels[:1], count=1)
