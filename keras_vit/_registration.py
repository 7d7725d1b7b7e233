"""Finishes `import keras_vit` once Keras is loaded, so `keras.saving.load_model` knows its objects.

`import keras_vit` imports no Keras and no TensorFlow (`keras-vit --help` and `--version` answer
at once); its subpackages load on first use (`keras_vit.__getattr__`). But a `.keras` file
names keras_vit's layers, model class and learning-rate schedule, and Keras finds them only
once the modules that register them are imported. So as soon as Keras itself is loaded (the
user imports it, or a keras_vit module does), `finish_import` imports every subpackage, as
`import keras_vit` used to do eagerly. Keras offers no hook for "about to deserialize", hence
this one on the import system: a finder that wraps the loader of `keras` (and of keras_vit's
own subpackages, to wait until an import of keras_vit in progress has finished) and removes
itself when done. tests/test_applications.py pins the behaviour in fresh processes.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

# Every subpackage and module that imports Keras (or TensorFlow) when imported.
SUBPACKAGES = (
    "applications", "backends", "data", "export", "inspect", "layers", "models", "pretraining", "training", "transfer",
    "weights",
)
_WATCHED = frozenset(["keras"] + [f"keras_vit.{name}" for name in SUBPACKAGES])


def finish_import() -> None:
    """Imports every keras_vit subpackage, registering everything keras_vit serializes.

    Keras on JAX or PyTorch runs without TensorFlow installed (a GPU machine with JAX alone): the
    subpackages that need it (data pipelines, training, export) are then left out, and say so
    when used, rather than failing `import keras_vit` for the layers and models that need none.
    """
    if _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    for name in SUBPACKAGES:
        try:
            importlib.import_module(f"keras_vit.{name}")
        except ModuleNotFoundError as error:
            if error.name != "tensorflow":
                raise


def install() -> None:
    """Calls `finish_import` now if Keras is loaded, else right after Keras loads."""
    if "keras" in sys.modules:
        finish_import()
    elif _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps the loaders of Keras and of keras_vit's subpackages; see the module docstring."""

    def __init__(self):
        self.depth = 0  # keras_vit subpackage imports under way

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _WATCHED:
            return None
        sys.meta_path.remove(self)  # find the real spec with the other finders
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader, counts=fullname != "keras")
        return spec


class _Loader(importlib.abc.Loader):
    def __init__(self, loader, counts):
        self.loader = loader
        self.counts = counts

    def __getattr__(self, name):  # resource readers and the like: the real loader's
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        _finder.depth += self.counts
        try:
            self.loader.exec_module(module)
        finally:
            _finder.depth -= self.counts
        # Inside an import of a keras_vit module, its own imports are not all done yet: wait.
        if _finder.depth == 0 and "keras" in sys.modules and _finder in sys.meta_path:
            finish_import()


_finder = _Finder()
