"""Exports from a JAX- or PyTorch-backend model: the TensorFlow export, run in a child process.

A `.keras` file holds the same architecture and weights whatever backend wrote it, so a model
trained on JAX or PyTorch is saved to a temporary `.keras` file and a child Python process with
`KERAS_BACKEND=tensorflow` loads it and runs the very export the TensorFlow backend runs. Every
format, signature, check and error message is then the TensorFlow one, to the bit.

The in-process alternative, Keras' `ExportArchive` on JAX (`jax2tf` with native
serialization), writes a SavedModel whose model part is one `XlaCallModule` op, which tf2onnx
cannot convert, with JAX's seed state as uint32 variables, on which the TFLite converter fails
(jax 0.10.2, TF 2.21). On PyTorch, `ExportArchive` cannot write a SavedModel at all.
The child costs one TensorFlow start-up (seconds); within `shared_process()` several exports share it.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import subprocess
import sys
import tempfile

import keras

import keras_vit

# The exports a child may run: keras_vit.export.<module>.<function>, and the format's name.
_FUNCTIONS = {
    "saved_model": "keras_vit.export.saved_model",
    "naflex_saved_model": "keras_vit.export.saved_model",
    "tflite": "keras_vit.export.tflite",
    "onnx": "keras_vit.export.onnx",
    "naflex_tflite": "keras_vit.export.tflite",
    "naflex_onnx": "keras_vit.export.onnx",
}
_FORMATS = {"saved_model": "SavedModel", "naflex_saved_model": "SavedModel", "tflite": "TFLite", "onnx": "ONNX",
            "naflex_tflite": "TFLite", "naflex_onnx": "ONNX"}
_STDERR_LINES = 20
_open_child = None  # the child of the innermost `shared_process()`, if any


def needed() -> bool:
    """True when Keras runs on a backend other than TensorFlow, so exports go through a child process."""
    return keras.backend.backend() != "tensorflow"


@contextlib.contextmanager
def shared_process():
    """Within this block, exports from a JAX or PyTorch model share one TensorFlow child process.

    Each model is saved to `.keras` once per block, so it must not change (no training) until
    the block ends. On the TensorFlow backend, and nested, this does nothing.

    Example (`keras_vit.training.save_final_artifacts` writes its two exports this way; doctests
    run on TensorFlow, where the exports run in this process):

    >>> from keras_vit import export
    >>> with export.shared_process():
    ...     needed()
    False
    """
    global _open_child
    if not needed() or _open_child is not None:
        yield
        return
    _open_child = _Child()
    try:
        yield
    finally:
        child, _open_child = _open_child, None
        child.close()


def call(function, model, *args, **kwargs):
    """Runs `keras_vit.export.<function>(model, *args, **kwargs)` in a TensorFlow child process.

    The model goes to the child as a temporary `.keras` file (removed afterwards); the other
    arguments and the result are pickled. An exception raised in the child is raised here again
    (same type and message when it can be pickled, else RuntimeError with its text); a child
    that dies without answering raises RuntimeError with the end of its stderr.

    Args:
        function: str. A key of `_FUNCTIONS` ("saved_model", "naflex_saved_model", "tflite", "onnx").
        model: keras.Model. A model on the current backend, saveable as `.keras`.
        *args: the export function's positional arguments after the model.
        **kwargs: its keyword arguments (picklable values: arrays, not datasets).

    Returns:
        What the export function returned in the child.
    """
    if function not in _FUNCTIONS:
        raise ValueError(f"Invalid function={function!r}. Expected one of {sorted(_FUNCTIONS)}.")
    with shared_process():
        return _open_child.call(function, model, args, kwargs)


class _Child:
    """One `python -m keras_vit.export._tensorflow_process` speaking length-prefixed pickles on stdin/stdout."""

    def __init__(self):
        self.folder = tempfile.mkdtemp(prefix="keras_vit_export_")
        self.models = {}  # id(model) -> (model, .keras path); the model kept so its id stays unique
        # No GPU for the child: writing an export needs none, and JAX in this process may hold
        # most of the GPU's memory already (it preallocates).
        env = dict(os.environ, KERAS_BACKEND="tensorflow", CUDA_VISIBLE_DEVICES="")
        # The child imports this very keras_vit, wherever it was imported from.
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(keras_vit.__file__)))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        self.env = env
        self.stderr_path = os.path.join(self.folder, "stderr.txt")
        self.process = None  # started by the first call, after its model was saved

    def call(self, function, model, args, kwargs):
        backend = keras.backend.backend()
        path = self._model_file(model, f"{_FORMATS[function]} from the {backend} backend")
        data = pickle.dumps((function, path, args, kwargs))
        if self.process is None:
            with open(self.stderr_path, "wb") as stderr:
                self.process = subprocess.Popen(
                    [sys.executable, "-m", __name__], env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=stderr,
                )
        try:
            self.process.stdin.write(len(data).to_bytes(8, "little") + data)
            self.process.stdin.flush()
            header = self.process.stdout.read(8)
            reply = self.process.stdout.read(int.from_bytes(header, "little")) if len(header) == 8 else b""
        except BrokenPipeError:
            reply = b""
        if not reply:
            try:
                code = self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                code = "none (still running)"
            with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
                tail = "\n".join(f.read().strip().splitlines()[-_STDERR_LINES:])
            raise RuntimeError(
                f"The TensorFlow process exporting {_FORMATS[function]} from the {backend} backend ended with "
                f"code {code} and no result. Its last output:\n{tail}"
            )
        ok, value = pickle.loads(reply)
        if not ok:
            raise value
        return value

    def _model_file(self, model, what):
        if id(model) not in self.models:
            path = os.path.join(self.folder, f"model_{len(self.models)}.keras")
            try:
                model.save(path)
            except Exception as error:  # noqa: BLE001  any failure to serialize: say why the export needs it
                raise ValueError(
                    f"Cannot export model {model.name!r} to {what}: exports run in a TensorFlow "
                    f"process from the model's .keras file, and saving it failed: {error}"
                ) from error
            self.models[id(model)] = (model, path)
        return self.models[id(model)][1]

    def close(self):
        try:
            if self.process is not None:
                try:
                    self.process.stdin.close()
                    self.process.wait(timeout=60)
                except (OSError, subprocess.TimeoutExpired):
                    self.process.kill()
                    self.process.wait()
                self.process.stdout.close()
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


def _serve():
    """The child's loop: one export per request, under the TensorFlow backend, until stdin closes."""
    import importlib

    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything TensorFlow or Keras prints goes to stderr, not into the replies
    requests = sys.stdin.buffer
    models = {}
    while len(header := requests.read(8)) == 8:
        function, path, args, kwargs = pickle.loads(requests.read(int.from_bytes(header, "little")))
        try:
            if path not in models:
                models[path] = keras.saving.load_model(path, compile=False)
            export = getattr(importlib.import_module(_FUNCTIONS[function]), function)
            outcome = (True, export(models[path], *args, **kwargs))
        except Exception as error:  # noqa: BLE001  handed to the parent, which raises it
            outcome = (False, error)
        try:
            data = pickle.dumps(outcome)
        except Exception:  # noqa: BLE001  an exception that cannot be pickled: keep its text
            data = pickle.dumps((False, RuntimeError(f"{type(outcome[1]).__name__}: {outcome[1]}")))
        replies.write(len(data).to_bytes(8, "little") + data)
        replies.flush()


if __name__ == "__main__":
    if keras.backend.backend() != "tensorflow":
        sys.exit(f"{__name__} runs under KERAS_BACKEND=tensorflow; got {keras.backend.backend()!r}.")
    _serve()
