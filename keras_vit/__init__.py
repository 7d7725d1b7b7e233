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

from keras_vit import _registration, configs, machine
from keras_vit.configs import VARIANTS

# Public names of the package, by the module that defines them; loaded on first use.
_NAMES = {
    "applications": ("decode_predictions", "preprocess_input"),
    "weights": ("load_weights",),
    # Every layer class of keras_vit.layers (tests/test_applications.py checks the two agree).
    "layers": (
        "AttentionPooling", "BottleneckUnit", "DinoHead", "DPTDepthHead", "DPTFusion", "DPTReassemble", "DPTResidualUnit",
        "DropPath", "InferenceMode", "LayerScale", "MaskTokens", "MultiHeadSelfAttention",
        "NaFlexPatchEncoder", "PatchEncoder", "ProjectionHead", "RandomPatchMasking", "Patches", "ResizeLike",
        "RotaryPositionEmbedding", "ShiftedPatches",
        "StandardizedConv2D", "TextEmbedding", "TextPooling", "TokenMap", "TokenPooling", "TransformerBlock",
    ),
    "text": ("ImageTextModel",),
    "text.zeroshot": ("zeroshot_classifier",),
    "models": ("BiTResNet", "DepthEstimator", "DepthModel", "LinearSegmenter", "ViT", "compile_segmenter",
               "segmentation_metrics", *configs.NAMED_BUILDERS),
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


# Before anything imports TensorFlow: its oneDNN setting is read once, at its import (see keras_vit.machine).
machine.ONEDNN = machine.prepare_tensorflow()
_registration.install()
