"""Self-distillation (DINO, issue 53): its loss, the teacher's average, the views, saving, and one fit step per backend."""

import numpy as np
import pytest
import tensorflow as tf

import keras
import keras_vit

from keras_vit.data.augment import AugmentConfig, colour_augment
from keras_vit.data.pipeline import make_pipeline
from keras_vit.data.sources import from_arrays
from keras_vit.pretraining.dino import HEADS, SelfDistillation, dino_loss


def _numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def _backbone(**kwargs):
    args = dict(patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, image_size=8, include_top=False,
                preprocessing="unit")
    return keras_vit.ViT(**{**args, **kwargs})


def _views(batch=4, views=2, size=8, seed=0):
    return np.random.RandomState(seed).randint(0, 256, (batch, views, size, size, 3)).astype("float32")


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_the_loss_is_dinos_cross_entropy_over_pairs_of_other_views():
    rng = np.random.RandomState(0)
    batch, views, k = 3, 4, 5
    student, teacher = rng.randn(views * batch, k).astype("float32"), rng.randn(2 * batch, k).astype("float32")
    center = rng.randn(1, k).astype("float32")
    targets = np.exp(_log_softmax((teacher - center) / 0.04))
    logs = _log_softmax(student / 0.1)
    expected = np.mean([np.mean(-(targets[t * batch:(t + 1) * batch] * logs[s * batch:(s + 1) * batch]).sum(-1))
                        for t in range(2) for s in range(views) if s != t])
    assert float(dino_loss(student, teacher, center, views)) == pytest.approx(expected, rel=1e-5)
    # Matching the teacher's own sharpened targets beats matching anything else.
    matched = np.log(np.maximum(np.concatenate([targets[batch:], targets[:batch]]), 1e-30)) * 0.1
    assert float(dino_loss(matched, teacher, center, 2)) < float(dino_loss(student[:2 * batch], teacher, center, 2))


@pytest.mark.backends("tensorflow", "jax", "torch")
def test_one_fit_step_trains_the_student_and_averages_it_into_the_teacher():
    keras.utils.set_random_seed(0)
    # With local views (DINO's multi-crop), which run through the student's own layers at their size.
    model = SelfDistillation(_backbone(), head="test", teacher_momentum=0.9, local_views=2, local_size=4)
    # The student moved away from its copy, so the average has something to show.
    for weight in model.student.trainable_weights:
        weight.assign(_numpy(weight) + np.random.RandomState(1).normal(0, 0.1, weight.shape).astype("float32"))
    pairs = model.teacher_pairs()
    teacher_before = [_numpy(t).copy() for t, _ in pairs]
    student_before = [_numpy(s).copy() for _, s in pairs]
    views = _views()
    flat = np.concatenate([views[:, 0], views[:, 1]])
    scores = _numpy(model.teacher_head(model.teacher(flat, training=False)))
    model.compile(optimizer=keras.optimizers.AdamW(1e-2), jit_compile="auto")
    history = model.fit({"global": views, "local": _views(views=2, size=4, seed=1)}, epochs=1, batch_size=4, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    # The local views share the student's weights: none of their own to train or average.
    assert len(model.trainable_weights) == len(model.student.trainable_weights + model.student_head.trainable_weights)
    for (teacher, student), t0, s0 in zip(pairs, teacher_before, student_before):
        np.testing.assert_allclose(_numpy(teacher), 0.9 * t0 + 0.1 * s0, atol=1e-5, err_msg=teacher.path)
    changed = [s.path for (_, s), s0 in zip(pairs, student_before) if not np.allclose(_numpy(s), s0)]
    assert any("encoderblock_0" in path for path in changed) and any("prototypes" in path for path in changed)
    assert not model.teacher.trainable_weights and not model.teacher_head.trainable_weights
    np.testing.assert_allclose(_numpy(model.center), 0.1 * scores.mean(0, keepdims=True), atol=1e-5)


def test_saved_model_reloads_with_the_same_outputs(tmp_path):
    keras.utils.set_random_seed(0)
    model = SelfDistillation(_backbone(pooling="gap"), head="test", num_views=3)
    path = str(tmp_path / "dino.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    views = _views(views=3)
    assert isinstance(restored, SelfDistillation) and restored.num_views == 3 and restored.head_size == HEADS["test"]
    for key in ("student", "teacher"):
        np.testing.assert_allclose(_numpy(restored(views)[key]), _numpy(model(views)[key]), atol=1e-6)
    assert tuple(model(views)["student"].shape) == (12, 16) and tuple(model(views)["teacher"].shape) == (8, 16)


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_views=1), "num_views=1"),
    (dict(head="huge"), "head='huge'"),
    (dict(teacher_momentum=1.0), "teacher_momentum=1.0"),
    (dict(teacher_temperature=0.0), "teacher_temperature=0.0"),
])
def test_bad_arguments_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SelfDistillation(_backbone(), **kwargs)


def test_a_classifier_or_a_model_of_every_token_is_refused():
    with pytest.raises(ValueError, match="class scores"):
        SelfDistillation(_backbone(include_top=True, num_classes=3))
    with pytest.raises(ValueError, match="every token"):
        SelfDistillation(_backbone(pooling=None))
    with pytest.raises(ValueError, match="keras_vit VisionTransformer"):
        SelfDistillation(keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten()]))


def test_views_are_augmented_each_on_its_own_and_for_training_only():
    images = np.random.RandomState(0).randint(0, 256, (8, 16, 16, 3)).astype("uint8")
    source = from_arrays(images, np.zeros(8, "int32"))
    batches = make_pipeline(source, image_size=16, scaling=None, batch_size=4, training=True, augment="views", views=3,
                            seed=0)
    views, _ = next(iter(batches))
    assert tuple(views.shape) == (4, 3, 16, 16, 3)
    views = views.numpy()
    # Each view its own crop and colours: none two alike, all within the pixel range.
    assert all(np.abs(views[:, a] - views[:, b]).mean() > 1 for a in range(3) for b in range(a + 1, 3))
    assert views.min() >= 0 and views.max() <= 255
    with pytest.raises(ValueError, match="views=2 with training=False"):
        make_pipeline(source, image_size=16, scaling=None, views=2)


def test_colour_changes_grey_and_solarize_as_asked():
    image = tf.constant(np.random.RandomState(0).randint(0, 256, (8, 8, 3)).astype("float32"))
    grey = colour_augment(image, AugmentConfig(grayscale=1.0)).numpy()
    np.testing.assert_allclose(grey[..., 0], grey[..., 1], atol=1e-4)
    solarized = colour_augment(image, AugmentConfig(solarize=1.0)).numpy()
    np.testing.assert_allclose(solarized, np.where(image.numpy() >= 128, 255 - image.numpy(), image.numpy()))
    np.testing.assert_array_equal(colour_augment(image, AugmentConfig()).numpy(), image.numpy())
    jittered = colour_augment(image, AugmentConfig(color_jitter=1.0), seed=3).numpy()
    assert jittered.shape == (8, 8, 3) and 0 <= jittered.min() and jittered.max() <= 255
    assert np.abs(jittered - image.numpy()).mean() > 0.5
    # A grey image is jittered in brightness and contrast only, and stays one channel.
    assert colour_augment(image[..., :1], AugmentConfig(color_jitter=1.0, grayscale=1.0), seed=3).shape == (8, 8, 1)


@pytest.mark.backends("tensorflow", "jax", "torch")
def test_the_teacher_normalises_with_the_batchs_statistics_in_training_as_dinos_does():
    from keras_vit.models import stems

    backbone = keras_vit.ViT(hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, patch_size=1, include_top=False,
                             input_shape=(16, 16, 3), preprocessing="unit",
                             backbone=stems.conv_stem(filters=(8, 8), strides=(2, 2), channels=3))
    model = SelfDistillation(backbone, head="test")
    images = np.random.RandomState(0).randint(0, 256, (6, 16, 16, 3)).astype("float32")
    before = model._teacher_features(images, training=True)
    averages = [t for t, _ in model.teacher_pairs() if "moving" in t.path]
    assert averages
    kept = [_numpy(t).copy() for t in averages]
    for t in averages:  # running averages far from the batch's: the training pass does not read them
        t.assign(_numpy(t) + 5.0)
    np.testing.assert_allclose(_numpy(model._teacher_features(images, training=True)), _numpy(before), atol=1e-5)
    assert not np.allclose(_numpy(model._teacher_features(images, training=False)), _numpy(before), atol=1e-3)
    # Nor does it update them: the teacher's averages move only as averages of the student's.
    np.testing.assert_allclose([_numpy(t) for t in averages], [k + 5.0 for k in kept], atol=1e-6)


@pytest.mark.backends("tensorflow", "jax", "torch")
def test_under_mixed_precision_the_teachers_average_stays_float32_exact():
    keras.config.set_dtype_policy("mixed_bfloat16")
    keras.utils.set_random_seed(0)
    model = SelfDistillation(_backbone(), head="test", teacher_momentum=0.9)
    for weight in model.student.trainable_weights:
        weight.assign(_numpy(weight) + np.random.RandomState(1).normal(0, 0.1, weight.shape).astype("float32"))
    pairs = model.teacher_pairs()
    before = [(_numpy(t).copy(), _numpy(s).copy()) for t, s in pairs]
    model.compile(optimizer=keras.optimizers.AdamW(1e-3), jit_compile="auto")
    model.fit(_views(), epochs=1, batch_size=4, verbose=0)
    assert model.student.compute_dtype == "bfloat16" and model.center.dtype == "float32"
    for (teacher, _), (t0, s0) in zip(pairs, before):  # not rounded to bfloat16's 3 digits
        np.testing.assert_allclose(_numpy(teacher), 0.9 * t0 + 0.1 * s0, atol=1e-6, err_msg=teacher.path)


@pytest.mark.parametrize("variant", ["tiny", "R_tiny"])
def test_a_resized_model_shares_the_weights_and_resamples_the_position_embedding(variant):
    model = keras_vit.ViT(variant, image_size=32, include_top=False)
    images = np.random.RandomState(0).rand(2, 32, 32, 3).astype("float32") * 255
    same = model.resized_model(32)
    np.testing.assert_allclose(_numpy(same(images)), _numpy(model(images)), atol=1e-6)
    small = model.resized_model(16)
    assert small.input_shape == (None, 16, 16, 3) and {id(w) for w in small.weights} <= {id(w) for w in model.weights}
    # Its tokens read the model's own position embedding, resampled to their 2x2 (R_tiny) or 4x4 grid.
    embedding = model.get_layer("embedding").pos_embedding
    before = _numpy(small(images[:, :16, :16]))
    embedding.assign(_numpy(embedding) + np.random.RandomState(1).normal(0, 0.5, embedding.shape).astype("float32"))
    assert not np.allclose(_numpy(small(images[:, :16, :16])), before, atol=1e-4)


@pytest.mark.parametrize("size, message", [(10, "multiples of 4"), (0, "image_size=0"), ("16", "image_size='16'")])
def test_a_resized_model_refuses_sizes_off_the_token_grid_by_name(size, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.ViT("tiny", image_size=32, include_top=False).resized_model(size)


def test_local_views_run_through_the_students_own_layers_after_the_global_ones():
    keras.utils.set_random_seed(0)
    model = SelfDistillation(_backbone(), head="test", local_views=3, local_size=4)
    views = {"global": _views(), "local": _views(views=3, size=4, seed=1)}
    out = model(views)
    assert tuple(out["student"].shape) == (5 * 4, 16) and tuple(out["teacher"].shape) == (2 * 4, 16)
    local_flat = np.concatenate([views["local"][:, v] for v in range(3)])
    expected = model.student_head(model.student.resized_model(4)(local_flat))
    np.testing.assert_allclose(_numpy(out["student"])[8:], _numpy(expected), atol=1e-5)


def test_a_model_with_local_views_reloads_and_refuses_views_without_them(tmp_path):
    keras.utils.set_random_seed(0)
    model = SelfDistillation(_backbone(), head="test", local_views=2, local_size=4)
    path = str(tmp_path / "dino.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    views = {"global": _views(), "local": _views(views=2, size=4, seed=1)}
    assert (restored.local_views, restored.local_size) == (2, 4)
    np.testing.assert_allclose(_numpy(restored(views)["student"]), _numpy(model(views)["student"]), atol=1e-6)
    with pytest.raises(ValueError, match="'global': ..., 'local': ..."):
        model(_views())
    with pytest.raises(ValueError, match="local_size=None with local_views=2"):
        SelfDistillation(_backbone(), local_views=2)
    with pytest.raises(ValueError, match="local_size=4 with local_views=0"):
        SelfDistillation(_backbone(), local_size=4)
    with pytest.raises(ValueError, match="local_views=-1"):
        SelfDistillation(_backbone(), local_views=-1, local_size=4)
    with pytest.raises(ValueError, match="local_size='4'"):
        SelfDistillation(_backbone(), local_views=2, local_size="4")


def test_local_views_come_at_their_own_size_and_crops_beside_the_global_ones():
    images = np.random.RandomState(0).randint(0, 256, (8, 16, 16, 3)).astype("uint8")
    source = from_arrays(images, np.zeros(8, "int32"))
    local = AugmentConfig(crop_scale=(0.05, 0.4), flip=True)
    batches = make_pipeline(source, image_size=16, scaling="unit", batch_size=4, training=True, augment="views",
                            views=2, local_views=3, local_size=8, local_augment=local, seed=0)
    views, _ = next(iter(batches))
    assert tuple(views["global"].shape) == (4, 2, 16, 16, 3) and tuple(views["local"].shape) == (4, 3, 8, 8, 3)
    # Scaled as the global views are.
    assert 0 <= float(tf.reduce_min(views["local"])) and float(tf.reduce_max(views["local"])) <= 1
    with pytest.raises(ValueError, match="local_views=3 without views=, local_size= and local_augment="):
        make_pipeline(source, image_size=16, training=True, augment="views", views=2, local_views=3, local_size=8)
    with pytest.raises(ValueError, match="local views are crops"):
        make_pipeline(source, image_size=16, training=True, augment="views", views=2, local_views=3, local_size=8,
                      local_augment="flip")
