"""Imports timm for parity tests on machines without a working torchvision.

timm imports torchvision at import time (data transforms, FrozenBatchNorm2d), but its
VisionTransformer uses none of it. The torchvision wheels on PyPI are built against CUDA torch and
fail to load beside the CPU build of torch this project pins, so when `import torchvision` fails,
a placeholder module stands in for it: any attribute is an inert class. Only the parity tests use
this; keras_vit itself never imports timm or torchvision.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types


class _Inert(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert(name, (object,), {})


class _Placeholder(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert(name, (object,), {})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname == "torchvision" or fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Placeholder(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def import_timm():
    """Returns the timm module, or None when timm is not installed."""
    return import_beside_placeholder("timm")


def import_beside_placeholder(name):
    """Module `name` (timm, open_clip), imported beside the placeholder where torchvision does not load; None if absent.

    The placeholder serves this import only: it is taken away again afterwards, so that
    transformers, imported later in the same process, does not find a torchvision without a
    version (it then fails to parse "N/A").
    """
    finder = None
    try:
        import torchvision  # noqa: F401
    except Exception:  # absent, or a CUDA build that cannot load beside CPU torch
        _forget_torchvision()
        finder = _Finder()
        sys.meta_path.insert(0, finder)
    try:
        return importlib.import_module(name)
    except ImportError:
        return None
    finally:
        if finder is not None:
            sys.meta_path.remove(finder)
            _forget_torchvision()


def _forget_torchvision():
    for name in [name for name in sys.modules if name == "torchvision" or name.startswith("torchvision.")]:
        del sys.modules[name]
