"""DPTDepthHead: DPT's depth head, from the decoder's finest map to one depth per pixel."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_choice, check_positive_int, check_positive_number
from keras_vit.layers.align_corners import resize_align_corners

DEPTH_ESTIMATION_TYPES = ("relative", "metric")


@keras.saving.register_keras_serializable(package="keras_vit")
class DPTDepthHead(keras.layers.Layer):
    """Depth (B, H, W) from the decoder's map (B, h, w, C) and the images (B, H, W, ...) it is for.

    conv1 (3x3, C to C // 2), a bilinear resize with aligned corners to the images' height and
    width, conv2 (3x3 to `hidden_size`), ReLU, conv3 (1x1 to one channel), then ReLU for
    "relative" depth (Depth Anything's disparity-like output) or a sigmoid for "metric" depth,
    times `max_depth` in both cases (as Hugging Face's head does). Sublayer names: `conv1`,
    `conv2`, `conv3`.

    Args:
        hidden_size: int. Width of conv2 (Hugging Face's head_hidden_size). Defaults to 32.
        depth_estimation_type: str. "relative" or "metric". Defaults to "relative".
        max_depth: float. Scale of the output (20 indoor, 80 outdoor for Depth Anything's
            metric models). Defaults to 1.

    Example:

    >>> import numpy as np
    >>> head = DPTDepthHead(4, "metric", max_depth=20.0)
    >>> depth = head(np.zeros((1, 6, 8, 8), "float32"), np.zeros((1, 12, 16, 3), "float32"))
    >>> tuple(depth.shape), float(depth[0, 0, 0])  # zero maps and biases: sigmoid(0) * 20
    ((1, 12, 16), 10.0)
    """

    def __init__(self, hidden_size=32, depth_estimation_type="relative", max_depth=1.0, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("hidden_size", hidden_size)
        check_choice("depth_estimation_type", depth_estimation_type, DEPTH_ESTIMATION_TYPES)
        check_positive_number("max_depth", max_depth)
        self.hidden_size = hidden_size
        self.depth_estimation_type = depth_estimation_type
        self.max_depth = max_depth
        self.conv1 = None
        self.conv2 = keras.layers.Conv2D(hidden_size, 3, padding="same", dtype=self.dtype_policy, name="conv2")
        self.conv3 = keras.layers.Conv2D(1, 1, dtype=self.dtype_policy, name="conv3")

    def build(self, features_shape, images_shape=None):
        channels = tuple(features_shape)[-1]
        if channels is None or channels < 2:
            raise ValueError(f"DPTDepthHead expects feature maps (batch, height, width, channels) with at least 2 "
                             f"known channels, got shape {tuple(features_shape)}.")
        self.conv1 = keras.layers.Conv2D(channels // 2, 3, padding="same", dtype=self.dtype_policy, name="conv1")
        shape = tuple(features_shape)
        self.conv1.build(shape)
        self.conv2.build(shape[:3] + (channels // 2,))
        self.conv3.build(shape[:3] + (self.hidden_size,))

    def call(self, features, images):
        x = self.conv1(features)
        size = ops.shape(images)[1:3]
        x = self.conv2(resize_align_corners(x, size[0], size[1]))
        x = self.conv3(ops.relu(x))
        x = ops.relu(x) if self.depth_estimation_type == "relative" else ops.sigmoid(x)
        return ops.squeeze(x, axis=-1) * ops.cast(self.max_depth, x.dtype)

    def compute_output_shape(self, features_shape, images_shape):
        return (tuple(features_shape)[0],) + tuple(images_shape)[1:3]

    def get_config(self):
        return {**super().get_config(), "hidden_size": self.hidden_size,
                "depth_estimation_type": self.depth_estimation_type, "max_depth": self.max_depth}
