"""keras_vit: Vision Transformers for Keras 3 and TensorFlow.

`import keras_vit` is cheap (no Keras, no TensorFlow): subpackages and the names below load on
first use, and all of them as soon as Keras is loaded, so everything keras_vit registers is
known to `keras.saving.load_model` (see `keras_vit._registration`).

Example:

>>> import keras_vit
>>> model = keras_vit.ViT("tiny", num_classes=10)
>>> model.output_shape
(None, 10)
>>> keras_vit.training.get_recipe("deit").optimizer  # subpackages come with the import
'adamw'
"""

__version__ = "0.1.0"

import importlib
import importlib.util

from keras_vit import _registration, configs
from keras_vit.configs import VARIANTS

# Public names of the package, by the module that defines them; loaded on first use.
_NAMES = {
    "applications": ("decode_predictions", "preprocess_input"),
    "weights": ("load_weights",),
    "layers": (
        "BottleneckUnit", "DropPath", "MultiHeadSelfAttention", "PatchEncoder", "Patches", "RotaryPositionEmbedding",
        "ResizeLike", "StandardizedConv2D", "TokenPooling", "TransformerBlock",
    ),
    "models": (
        "BiTResNet", "LinearSegmenter", "compile_segmenter", "R26_ViT_B32", "R26_ViT_S32", "R50_ViT_B16",
        "R50_ViT_L32", "R_ViT_Ti16", "ViT", "ViT_B8",
        "ViT_B16", "ViT_B32", "ViT_H14", "ViT_L16", "ViT_L32", "ViT_S16", "ViT_S32", "ViT_Ti16", "ViT_e14",
        "ViT_g14", "ViT_G14",
    ),
}
_MODULE_OF = {name: module for module, names in _NAMES.items() for name in names}


def __getattr__(name):
    if name in _MODULE_OF:
        return getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    if name in _registration.SUBPACKAGES or importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_registration.SUBPACKAGES) | set(_MODULE_OF))


_registration.install()
