"""Functional model builders: the generic `ViT` and one thin builder per variant."""

from keras_vit.configs import NAMED_BUILDERS
from keras_vit.models import vit
from keras_vit.models.depth import DepthEstimator, DepthModel
from keras_vit.models.head import head_activation, outputs_probabilities
from keras_vit.models.mimetic import mimetic_initialization
from keras_vit.models.resnet import BiTResNet
from keras_vit.models.segmentation import LinearSegmenter, compile_segmenter, segmentation_metrics
from keras_vit.models.vit import ViT

# The named builders (ViT_B16, R50_ViT_B16, ...), made in models/vit.py from the table.
globals().update({name: getattr(vit, name) for name in NAMED_BUILDERS})

__all__ = [
    "BiTResNet", "compile_segmenter", "DepthEstimator", "DepthModel", "head_activation", "LinearSegmenter",
    "mimetic_initialization", "outputs_probabilities", "segmentation_metrics", "ViT", *NAMED_BUILDERS,
]
