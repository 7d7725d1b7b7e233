"""keras_vit: Vision Transformers for Keras 3 and TensorFlow.

Example:

>>> import keras_vit
>>> model = keras_vit.ViT("tiny", num_classes=10)
>>> model.output_shape
(None, 10)
>>> keras_vit.training.get_recipe("deit").optimizer  # subpackages come with the import
'adamw'
"""

__version__ = "0.1.0"

from keras_vit import configs, layers
from keras_vit import weights
# Every subpackage, so `keras_vit.training.train(...)` works after a bare `import keras_vit`,
# and everything registered for serialization (e.g. the WarmupCosine learning-rate schedule of
# a saved optimizer) is registered before `keras.saving.load_model` needs it.
from keras_vit import data, export, inspect, models, training
from keras_vit.applications import decode_predictions, preprocess_input
from keras_vit.weights import load_weights
from keras_vit.configs import VARIANTS
from keras_vit.layers import (
    BottleneckUnit,
    DropPath,
    MultiHeadSelfAttention,
    PatchEncoder,
    Patches,
    StandardizedConv2D,
    TokenPooling,
    TransformerBlock,
)
from keras_vit.models import (
    BiTResNet,
    R26_ViT_B32,
    R26_ViT_S32,
    R50_ViT_B16,
    R50_ViT_L32,
    R_ViT_Ti16,
    ViT,
    ViT_B8,
    ViT_B16,
    ViT_B32,
    ViT_H14,
    ViT_e14,
    ViT_g14,
    ViT_G14,
    ViT_L16,
    ViT_L32,
    ViT_S16,
    ViT_S32,
    ViT_Ti16,
)
