"""Transfer of a pre-trained backbone: its one loader, its features, and their accuracy without training.

`load_pretrained` loads any checkpoint (or keras_vit `.keras` model) as a feature model or with
a new head; `extract_features` runs it over a data source; `linear_fewshot` (the ViT paper's
linear few-shot) and `knn_accuracy` (DINO's weighted k-NN) measure the features.

Example:

>>> import numpy as np
>>> from keras_vit import transfer
>>> features = np.array([[1.0, 0.0], [0.0, 1.0], [0.9, 0.2], [0.1, 0.8]])
>>> transfer.knn_accuracy(features[:2], [0, 1], features[2:], [0, 1], k=1)
1.0
"""

from keras_vit.transfer.features import Features, extract_features
from keras_vit.transfer.fewshot import knn_accuracy, linear_fewshot
from keras_vit.transfer.pretrained import Pretrained, load_pretrained

__all__ = ["Features", "Pretrained", "extract_features", "knn_accuracy", "linear_fewshot", "load_pretrained"]
