"""keras.applications habits: softmax head by default, losses that read the head, subpackages
registered on `import keras_vit`, preprocess_input and decode_predictions."""

import math
import os
import subprocess
import sys
import warnings

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.training import recipes

from helpers import ALL_BACKENDS, to_numpy  # noqa: E402

pytestmark = ALL_BACKENDS

# For a few steps, eager beats tracing on TensorFlow; JAX's op-by-op eager mode is slower than its compile.
EAGER_IS_CHEAP = keras.backend.backend() != "jax"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _learnable_batch(n=64, size=32, classes=10, seed=0):
    """Images whose class is written in their brightness, so a few steps can learn something."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    x = rng.normal(0.0, 0.1, (n, size, size, 3)) + (y / classes)[:, None, None, None]
    return x.astype("float32"), y


def test_the_package_names_every_layer_class_and_named_builder():
    import keras_vit.layers
    import keras_vit.models

    classes = {name for name in keras_vit.layers.__all__ if isinstance(getattr(keras_vit.layers, name), type)}
    assert set(keras_vit._NAMES["layers"]) == classes
    assert set(keras_vit._NAMES["models"]) == set(keras_vit.models.__all__) - {
        "head_activation", "mimetic_initialization", "outputs_probabilities"}
    assert all(getattr(keras_vit, name) is getattr(keras_vit.models, name) for name in keras_vit._NAMES["models"])


def test_plain_keras_loss_trains_the_default_head():
    # The keras.io habit: a builder with no activation argument, compiled with the plain loss.
    # With a logits head this loss stays at ln(10) = 2.3026 forever (the head starts at zero).
    keras.utils.set_random_seed(0)
    x, y = _learnable_batch()
    model = keras_vit.ViT_Ti16(num_classes=10, image_size=32, num_layers=1)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy", metrics=["accuracy"],
        run_eagerly=EAGER_IS_CHEAP,
    )
    history = model.fit(x, y, batch_size=16, epochs=3, verbose=0)
    assert history.history["loss"][-1] < math.log(10) - 0.05, history.history["loss"]
    assert model.get_layer("head").activation.__name__ == "softmax"
    np.testing.assert_allclose(to_numpy(model(x[:4])).sum(-1), 1.0, atol=1e-5)


def test_logits_with_classifier_activation_none():
    model = keras_vit.ViT("tiny", num_classes=3, classifier_activation=None)
    assert model.get_layer("head").activation.__name__ == "linear"
    assert not keras_vit.models.outputs_probabilities(model)
    assert keras_vit.models.outputs_probabilities(keras_vit.ViT("tiny", num_classes=3))


def test_softmax_head_stays_float32_under_mixed_precision():
    keras.config.set_dtype_policy("mixed_bfloat16")
    model = keras_vit.ViT("tiny", num_classes=5)
    head = model.get_layer("head")
    assert head.compute_dtype == "float32" and head.activation.__name__ == "softmax"
    probabilities = model(np.zeros((2, 32, 32, 3), "float32"))
    assert keras.backend.standardize_dtype(probabilities.dtype) == "float32"
    np.testing.assert_allclose(to_numpy(probabilities).sum(-1), 1.0, atol=1e-6)


def _smoothed_cross_entropy(labels, probabilities, smoothing):
    targets = labels * (1 - smoothing) + smoothing / labels.shape[-1]
    return float(np.mean(-(targets * np.log(probabilities)).sum(-1)))


@pytest.mark.parametrize("activation", ["softmax", None])
def test_recipe_loss_reads_the_head(activation):
    keras.utils.set_random_seed(0)
    recipe = recipes.get_recipe("compact")  # label smoothing 0.1
    x, y = _learnable_batch(n=32)
    labels = np.eye(10, dtype="float32")[y]
    model = keras_vit.ViT("tiny", num_classes=10, num_layers=1, classifier_activation=activation)
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(1).normal(0, 0.5, head.kernel.shape))  # not uniform
    loss = recipes.make_loss(recipe, model)
    assert loss.label_smoothing == recipe.label_smoothing

    outputs = to_numpy(model(x)).astype("float64")
    probabilities = outputs if activation else np.exp(outputs) / np.exp(outputs).sum(-1, keepdims=True)
    expected = _smoothed_cross_entropy(labels, probabilities, recipe.label_smoothing)
    assert float(loss(labels, outputs)) == pytest.approx(expected, rel=1e-4)

    optimizer = recipes.make_optimizer(recipe, model, 2e-3)
    model.compile(optimizer=optimizer, loss=loss, run_eagerly=EAGER_IS_CHEAP)
    history = model.fit(x, labels, batch_size=16, epochs=3, verbose=0).history["loss"]
    assert all(np.isfinite(history)) and history[-1] < history[0] - 0.05, history


def test_evaluate_reads_the_head(tmp_path):
    """`keras-vit evaluate` (trainer.evaluate) scores a softmax and a logits model of equal weights
    alike, with a loss told which it gets."""
    from keras_vit.training import evaluate

    scores = {}
    for activation in ("softmax", None):
        model = keras_vit.ViT("tiny", num_classes=10, num_layers=1, input_shape=(28, 28, 1), preprocessing="unit",
                              classifier_activation=activation)
        keras.utils.set_random_seed(0)
        model.set_weights([np.random.default_rng(i).normal(0, 0.3, w.shape) for i, w in enumerate(model.get_weights())])
        path = str(tmp_path / f"{activation}.keras")
        model.save(path)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            scores[activation] = evaluate(path, max_examples=32, batch_size=32)
        # Keras warns when a loss told from_logits=True is given a softmax output.
        assert not [w for w in caught if "from_logits" in str(w.message)], activation
    assert scores["softmax"]["loss"] == pytest.approx(scores[None]["loss"], rel=1e-4)
    assert scores["softmax"]["accuracy"] == scores[None]["accuracy"]


def test_recipe_loss_refuses_other_activations():
    model = keras_vit.ViT("tiny", num_classes=3, classifier_activation="sigmoid")
    with pytest.raises(ValueError, match="classifier_activation='sigmoid'"):
        recipes.make_loss(recipes.get_recipe("deit"), model)


@pytest.mark.backends("tensorflow")  # a fresh process importing everything: registration is the same on every backend
@pytest.mark.parametrize("imports", ["import keras, keras_vit", "import keras_vit, keras", "import keras_vit.layers, keras"])
def test_import_exposes_subpackages_and_registers_the_schedule(tmp_path, imports):
    """A model compiled with the recipes' WarmupCosine loads after a bare `import keras_vit`, in a fresh process.

    `import keras_vit` loads no Keras; whichever comes first, keras_vit registers everything
    once Keras is loaded, before load_model needs it (keras_vit._registration).
    """
    model = keras_vit.ViT("tiny", num_classes=3)
    schedule = recipes.WarmupCosine(1e-3, total_steps=100, warmup_steps=10)
    model.compile(optimizer=keras.optimizers.AdamW(schedule), loss="sparse_categorical_crossentropy", run_eagerly=True)
    model.fit(np.zeros((2, 32, 32, 3), "float32"), np.zeros(2), verbose=0)  # a trained optimizer, as `train` saves
    path = str(tmp_path / "vit.keras")
    model.save(path)
    script = (
        f"{imports}\n"
        f"model = keras.saving.load_model({path!r})\n"
        "for name in ('training', 'export', 'data', 'inspect', 'weights', 'layers', 'models', 'configs'):\n"
        "    assert hasattr(getattr(keras_vit, name), '__name__'), name\n"
        "print(model.optimizer.get_config()['learning_rate']['class_name'])\n"
    )
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "WarmupCosine"


# Keras on JAX needs no TensorFlow: a GPU machine with JAX alone builds and runs keras_vit's models.
_WITHOUT_TENSORFLOW = """
import importlib.abc, sys
class NoTensorFlow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "tensorflow":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoTensorFlow())
import keras, keras_vit
model = keras_vit.ViT("tiny", num_classes=3)
print(tuple(model(keras.ops.zeros((1, 32, 32, 3))).shape), "tensorflow" in sys.modules)
"""


@pytest.mark.backends("jax")
def test_keras_vit_builds_and_runs_models_on_jax_where_tensorflow_is_not_installed():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), KERAS_BACKEND="jax")
    result = subprocess.run([sys.executable, "-c", _WITHOUT_TENSORFLOW], capture_output=True, text=True, env=env,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "(1, 3) False"


@pytest.mark.parametrize(
    "mode, expected",
    [("unit", [0.0, 0.5, 1.0]), ("symmetric", [-1.0, 0.0, 1.0])],
)
def test_preprocess_input_matches_the_model_layer(mode, expected):
    pixels = np.array([[[[0, 127.5, 255]]]], "float32")
    np.testing.assert_allclose(keras_vit.preprocess_input(pixels, mode=mode)[0, 0, 0], expected, atol=1e-6)
    # The same numbers as the scaling a model applies with preprocessing=mode.
    images = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    inside = keras_vit.ViT("tiny", include_top=False, pooling=None, preprocessing=mode)
    outside = keras_vit.ViT("tiny", include_top=False, pooling=None)
    outside.set_weights(inside.get_weights())
    np.testing.assert_allclose(to_numpy(outside(keras_vit.preprocess_input(images, mode=mode))), to_numpy(inside(images)), atol=1e-4)


def test_preprocess_input_imagenet_tensors_and_no_mutation():
    images = np.random.default_rng(0).integers(0, 256, (2, 4, 4, 3)).astype("uint8")
    copy = images.copy()
    out = keras_vit.preprocess_input(images, mode="imagenet")
    np.testing.assert_array_equal(images, copy)
    mean = np.array([0.485, 0.456, 0.406]) * 255
    std = np.array([0.229, 0.224, 0.225]) * 255
    np.testing.assert_allclose(out, (images - mean) / std, rtol=1e-5)
    assert out.dtype == np.float32
    tensor = keras_vit.preprocess_input(keras.ops.convert_to_tensor(images), mode="imagenet")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(tensor), out, rtol=1e-5)


@pytest.mark.parametrize(
    "x, mode, message",
    [
        (np.zeros((2, 2, 3)), None, "mode=None"),
        (np.zeros((2, 2, 3)), "caffe", "mode='caffe'.*'imagenet'"),
        (np.zeros((4, 3)), "unit", r"shape \(4, 3\).*channels-last"),
        (np.zeros((2, 2, 1)), "imagenet", r"shape \(2, 2, 1\) for mode='imagenet'.*3 channels"),
        (np.full((2, 2, 3), 300.0), "unit", r"range from 300.0 to 300.0.*\[0, 255\]"),
        (np.array([[["a"]]]), "unit", "dtype <U1"),
    ],
)
def test_preprocess_input_bad_input(x, mode, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.preprocess_input(x, mode=mode)


def test_decode_predictions():
    scores = np.full((2, 1000), 1e-4, "float32")
    scores[0, [281, 282, 285]] = [0.5, 0.3, 0.1]
    scores[1, 1] = 0.9
    decoded = keras_vit.decode_predictions(keras.ops.convert_to_tensor(scores), top=3)
    assert [[(wnid, name) for wnid, name, _ in row] for row in decoded] == [
        [("n02123045", "tabby"), ("n02123159", "tiger_cat"), ("n02124075", "Egyptian_cat")],
        [("n01443537", "goldfish"), ("n01440764", "tench"), ("n01484850", "great_white_shark")],
    ]
    assert decoded[0][0][2] == pytest.approx(0.5)
    classes = keras_vit.applications.imagenet_classes()
    assert len({wnid for wnid, _ in classes}) == 1000 and [wnid for wnid, _ in classes] == sorted(w for w, _ in classes)


@pytest.mark.parametrize(
    "preds, top, message",
    [
        (np.zeros((2, 10)), 5, r"shape \(batch, 1000\), got shape \(2, 10\)"),
        (np.zeros(1000), 5, r"got shape \(1000,\)"),
        (np.zeros((1, 1000)), 0, "top=0"),
        (np.zeros((1, 1000)), 1001, "top=1001"),
    ],
)
def test_decode_predictions_bad_input(preds, top, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.decode_predictions(preds, top=top)
