"""Input data: the shipped Fashion-MNIST sample and readers of image data sets."""

from keras_vit.data.fashion_mnist import CLASS_NAMES, load_sample, read_idx_dataset
