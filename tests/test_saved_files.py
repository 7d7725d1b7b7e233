"""`.keras` files saved by an earlier keras_vit still load: the registered names are the file format.

tests/data holds two tiny models saved with the code as it was before `keras_vit/models/vit.py`
was split into modules (random weights, so the outputs test weights and graph both): an image
model (registers, GAP, ImageNet preprocessing) and a NaFlex model, with their outputs.
"""

import os

import keras
import numpy as np
import pytest

from helpers import ALL_BACKENDS, to_numpy

DATA = os.path.join(os.path.dirname(__file__), "data")


@pytest.fixture(scope="module")
def expected():
    with np.load(os.path.join(DATA, "vit_saved_before_split.npz")) as stored:
        return dict(stored)


@ALL_BACKENDS
def test_an_image_model_saved_before_the_split_loads_and_predicts_the_same(expected):
    import keras_vit  # noqa: F401  (registers the classes the file names)

    model = keras.saving.load_model(os.path.join(DATA, "vit_saved_before_split.keras"))
    assert type(model).__name__ == "VisionTransformer"
    assert model.vit_config["num_register_tokens"] == 1 and model.vit_config["pooling"] == "gap"
    np.testing.assert_allclose(to_numpy(model(expected["images"])), expected["image_output"], atol=1e-5)


@ALL_BACKENDS
def test_a_naflex_model_saved_before_the_split_loads_and_predicts_the_same(expected):
    import keras_vit  # noqa: F401

    model = keras.saving.load_model(os.path.join(DATA, "naflex_vit_saved_before_split.keras"))
    assert model.vit_config["naflex"]
    inputs = {"patches": expected["patches"], "spatial_shapes": expected["spatial_shapes"]}
    np.testing.assert_allclose(to_numpy(model(inputs)), expected["naflex_output"], atol=1e-5)
