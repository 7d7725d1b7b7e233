import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _restore_dtype_policy():
    """Tests that switch the global mixed-precision policy must not leak it into others."""
    policy = keras.config.dtype_policy()
    yield
    keras.config.set_dtype_policy(policy)
    keras.utils.clear_session()
