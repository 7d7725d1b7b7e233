"""Mimetic initialization (`keras_vit.models.mimetic`): the kernel products it promises, on every
attention layer of a model (behind a stem too), and a clear refusal of bad arguments."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.models import mimetic, stems


def _tiny(**kwargs):
    arguments = dict(patch_size=7, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, image_size=28,
                     input_shape=(28, 28, 1), num_classes=3)
    return keras_vit.ViT(**{**arguments, **kwargs})


def _attention(model):
    return [layer.attention for layer in model.layers if hasattr(layer, "attention")]


def _array(variable):
    return keras.ops.convert_to_numpy(variable)


def _products(attention):
    q, k, v, o = (_array(x) for x in (attention.query.kernel, attention.key.kernel, attention.value.kernel,
                                      attention.attention_output.kernel))
    heads = q.shape[1]
    return [q[:, h] @ k[:, h].T for h in range(heads)], sum(v[:, h] @ o[h] for h in range(heads))


def test_without_noise_each_head_attends_by_similarity_and_the_heads_subtract_their_input():
    model = _tiny()
    assert mimetic.mimetic_initialization(model, query_key=(0.0, 0.7), value_output=(0.0, 0.4)) == 2
    for attention in _attention(model):
        query_key, value_output = _products(attention)
        for product in query_key:
            # 0.7 times a projection onto the head's 8 dimensions: eigenvalues 0.7 (x8) and 0.
            eigenvalues = np.sort(np.linalg.eigvalsh((product + product.T) / 2))
            np.testing.assert_allclose(eigenvalues[-8:], 0.7, atol=1e-5)
            np.testing.assert_allclose(eigenvalues[:-8], 0.0, atol=1e-5)
        np.testing.assert_allclose(value_output, -0.4 * np.eye(32), atol=1e-5)


def test_with_noise_the_products_are_near_the_paper_s_and_reproducible():
    first, second, other = _tiny(), _tiny(), _tiny()
    for model, seed in ((first, 3), (second, 3), (other, 4)):
        mimetic.mimetic_initialization(model, seed=seed)
    query_key, value_output = _products(_attention(first)[0])
    for product in query_key:
        assert np.trace(product) > 0.5 * 0.7 * 8  # a positive multiple of a projection, plus noise
    assert np.trace(value_output) / 32 == pytest.approx(-0.4, abs=0.1)
    same = _array(_attention(second)[0].query.kernel)
    np.testing.assert_array_equal(_array(_attention(first)[0].query.kernel), same)
    assert not np.allclose(_array(_attention(other)[0].query.kernel), same)


def test_biases_stay_and_the_model_still_runs():
    model = _tiny()
    before = [_array(w).copy() for w in model.weights if "bias" in w.path]
    mimetic.mimetic_initialization(model)
    after = [_array(w) for w in model.weights if "bias" in w.path]
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)
    output = model.predict(np.zeros((2, 28, 28, 1), "float32"), verbose=0)
    assert output.shape == (2, 3) and np.isfinite(output).all()


def test_the_blocks_behind_a_conv_stem_are_found():
    model = keras_vit.ViT(patch_size=1, hidden_size=32, num_layers=2, num_heads=2, mlp_dim=64,
                          input_shape=(32, 32, 1), num_classes=3, backbone=stems.conv_stem(channels=1))
    assert mimetic.mimetic_initialization(model) == 2


def test_a_model_without_attention_is_left_alone():
    assert mimetic.mimetic_initialization(stems.conv_stem(channels=1)) == 0


@pytest.mark.parametrize("arguments, match", [
    (dict(query_key=(0.7,)), "query_key"),
    (dict(value_output=(0.4, -1.0)), "value_output"),
    (dict(query_key=(float("nan"), 0.7)), "query_key"),
    (dict(seed=-1), "seed"),
])
def test_bad_arguments_are_refused_by_name(arguments, match):
    with pytest.raises(ValueError, match=match):
        mimetic.mimetic_initialization(_tiny(), **arguments)
