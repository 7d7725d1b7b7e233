"""Dense features: each family's blocks as channels-last feature maps on the patch grid."""

import keras
import numpy as np
import pytest

import keras_vit
from helpers import ALL_BACKENDS, FAMILY_ROWS, to_numpy
from keras_vit.layers import TokenMap
from keras_vit.models.vit_model import block_indices

pytestmark = ALL_BACKENDS


def _random_model(variant, **kwargs):
    model = keras_vit.ViT(variant, image_size=None, include_top=False, **kwargs)
    rng = np.random.default_rng(0)
    for weight in model.weights:
        weight.assign(rng.normal(size=weight.shape).astype("float32") * 0.3)
    return model


@pytest.mark.parametrize("variant", FAMILY_ROWS + ("tiny", "R_tiny"))
def test_feature_maps_are_the_patch_tokens_on_the_grid_of_a_non_square_image(variant):
    model = _random_model(variant)
    side = model.pixel_multiple
    images = np.random.default_rng(1).uniform(0, 1, (2, 3 * side, 5 * side, 3)).astype("float32")
    maps, prefixes = model.feature_maps_model(indices=[0, -1], prefix_tokens=True)(images)
    raw = model.feature_maps_model(indices=2, norm=False)(images)
    intermediates = model.intermediates_model()(images)
    prefix = model.get_layer("embedding").num_prefix_tokens
    width = model.vit_config["hidden_size"]
    final = to_numpy(intermediates["tokens"])
    for got, tokens in ((maps[1], final), (raw[0], to_numpy(intermediates["blocks"][0])),
                        (raw[1], to_numpy(intermediates["blocks"][1]))):
        assert tuple(got.shape) == (2, 3, 5, width)
        # Row-major: token prefix + r * 5 + c is the patch at row r, column c.
        np.testing.assert_allclose(to_numpy(got), tokens[:, prefix:].reshape(2, 3, 5, width), atol=1e-5)
    np.testing.assert_allclose(to_numpy(prefixes[1]), final[:, :prefix], atol=1e-5)
    assert tuple(prefixes[0].shape) == (2, prefix, width)


def test_feature_maps_model_runs_only_up_to_the_last_chosen_block_and_trains_inside_a_model():
    model = _random_model("tiny")
    backbone = model.feature_maps_model(indices=[0])
    assert [layer.name for layer in backbone.layers if "encoderblock" in layer.name] == ["encoderblock_0"]
    backbone.trainable = False
    images = keras.Input((16, 16, 3))
    logits = keras.layers.Conv2D(3, 1, name="probe")(backbone(images)[0])
    segmenter = keras.Model(images, logits)
    segmenter.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    frozen = [to_numpy(w).copy() for w in backbone.weights]
    x = np.random.default_rng(2).uniform(size=(4, 16, 16, 3)).astype("float32")
    segmenter.fit(x, np.zeros((4, 4, 4), "int32"), epochs=1, verbose=0)
    assert all(np.array_equal(before, to_numpy(w)) for before, w in zip(frozen, backbone.weights))
    assert [w.name for w in segmenter.trainable_weights] == ["kernel", "bias"]


@pytest.mark.parametrize("indices, message", [
    (0, r"indices=0: an int chooses the last n blocks, 1 to 2"),
    (3, r"indices=3: .* 1 to 2"),
    ([0, 2], r"block\(s\) \[2\] beyond the depth; a model of 2 blocks has indices 0 to 1"),
    ([-3], r"block\(s\) \[-3\] beyond the depth"),
    ([], r"indices=\[\]: expected an int"),
    (True, r"indices=True: expected an int"),
    ("last", r"indices='last': expected an int"),
])
def test_feature_maps_refuse_indices_beyond_the_depth_by_name(indices, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.ViT("tiny").feature_maps_model(indices=indices)


def test_feature_maps_refuse_nonsense_and_naflex_models_by_name():
    with pytest.raises(ValueError, match="norm"):
        keras_vit.ViT("tiny").feature_maps_model(norm="yes")
    with pytest.raises(ValueError, match="naflex=False"):
        keras_vit.ViT("tiny_siglip2").feature_maps_model()
    backbone = keras_vit.ViT("tiny", image_size=None).feature_maps_model()
    with pytest.raises(ValueError, match="height=18"):
        backbone(np.zeros((1, 18, 16, 3), "float32"))


def test_block_indices_keep_the_order_given():
    assert block_indices(3, 12) == [9, 10, 11]
    assert block_indices([11, 0, -2], 12) == [11, 0, 10]


def test_token_map_layer_contract():
    layer = TokenMap(4, num_prefix_tokens=2)
    assert TokenMap.from_config(layer.get_config()).get_config() == layer.get_config()
    tokens, image = keras.Input((None, 8)), keras.Input((None, None, 3))
    grid, prefix = layer(tokens, image)
    assert tuple(grid.shape) == (None, None, None, 8) and tuple(prefix.shape) == (None, 2, 8)
    values = np.arange(2 * 8 * 3, dtype="float32").reshape(1, 8, 6)
    grid, prefix = TokenMap(2, num_prefix_tokens=2, dtype="mixed_bfloat16")(values, np.zeros((1, 4, 6, 3), "float32"))
    assert keras.backend.standardize_dtype(grid.dtype) == "bfloat16"
    np.testing.assert_array_equal(to_numpy(grid).astype("float32")[0, 1, 2], values[0, 2 + 5])
    with pytest.raises(ValueError, match="num_prefix_tokens=-1"):
        TokenMap(4, num_prefix_tokens=-1)
