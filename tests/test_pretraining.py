"""The masked autoencoder (issue 53): masking, decoder input, loss, saving and one fit step per backend."""

import numpy as np
import pytest

import keras

from keras_vit.layers import MaskTokens, RandomPatchMasking
from keras_vit.pretraining.mae import MaskedAutoencoder, build_mae, mae_loss

TINY = dict(image_size=16, channels=3, patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
            decoder="test")


def _numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def _images(count=4, size=16, channels=3, seed=0):
    return np.random.RandomState(seed).randint(0, 256, (count, size, size, channels)).astype("float32")


def test_masking_keeps_the_lowest_noise_and_restores_the_order():
    tokens = np.arange(2 * 6 * 4, dtype="float32").reshape(2, 6, 4) / 4
    noise = np.array([[0.9, 0.1, 0.5, 0.3, 0.8, 0.2], [0.0, 0.5, 0.4, 0.3, 0.2, 0.1]], "float32")
    visible, mask, ids_restore = RandomPatchMasking(0.5)(tokens, noise=noise)
    # The three patches of lowest noise, in the order of their noise.
    np.testing.assert_array_equal(_numpy(visible)[:, :, 0], [[1, 5, 3], [6, 11, 10]])
    np.testing.assert_array_equal(_numpy(mask), [[1, 0, 1, 0, 1, 0], [0, 1, 1, 1, 0, 0]])
    # MaskTokens puts each visible token back at its patch and a mask token elsewhere.
    layer = MaskTokens((2, 3), num_prefix_tokens=0)
    restored = _numpy(layer(visible, ids_restore)) - _numpy(layer.position_embedding)
    kept = _numpy(mask) == 0
    np.testing.assert_allclose(restored[kept], tokens[kept], atol=1e-6)
    np.testing.assert_allclose(restored[~kept], np.broadcast_to(_numpy(layer.mask_token)[0], (6, 4)), atol=1e-6)


def test_masking_draws_a_new_mask_per_image_and_call():
    masking = RandomPatchMasking(0.75, seed=1)
    first = _numpy(masking(np.zeros((8, 16, 4), "float32"))[1])
    second = _numpy(masking(np.zeros((8, 16, 4), "float32"))[1])
    assert (first.sum(1) == 12).all() and len({row.tobytes() for row in first}) > 1
    assert not np.array_equal(first, second)


def test_loss_counts_the_hidden_patches_only():
    model = build_mae(**TINY, seed=0)
    images = _images()
    out = model(images, noise=np.random.RandomState(0).rand(4, 16).astype("float32"))
    logits, mask = _numpy(out["logits"]), _numpy(out["mask"])
    target = _numpy(model.target(images))
    loss = float(mae_loss(target, logits, mask))
    # A perfect prediction of the visible patches changes nothing; of the hidden ones, everything.
    visible_perfect = np.where(mask[..., None] == 0, target, logits)
    assert float(mae_loss(target, visible_perfect, mask)) == pytest.approx(loss, rel=1e-6)
    assert float(mae_loss(target, np.where(mask[..., None] == 1, target, logits), mask)) == 0.0
    # The target is each patch normalised (norm_pix_loss): zero mean, unit (unbiased) variance.
    np.testing.assert_allclose(target.mean(-1), 0, atol=1e-4)
    np.testing.assert_allclose(target.var(-1, ddof=1), 1, atol=1e-3)


def test_saved_model_reloads_with_the_same_outputs(tmp_path):
    model = build_mae(**TINY, seed=0)
    path = str(tmp_path / "mae.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    noise = np.random.RandomState(2).rand(2, 16).astype("float32")
    images = _images(2)
    assert isinstance(restored, MaskedAutoencoder) and restored.mask_ratio == 0.75
    np.testing.assert_allclose(_numpy(restored(images, noise=noise)["logits"]),
                               _numpy(model(images, noise=noise)["logits"]), atol=1e-6)
    # The encoder is a keras_vit backbone of mean-pooled features.
    assert restored.encoder.vit_config["pooling"] == "gap" and restored.encoder.output_shape == (None, 16)


@pytest.mark.backends("tensorflow", "jax", "torch")
def test_one_fit_step_trains_encoder_and_decoder():
    model = build_mae(**TINY, seed=0)
    before = {w.path: _numpy(w).copy() for w in model.trainable_weights}
    model.compile(optimizer=keras.optimizers.AdamW(1e-3), jit_compile="auto")
    history = model.fit(_images(4), epochs=1, batch_size=4, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    changed = {w.path for w in model.trainable_weights if not np.allclose(before[w.path], _numpy(w))}
    assert {"embedding/kernel", "encoderblock_0/norm1/gamma", "decoder_pred/kernel"} <= changed | {
        p.split("/", 1)[-1] for p in changed}
    # MAE's fixed sine-cosine tables stay as they are.
    assert "embedding/position_embedding" not in {w.path for w in model.trainable_weights}


@pytest.mark.parametrize("kwargs, message", [
    (dict(mask_ratio=1.0), "mask_ratio=1.0"),
    (dict(mask_ratio=0.99), "leaves no patch"),
    (dict(mask_ratio=1e-17), "hides none"),
    (dict(image_size=18), "not a multiple of patch_size=4"),
])
def test_bad_arguments_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        build_mae(**{**TINY, **kwargs})
