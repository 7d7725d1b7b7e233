import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The suite runs once per Keras backend (`.ci/run`): `KERAS_BACKEND=jax pytest -q` runs the tests
# marked for JAX. Unmarked tests and doctests are TensorFlow's.
BACKEND = os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import pytest  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "backends(*names): the Keras backends a test runs on (tensorflow, jax, torch); "
        "a test without it runs on TensorFlow only",
    )


def pytest_collection_modifyitems(config, items):
    """Deselects the tests not meant for this run's backend, so each backend's run lists only its own."""
    kept, dropped = [], []
    for item in items:
        marker = item.get_closest_marker("backends")
        names = marker.args if marker else ("tensorflow",)
        (kept if BACKEND in names else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(autouse=True)
def _restore_dtype_policy():
    """Tests that switch the global mixed-precision policy must not leak it into others."""
    policy = keras.config.dtype_policy()
    yield
    keras.config.set_dtype_policy(policy)
    # Off TensorFlow the tests build only small models, and the full garbage collection of
    # free_memory (about 1.7 s a test with TensorFlow and PyTorch both loaded) is most of their time.
    keras.utils.clear_session(free_memory=BACKEND == "tensorflow")
