"""Input data: sources (tfds, image folders, arrays, the shipped sample), the tf.data pipeline, augmentation."""

from keras_vit.data.augment import PRESETS as AUGMENT_PRESETS
from keras_vit.data.augment import Augmenter, get_preset, random_resized_crop
from keras_vit.data.fashion_mnist import CLASS_NAMES, load_sample, read_idx_dataset
from keras_vit.data.pipeline import make_pipeline
from keras_vit.data.segmentation import canvas_segmentation_set, check_masks
from keras_vit.data.sources import Source, from_arrays, from_folder, from_tfds, load_source
