"""keras_vit.inspect: rollout / distance / similarity arithmetic on hand-made tensors, and the model probes."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import inspect as vit_inspect
from keras_vit.layers import PatchEncoder, TransformerBlock, sincos2d_embedding

from helpers import ALL_BACKENDS  # noqa: E402

pytestmark = ALL_BACKENDS


def _softmax(logits):
    logits = logits - logits.max(axis=-1, keepdims=True)
    weights = np.exp(logits)
    return weights / weights.sum(axis=-1, keepdims=True)


def _random_attention(layers=3, batch=2, heads=4, tokens=5, seed=0):
    return _softmax(np.random.default_rng(seed).normal(size=(layers, batch, heads, tokens, tokens)) * 3)


# --- attention rollout -------------------------------------------------------------------------


@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
def test_rollout_rows_sum_to_one(fusion):
    rollout = vit_inspect.attention_rollout(_random_attention(), head_fusion=fusion)
    assert rollout.shape == (2, 5, 5)
    np.testing.assert_allclose(rollout.sum(axis=-1), 1.0, atol=1e-6)
    assert (rollout >= 0).all()


def test_rollout_of_identity_attention_is_identity():
    eye = np.broadcast_to(np.eye(6), (4, 3, 2, 6, 6))
    np.testing.assert_allclose(vit_inspect.attention_rollout(eye), np.broadcast_to(np.eye(6), (3, 6, 6)), atol=1e-7)


def test_rollout_of_uniform_attention_tends_to_uniform():
    # One layer: (I + J/T) / 2. The identity part halves with every layer, so many layers mix fully.
    tokens = 4
    uniform = np.full((1, 1, 3, tokens, tokens), 1 / tokens)
    one = vit_inspect.attention_rollout(uniform)[0]
    np.testing.assert_allclose(one, 0.5 * np.eye(tokens) + 0.5 / tokens, atol=1e-7)
    deep = vit_inspect.attention_rollout(np.repeat(uniform, 30, axis=0))[0]
    np.testing.assert_allclose(deep, 1 / tokens, atol=1e-6)


def test_rollout_matches_the_paper_formula_layer_by_layer():
    attentions = _random_attention(layers=2, batch=1, heads=3)
    fused = attentions.mean(axis=2)[:, 0]
    # With rows already summing to 1, adding I and renormalising is 0.5 A + 0.5 I.
    first, second = (0.5 * a + 0.5 * np.eye(5) for a in fused)
    np.testing.assert_allclose(vit_inspect.attention_rollout(attentions)[0], second @ first, atol=1e-6)
    # max fusion keeps the largest head weight, then renormalises.
    fused_max = attentions.max(axis=2)[0, 0] + np.eye(5)
    np.testing.assert_allclose(
        vit_inspect.attention_rollout(attentions[:1], "max")[0],
        fused_max / fused_max.sum(-1, keepdims=True),
        atol=1e-6,
    )


def test_rollout_rejects_bad_input():
    with pytest.raises(ValueError, match="head_fusion"):
        vit_inspect.attention_rollout(_random_attention(), head_fusion="median")
    with pytest.raises(ValueError, match=r"\(layers, batch, heads, T, T\)"):
        vit_inspect.attention_rollout(np.ones((2, 3, 4)))


def test_rollout_to_grid_reads_the_class_token_or_every_token():
    rollout = np.zeros((1, 5, 5))
    rollout[0, 0] = [0.2, 0.1, 0.0, 0.0, 0.4]  # class token row: patch 3 matters most
    rollout[0, 1:, 1] = 0.5
    with_class = vit_inspect.rollout_to_grid(rollout, (2, 2), num_prefix_tokens=1)
    np.testing.assert_allclose(with_class[0], [[0.25, 0.0], [0.0, 1.0]])
    no_class = np.zeros((1, 4, 4))
    no_class[0, :, 2] = 1.0
    no_class[0, 0, 2], no_class[0, 0, 0] = 0.0, 1.0
    np.testing.assert_allclose(
        vit_inspect.rollout_to_grid(no_class, (2, 2), num_prefix_tokens=0)[0], [[1 / 3, 0.0], [1.0, 0.0]]
    )
    with pytest.raises(ValueError, match="T = 3\\*3 patches"):
        vit_inspect.rollout_to_grid(rollout, (3, 3))


# --- mean attention distance -------------------------------------------------------------------


def test_one_hot_attention_gives_the_known_distance():
    rows, cols, patch = 4, 4, 16
    tokens = rows * cols + 1
    attention = np.zeros((1, 2, tokens, tokens))
    attention[:, :, 0, 0] = 1.0  # the class-token query is left out
    for query in range(rows * cols):
        y, x = divmod(query, cols)
        # Head 0: half on the class token (dropped), half two columns away (with wrap-around:
        # always 2 columns); head 1: on itself.
        attention[0, 0, 1 + query, 0] = 0.5
        attention[0, 0, 1 + query, 1 + y * cols + (x + 2) % cols] = 0.5
        attention[0, 1, 1 + query, 1 + query] = 1.0
    distance = vit_inspect.mean_attention_distance(attention, (rows, cols), patch, num_prefix_tokens=1)
    np.testing.assert_allclose(distance, [2 * patch, 0.0], atol=1e-5)
    # Stacked as layers, and with rectangular pixels: a diagonal one-hot step.
    diagonal = np.zeros((1, 1, 1, 4, 4))
    diagonal[..., 0, 3] = diagonal[..., 3, 0] = diagonal[..., 1, 2] = diagonal[..., 2, 1] = 1.0
    # On a 2x2 grid these are all diagonal neighbours: hypot(3, 4) = 5 pixels.
    np.testing.assert_allclose(vit_inspect.mean_attention_distance(diagonal, (2, 2), (3, 4)), [[5.0]], atol=1e-6)


def test_attention_distance_rejects_a_grid_that_does_not_fit():
    with pytest.raises(ValueError, match="grid_size"):
        vit_inspect.mean_attention_distance(np.ones((1, 1, 10, 10)) / 10, (3, 3), num_prefix_tokens=0)


# --- position embeddings and patch filters -----------------------------------------------------


def test_similarity_is_symmetric_with_unit_diagonal():
    similarity = vit_inspect.position_embedding_similarity(np.random.default_rng(1).normal(size=(3, 4, 16)))
    flat = similarity.reshape(12, 12)
    np.testing.assert_allclose(flat, flat.T, atol=1e-6)
    np.testing.assert_allclose(np.diag(flat), 1.0, atol=1e-6)
    assert np.abs(flat).max() <= 1.0 + 1e-6


def test_sincos_embeddings_are_more_similar_to_neighbours():
    table = keras.ops.convert_to_numpy(sincos2d_embedding(8, 8, 64)).reshape(8, 8, 64)
    near, far = vit_inspect.neighbour_contrast(vit_inspect.position_embedding_similarity(table))
    assert near > far + 0.1  # 0.98 vs 0.81: low frequencies keep every pair similar


def test_position_embeddings_of_models():
    model = keras_vit.ViT(patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=16, input_shape=(16, 12, 1), num_classes=2)
    table = vit_inspect.position_embeddings(model)
    expected = keras.ops.convert_to_numpy(model.get_layer("embedding").pos_embedding)[0, 1:]
    np.testing.assert_array_equal(table, expected.reshape(4, 3, 16))
    assert vit_inspect.position_embedding_similarity(model).shape == (4, 3, 4, 3)
    none = keras_vit.ViT(patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=16, image_size=8, position_embedding="none", num_classes=2)
    with pytest.raises(ValueError, match="position_embedding='none'"):
        vit_inspect.position_embeddings(none)


def test_patch_filter_components_find_a_planted_pattern():
    model = keras_vit.ViT(patch_size=4, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=16, image_size=8, num_classes=2)
    rng = np.random.default_rng(2)
    pattern = rng.normal(size=(4 * 4 * 3,))
    pattern /= np.linalg.norm(pattern)
    kernel = np.outer(pattern, rng.normal(size=32) * 10) + rng.normal(size=(48, 32)) * 0.01
    model.get_layer("embedding").kernel.assign(kernel.reshape(4, 4, 3, 32))
    components = vit_inspect.patch_embedding_filters(model, num_components=5)
    assert components.shape == (5, 4, 4, 3)
    flat = components.reshape(5, -1)
    np.testing.assert_allclose(flat @ flat.T, np.eye(5), atol=1e-5)
    assert abs(flat[0] @ pattern) > 0.99
    with pytest.raises(ValueError, match="num_components"):
        vit_inspect.patch_embedding_filters(model, num_components=0)


# --- models: plain, hybrid, dynamic size, not a ViT --------------------------------------------


@pytest.fixture(scope="module")
def tiny_vit():
    return keras_vit.ViT(patch_size=4, hidden_size=16, num_layers=2, num_heads=2, mlp_dim=16, input_shape=(16, 16, 1), num_classes=3, preprocessing="unit")


def test_attention_model_shares_weights_and_matches_the_blocks(tiny_vit):
    probe = vit_inspect.attention_model(tiny_vit)
    model_weights = {id(v) for v in tiny_vit.weights}
    assert probe.weights and {id(v) for v in probe.weights} <= model_weights
    images = np.random.default_rng(3).uniform(0, 255, size=(2, 16, 16, 1)).astype("float32")
    maps = vit_inspect.attention_maps(probe, images)
    assert maps.shape == (2, 2, 2, 17, 17)
    np.testing.assert_allclose(maps.sum(-1), 1.0, atol=1e-5)
    tokens = tiny_vit.get_layer("embedding")(tiny_vit.get_layer("preprocessing")(images))
    tokens, first = tiny_vit.get_layer("encoderblock_0")(tokens, return_attention_scores=True)
    _, second = tiny_vit.get_layer("encoderblock_1")(tokens, return_attention_scores=True)
    np.testing.assert_allclose(maps[0], keras.ops.convert_to_numpy(first), atol=1e-5)
    np.testing.assert_allclose(maps[1], keras.ops.convert_to_numpy(second), atol=1e-5)
    # The weights are shared, not copied: changing the model changes what the probe sees.
    kernel = tiny_vit.get_layer("encoderblock_1").attention.query.kernel
    kernel.assign(kernel * 3.0)
    assert not np.allclose(vit_inspect.attention_maps(probe, images)[1], maps[1], atol=1e-4)
    assert vit_inspect.rollout_maps(tiny_vit, images).shape == (2, 16, 16)
    assert vit_inspect.attention_distances(tiny_vit, images).shape == (2, 2)


def _hybrid(nested):
    """A ResNet-style stem (output stride 4) before 1x1 patches, like R50+ViT; optionally nested."""
    images = keras.Input((32, 32, 3))
    stem = keras.layers.Conv2D(8, 3, strides=2, padding="same", name="stem_conv")(images)
    stem = keras.layers.MaxPooling2D(3, strides=2, padding="same", name="stem_pool")(stem)
    tokens = PatchEncoder(1, 16, name="embedding")(stem)
    if nested:
        inner = keras.Input((65, 16))
        x = inner
        for i in range(2):
            x = TransformerBlock(16, 2, 16, name=f"encoderblock_{i}")(x)
        tokens = keras.Model(inner, x, name="encoder")(tokens)
    else:
        for i in range(2):
            tokens = TransformerBlock(16, 2, 16, name=f"encoderblock_{i}")(tokens)
    outputs = keras.layers.Dense(3)(keras.layers.GlobalAveragePooling1D()(tokens))
    return keras.Model(images, outputs)


@pytest.mark.parametrize("nested", [False, True])
def test_hybrid_models_map_to_the_image_grid(nested):
    model = _hybrid(nested)
    assert len(vit_inspect.transformer_blocks(model)) == 2
    images = np.random.default_rng(4).normal(size=(2, 32, 32, 3)).astype("float32")
    maps = vit_inspect.attention_maps(model, images)
    assert maps.shape == (2, 2, 2, 65, 65)
    assert vit_inspect.token_layout(model, 65, (32, 32)) == (1, (8, 8), (4.0, 4.0))
    assert vit_inspect.rollout_maps(model, images).shape == (2, 32, 32)
    with pytest.raises(ValueError, match="1x1 patches"):
        vit_inspect.patch_embedding_filters(model)


def test_dynamic_image_size_infers_the_grid():
    model = keras_vit.ViT(
        patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=16, input_shape=(None, None, 3),
        position_embedding="sincos2d", class_token=False, pooling="gap", num_classes=2,
    )
    images = np.zeros((1, 16, 24, 3), "float32")
    maps = vit_inspect.attention_maps(model, images)
    assert maps.shape == (1, 1, 2, 24, 24)
    assert vit_inspect.token_layout(model, 24, (16, 24)) == (0, (4, 6), (4.0, 4.0))
    assert vit_inspect.rollout_maps(model, images, upsample=False).shape == (1, 4, 6)


def test_models_without_transformer_blocks_are_rejected():
    cnn = keras.Sequential([keras.Input((16, 16, 1)), keras.layers.Conv2D(4, 3), keras.layers.Flatten(), keras.layers.Dense(2)])
    with pytest.raises(ValueError, match="no TransformerBlock layers"):
        vit_inspect.attention_model(cnn)
    with pytest.raises(ValueError, match="PatchEncoder"):
        vit_inspect.patch_encoder(cnn)

    class Subclassed(keras.Model):
        def call(self, x):
            return x

    with pytest.raises(ValueError, match="functional or Sequential"):
        vit_inspect.attention_model(Subclassed())
    with pytest.raises(ValueError, match="functional or Sequential"):
        vit_inspect.attention_model("vit.keras")
