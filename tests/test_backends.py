"""`keras_vit.training.train` on every Keras backend: a tiny run on the shipped sample (a tf.data
pipeline from keras_vit.data) writes its `.keras` model and summary and says how it ran."""

import json

import keras
import numpy as np

from helpers import ALL_BACKENDS
from keras_vit import backends
from keras_vit.training import trainer

pytestmark = ALL_BACKENDS

# What a float32 run on CPU compiles its train step with when jit_compile is not given.
DEFAULT_COMPILATION = {"tensorflow": "XLA on", "jax": "XLA on", "torch": "torch.compile off"}


def test_current_backend_module():
    assert backends.current().NAME == keras.backend.backend()


def test_train_writes_the_model_and_names_the_backend(tmp_path, capsys):
    backend = keras.backend.backend()
    config = trainer.TrainConfig(
        variant="tiny", image_size=28, epochs=1, batch_size=16, max_train_examples=32, max_test_examples=16,
        precision="float32", verbose=2, run_dir=str(tmp_path / "run"), output_dir=str(tmp_path / "out"),
        model_overrides={"num_layers": 1},
    )
    result = trainer.train(config)
    header = capsys.readouterr().out
    compilation = f"{DEFAULT_COMPILATION[backend]}, Keras backend {backend}"
    kernels = backends.current().kernels()  # TensorFlow's oneDNN setting, on a CPU
    assert f"precision float32 (given), {compilation}{'; ' + kernels if kernels else ''}, strategy default (1 replica)" in header
    assert compilation in trainer.format_summary(result)
    assert (result["steps_done"], result["num_test_examples"], result["settings"]["backend"]) == (2, 16, backend)

    loaded = keras.saving.load_model(str(tmp_path / "out" / "vit.keras"))
    images = np.random.default_rng(0).uniform(0, 255, (2, 28, 28, 1)).astype("float32")  # the sample is grey
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded(images)), keras.ops.convert_to_numpy(result["model"](images)), atol=1e-5
    )
    summary = json.loads((tmp_path / "out" / "vit.json").read_text())
    assert summary["settings"]["backend"] == backend and summary["test_accuracy"] == result["test_accuracy"]
