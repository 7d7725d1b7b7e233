"""Transfer of a pre-trained backbone: the accuracy of its frozen features without training.

`linear_fewshot` (the ViT paper's linear few-shot) and `knn_accuracy` (DINO's weighted k-NN)
measure features.

Example:

>>> import numpy as np
>>> from keras_vit import transfer
>>> features = np.array([[1.0, 0.0], [0.0, 1.0], [0.9, 0.2], [0.1, 0.8]])
>>> transfer.knn_accuracy(features[:2], [0, 1], features[2:], [0, 1], k=1)
1.0
"""

from keras_vit.transfer.fewshot import knn_accuracy, linear_fewshot

__all__ = ["knn_accuracy", "linear_fewshot"]
