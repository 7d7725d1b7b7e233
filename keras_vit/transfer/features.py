"""`extract_features`: one forward pass of a feature model over a data source, in the source's order."""

from __future__ import annotations

import dataclasses
import time

import numpy as np


@dataclasses.dataclass(frozen=True)
class Features:
    """The features of a data source, one row per image, in the source's order.

    Args:
        features: np.ndarray float32 (N, D). The model's pooled features.
        labels: np.ndarray int32 (N,). The images' labels.
        files: tuple of str. The image file of each row; empty when the source has no files
            (arrays, tensorflow-datasets).
        class_names: tuple of str. The name of each label.
        seconds_per_image: float or None. The forward pass's time per image after its first
            batch (which also traces the model), None for a pass of one batch.
    """

    features: np.ndarray
    labels: np.ndarray
    files: tuple
    class_names: tuple
    seconds_per_image: float | None = None


def extract_features(model, source, *, batch_size=64, verbose=0) -> Features:
    """Runs a feature model once over every image of `source`, without augmentation.

    The model's input shape gives the image size and channels (grey images are repeated to 3
    channels, colour averaged to 1, as the model takes); pixels go in raw [0, 255], the model
    scaling them itself (`load_pretrained` puts the scaling inside); a model that keeps its
    checkpoint's image processor (`vit_config["image_processor"]`: CLIP's shortest-edge resize and
    centre crop, SigLIP's resize) gets its images as that processor makes them. Files that fail to decode
    are skipped by the data pipeline (`Source.corrupt_files`) and left out of `files` too.

    Args:
        model: keras.Model. A model whose output is one feature vector per image (batch, D),
            e.g. the feature model of `keras_vit.transfer.load_pretrained`.
        source: `keras_vit.data.sources.Source`. The images and labels.
        batch_size: int. Images per forward pass. Defaults to 64.
        verbose: int. 0: silent; 1: a Keras progress bar. Defaults to 0.

    Returns:
        `Features`.

    Example:

    >>> import numpy as np, keras_vit
    >>> from keras_vit.data.sources import from_arrays
    >>> model = keras_vit.ViT("tiny", include_top=False, image_size=16, preprocessing="unit")
    >>> result = extract_features(model, from_arrays(np.zeros((5, 8, 8), "uint8"), [0, 1, 0, 1, 1]))
    >>> result.features.shape, result.labels.tolist(), result.files, result.class_names
    ((5, 32), [0, 1, 0, 1, 1], (), ('0', '1'))
    """
    from keras_vit._validation import check_positive_int, check_choice
    from keras_vit.data.pipeline import make_pipeline  # tf.data stays in data/
    from keras_vit.image_processor import model_processor

    check_positive_int("batch_size", batch_size)
    check_choice("verbose", verbose, (0, 1))
    height, width, channels = _image_shape(model)
    output = model.output_shape
    if isinstance(output, list) or len(output) != 2:
        raise ValueError(
            f"Invalid model={model.name!r}: its output has shape {output}; expected one feature vector per "
            "image (batch, features), e.g. the feature model of keras_vit.transfer.load_pretrained."
        )
    # A model that keeps its checkpoint's processor (CLIP's crop, SigLIP's resize) sees its images as that processor
    # makes them, as its exports and load_predictor do.
    dataset = make_pipeline(source, image_size=(height, width), channels=channels, scaling=None,
                            batch_size=batch_size, processor=model_processor(model))
    progress = None
    if verbose:
        import keras

        total = -(-source.num_examples // batch_size) if source.num_examples else None
        progress = keras.utils.Progbar(total, unit_name="batch")
    features, labels = [], []
    warm, warm_images = None, 0  # timed from the end of the first batch
    for step, (images, one_hot) in enumerate(dataset, 1):
        images = images.numpy()
        count = len(images)
        if step > 1 and count < batch_size:  # a short last batch, padded: a batch of another shape is traced again
            images = np.concatenate([images, np.zeros((batch_size - count,) + images.shape[1:], images.dtype)])
        features.append(np.asarray(model.predict_on_batch(images), np.float32)[:count])
        labels.append(np.argmax(one_hot.numpy(), axis=-1).astype(np.int32))
        if warm is None:
            warm = time.perf_counter()
        else:
            warm_images += count
        if progress is not None:
            progress.update(step)
    seconds_per_image = (time.perf_counter() - warm) / warm_images if warm_images else None
    width_out = output[-1]
    features = np.concatenate(features) if features else np.zeros((0, width_out), np.float32)
    labels = np.concatenate(labels) if labels else np.zeros((0,), np.int32)
    # After the full pass: rows exist only for files that decoded.
    failed = set(source.corrupt_files())
    files = tuple(path for path in source.files if path not in failed)
    if files and len(files) != len(features):
        raise RuntimeError(f"{len(features)} features for {len(files)} files of {source.description}.")
    return Features(features, labels, files, tuple(source.class_names), seconds_per_image)


def _image_shape(model):
    inputs = getattr(model, "inputs", None)
    shape = tuple(inputs[0].shape) if inputs and len(inputs) == 1 else None
    if shape is None or len(shape) != 4 or None in shape[1:]:
        raise ValueError(
            f"Invalid model={getattr(model, 'name', model)!r}: its input has shape {shape}; expected images of a "
            "fixed size (batch, height, width, channels), e.g. a model of keras_vit.transfer.load_pretrained."
        )
    return shape[1:]
