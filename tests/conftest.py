import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The suite runs once per Keras backend (`.ci/run`): `KERAS_BACKEND=jax pytest -q` runs the tests
# marked for JAX. Unmarked tests and doctests are TensorFlow's.
BACKEND = os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# The tests check what XLA's compiled programs compute, not how fast they run: LLVM's optimisation
# of each program was most of the JAX pass, where every fit and predict compiles (a
# TransformerBlock's contract test, one fit step: 57 s with it, 7 s without; the pass 915 s against
# 648 s). TensorFlow's XLA tests (test_models' learning runs and test_layers) took 86 s with it and
# 78 s without. Child processes inherit the flag; benchmarks, which run outside pytest, never see it.
XLA_TEST_FLAG = "--xla_backend_optimization_level=0"
if XLA_TEST_FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {XLA_TEST_FLAG}".strip()
# `precision="auto"` takes the table's answer: on a CPU with native bfloat16 it would otherwise time
# a trial (and cache it in the user's cache folder). tests/test_machine.py forces the trial itself.
os.environ.setdefault("KERAS_VIT_PRECISION_TRIAL", "0")

# As a user's script or the CLI starts: keras_vit before Keras, so that its import sets TensorFlow's
# oneDNN as it does for them (keras_vit.machine.onednn_choice), and the suite's in-process models
# run the kernels its `keras-vit` child processes run.
import keras_vit  # noqa: E402,F401
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


# A full garbage collection after every test cost 0.44 s a test once PyTorch is loaded beside
# TensorFlow (103 layer and family tests: 119 s against 74 s); one when the process has grown by
# this much since the last keeps memory bounded at a fraction of the cost.
COLLECT_AFTER_GROWTH = 1 << 30
_last_collected_rss = [0]


def _resident_bytes():
    """This process's resident memory (Linux); None elsewhere."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


@pytest.fixture(autouse=True)
def _restore_dtype_policy():
    """Tests that switch the global mixed-precision policy must not leak it into others; Keras' state is
    cleared after each, and garbage collected once the process has grown by COLLECT_AFTER_GROWTH."""
    policy = keras.config.dtype_policy()
    yield
    keras.config.set_dtype_policy(policy)
    rss = _resident_bytes()
    collect = rss is None or rss - _last_collected_rss[0] > COLLECT_AFTER_GROWTH
    keras.utils.clear_session(free_memory=collect)
    if collect and rss is not None:
        _last_collected_rss[0] = _resident_bytes()
