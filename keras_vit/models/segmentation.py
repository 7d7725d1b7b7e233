"""Linear segmentation probe: DINOv2's linear head on the frozen patch features of any keras_vit model.

Example:

>>> import numpy as np, keras_vit
>>> backbone = keras_vit.ViT("tiny_dinov2", image_size=None, include_top=False)
>>> probe = compile_segmenter(LinearSegmenter(backbone, num_classes=3, indices=2))
>>> images, masks = np.zeros((2, 16, 24, 3), "float32"), np.zeros((2, 16, 24), "int32")
>>> history = probe.fit(images, masks, epochs=1, verbose=0)
>>> tuple(probe(images).shape), sorted(history.history)
((2, 16, 24, 3), ['loss', 'mean_iou', 'pixel_accuracy'])
"""

from __future__ import annotations

import keras

from keras_vit._validation import check_positive_int
from keras_vit.layers import InferenceMode, ResizeLike
from keras_vit.models.vit_model import VisionTransformer


def LinearSegmenter(backbone, num_classes, indices=1, norm=True, name=None):
    """A linear segmentation probe on a frozen backbone: images (B, H, W, C) to per-pixel logits (B, H, W, classes).

    The head is DINOv2's linear evaluation head (`BNHead` of `dinov2/eval/segmentation`, built by
    its `_make_dinov2_linear_seg_head`): the chosen blocks' patch tokens as maps on the patch grid
    (`get_intermediate_layers(reshape=True)`: patch tokens only, after the final LayerNorm)
    concatenated on channels ("resize_concat"; a ViT's blocks share one grid, so nothing is
    resized), BatchNorm (SyncBatchNorm there; PyTorch's epsilon 1e-5 and momentum 0.1), no
    dropout (`dropout_ratio=0`), a 1x1 convolution to class logits on the patch grid, then the
    logits (not the features) resized bilinearly with `align_corners=False` to the image, where
    the per-pixel loss is computed (mmsegmentation resizes logits to the label size). DINOv2's
    "lin" setting is `indices=1`; its "+ms" setting is `indices=4` at larger images with
    multi-scale test-time augmentation, which is the caller's to do.

    The backbone's layers and variables are set to `trainable = False` (shared with `backbone`,
    which is frozen with them: set `trainable = True` on its variables to fine-tune it later) and
    run in inference mode (no dropout, no stochastic depth) during `fit` (`InferenceMode`).
    The 1x1 convolution and the resize compute in float32 under any dtype policy.

    Args:
        backbone: `keras_vit` model (any family, built with `keras_vit.ViT` or its builders;
            `include_top` does not matter). Its input size is the probe's: build it with
            `image_size=None` for any image size on the patch grid. NaFlex models are refused.
        num_classes: int. Classes of the masks, background included; at least 2.
        indices: int or list of int. The blocks whose features the head reads: an int n takes
            the last n blocks, a list names them (negative from the end), as
            `VisionTransformer.feature_maps_model` takes them. Defaults to 1 (the last block).
        norm: bool. Apply the backbone's final LayerNorm to each chosen block, as DINOv2 does.
            Defaults to True.
        name: str. The model's name. Defaults to "<backbone name>_linear_segmenter".

    Returns:
        A `keras.Model` (not compiled; see `compile_segmenter`) whose trainable weights are the
        BatchNorm's and the convolution's.

    Example:

    >>> import numpy as np, keras_vit
    >>> backbone = keras_vit.ViT("tiny", image_size=None, include_top=False)
    >>> probe = LinearSegmenter(backbone, num_classes=5, indices=[0, -1])
    >>> tuple(probe(np.zeros((1, 16, 32, 3), "float32")).shape), len(probe.trainable_weights)
    ((1, 16, 32, 5), 4)
    """
    if not isinstance(backbone, VisionTransformer):
        raise ValueError(
            f"Invalid backbone={backbone!r}: expected a keras_vit model (built by keras_vit.ViT or its builders), "
            "whose blocks' patch tokens the probe reads."
        )
    check_positive_int("num_classes", num_classes, minimum=2)
    features = backbone.feature_maps_model(indices=indices, norm=norm)
    spec = features.inputs[0]
    images = keras.Input(batch_shape=spec.shape, dtype=spec.dtype, name="images")
    frozen = InferenceMode(features, trainable=False, name="frozen_backbone")
    maps = keras.tree.flatten(frozen(images))  # one block's map may come back bare, not in a list
    x = maps[0] if len(maps) == 1 else keras.layers.Concatenate(name="concat_blocks")(maps)
    x = keras.layers.BatchNormalization(epsilon=1e-5, momentum=0.9, name="head_norm")(x)
    x = keras.layers.Conv2D(
        num_classes, 1, kernel_initializer=keras.initializers.RandomNormal(stddev=0.01), dtype="float32", name="head",
    )(x)
    logits = ResizeLike("bilinear", dtype="float32", name="upsample")(x, images)
    return keras.Model(images, logits, name=name or f"{backbone.name}_linear_segmenter")


def compile_segmenter(model, optimizer="adam", ignore_index=None, **compile_kwargs):
    """Compiles a segmenter for `fit`: per-pixel cross-entropy on logits, mean IoU and pixel accuracy.

    Masks are (B, H, W) integer class indices at the image's size (`keras_vit.data.check_masks`
    refuses others by name). Pixels labelled `ignore_index` count in neither the loss nor the
    mean IoU; pixel accuracy is reported only without one (Keras' accuracy metric cannot leave
    pixels out).

    Args:
        model: `keras.Model`. Outputs (B, H, W, classes) logits, as `LinearSegmenter` builds.
        optimizer: str or `keras.optimizers.Optimizer`. Defaults to "adam".
        ignore_index: int or None. A mask value that marks unlabelled pixels (255 in
            mmsegmentation's data sets). Defaults to None.
        **compile_kwargs: more arguments of `model.compile` (e.g. `jit_compile`).

    Returns:
        The model, compiled.

    Example:

    >>> import keras_vit
    >>> probe = LinearSegmenter(keras_vit.ViT("tiny", include_top=False), num_classes=4)
    >>> compile_segmenter(probe, ignore_index=255).loss.ignore_class
    255
    """
    num_classes = model.output_shape[-1]
    metrics = segmentation_metrics(num_classes, ignore_index)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=ignore_index)
    model.compile(optimizer=optimizer, loss=loss, metrics=metrics, **compile_kwargs)
    return model


def segmentation_metrics(num_classes, ignore_index=None):
    """Mean IoU over the classes from per-pixel logits, and pixel accuracy when no pixel is ignored.

    Mean IoU is Keras' `MeanIoU` on the arg-max of the logits, accumulated over the whole
    evaluation (the confusion matrix of all pixels, as mmsegmentation's mIoU), then averaged over
    the classes present in labels or predictions.

    Args:
        num_classes: int. Classes of the logits.
        ignore_index: int or None. A mask value left out of the metrics. Defaults to None.

    Example:

    >>> import numpy as np
    >>> mean_iou = segmentation_metrics(3, ignore_index=255)[0]
    >>> logits = np.eye(3, dtype="float32")[[0, 1, 1, 1, 2]]  # arg-max 0, 1, 1, 1, 2
    >>> _ = mean_iou.update_state(np.array([0, 0, 1, 2, 255]), logits)
    >>> round(float(mean_iou.result()), 4)  # IoUs 1/2, 1/3 and 0
    0.2778
    """
    check_positive_int("num_classes", num_classes, minimum=2)
    if ignore_index is not None and (not isinstance(ignore_index, int) or isinstance(ignore_index, bool)
                                     or 0 <= ignore_index < num_classes):
        raise ValueError(f"Invalid ignore_index={ignore_index!r}: expected None or an int outside the classes "
                         f"0 to {num_classes - 1} (e.g. 255 or -1).")
    metrics = [keras.metrics.MeanIoU(num_classes, ignore_class=ignore_index, sparse_y_pred=False, name="mean_iou")]
    if ignore_index is None:
        metrics.append(keras.metrics.SparseCategoricalAccuracy(name="pixel_accuracy"))
    return metrics
