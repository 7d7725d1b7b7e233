"""Functional model builders: the generic `ViT` and one thin builder per variant."""

from keras_vit.configs import NAMED_BUILDERS
from keras_vit.models import vit
from keras_vit.models.depth import DepthEstimator, DepthModel
from keras_vit.models.head import head_activation, outputs_probabilities
from keras_vit.models.mimetic import mimetic_initialization
from keras_vit.models.resnet import BiTResNet
from keras_vit.models.vit import ViT

# The named builders (ViT_B16, R50_ViT_B16, ...), made in models/vit.py from the table.
globals().update({name: getattr(vit, name) for name in NAMED_BUILDERS})

__all__ = ["BiTResNet", "DepthEstimator", "DepthModel", "head_activation", "mimetic_initialization",
           "outputs_probabilities", "ViT", *NAMED_BUILDERS]
