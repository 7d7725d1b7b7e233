"""Contrastive learning (SimCLR, issue 53): its loss, smaller views through the backbone's weights, saving, one fit step."""

import numpy as np
import pytest

import keras
import keras_vit

from keras_vit.pretraining.simclr import HEADS, ContrastiveLearning, nt_xent


def _numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def _backbone(**kwargs):
    args = dict(patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, image_size=8, include_top=False,
                preprocessing="unit")
    return keras_vit.ViT(**{**args, **kwargs})


def _views(batch=4, size=8, seed=0):
    return np.random.RandomState(seed).randint(0, 256, (batch, 2, size, size, 3)).astype("float32")


def _reference_nt_xent(z, temperature):
    """SimCLR's NT-Xent written out row by row: -log(exp(s_ip / t) / sum over k != i of exp(s_ik / t))."""
    z = z / np.linalg.norm(z, axis=1, keepdims=True)
    count, half = len(z), len(z) // 2
    losses = []
    for i in range(count):
        pair = (i + half) % count
        others = [k for k in range(count) if k != i]
        denominator = np.sum([np.exp(z[i] @ z[k] / temperature) for k in others])
        losses.append(-np.log(np.exp(z[i] @ z[pair] / temperature) / denominator))
    return np.mean(losses)


@pytest.mark.parametrize("temperature", [0.2, 0.5])
def test_the_loss_is_simclrs_nt_xent_over_the_batchs_other_views(temperature):
    z = np.random.RandomState(0).randn(6, 5).astype("float32")
    assert float(nt_xent(z, temperature)) == pytest.approx(_reference_nt_xent(z.astype("float64"), temperature), rel=1e-5)
    # Views closer to their pairs than to the other images' score a lower loss.
    close = np.concatenate([z[:3], z[:3] + 0.01])
    assert float(nt_xent(close, temperature)) < float(nt_xent(z, temperature))


@pytest.mark.backends("tensorflow", "jax", "torch")
def test_one_fit_step_trains_the_backbone_and_the_head_on_smaller_views():
    keras.utils.set_random_seed(0)
    backbone = _backbone(image_size=16)
    model = ContrastiveLearning(backbone, head="test", view_size=8)
    # The views run through the backbone's own weights: nothing of their own to train.
    assert len(model.trainable_weights) == len(backbone.trainable_weights + model.head.trainable_weights)
    before = {w.path: _numpy(w).copy() for w in model.trainable_weights}
    model.compile(optimizer=keras.optimizers.AdamW(1e-2), jit_compile="auto")
    history = model.fit(_views(batch=8, size=8), epochs=1, batch_size=4, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    changed = [w.path for w in model.trainable_weights if not np.allclose(_numpy(w), before[w.path])]
    assert any("encoderblock_0" in path for path in changed) and any("projection_head" in path for path in changed)
    # The backbone keeps its own size for what adapts it: its 16 px model computes with the trained weights.
    assert backbone.input_shape == (None, 16, 16, 3) and model.image_shape == (8, 8, 3)


def test_saved_model_reloads_with_the_same_outputs(tmp_path):
    keras.utils.set_random_seed(0)
    model = ContrastiveLearning(_backbone(pooling="gap", image_size=16), head="test", temperature=0.3, view_size=8)
    path = str(tmp_path / "simclr.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    views = _views(size=8)
    assert isinstance(restored, ContrastiveLearning) and restored.head_size == HEADS["test"]
    assert (restored.temperature, restored.view_size) == (0.3, 8)
    np.testing.assert_allclose(_numpy(restored(views)["projections"]), _numpy(model(views)["projections"]), atol=1e-5)
    assert tuple(model(views)["projections"].shape) == (8, 8)


@pytest.mark.parametrize("kwargs, message", [
    (dict(head="huge"), "head='huge'"),
    (dict(temperature=0.0), "temperature=0.0"),
    (dict(view_size=12), "view_size=12"),     # larger than the backbone's 8 px
    (dict(view_size=0), "view_size=0"),
])
def test_bad_arguments_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ContrastiveLearning(_backbone(), **kwargs)


def test_a_classifier_a_model_of_every_token_or_other_views_are_refused():
    with pytest.raises(ValueError, match="for contrastive learning: it returns class scores"):
        ContrastiveLearning(_backbone(include_top=True, num_classes=3))
    with pytest.raises(ValueError, match="every token"):
        ContrastiveLearning(_backbone(pooling=None))
    with pytest.raises(ValueError, match=r"Expected views of shape \(batch, 2,"):
        ContrastiveLearning(_backbone(), head="test")(np.zeros((2, 3, 8, 8, 3), "float32"))
