"""TokenMap: a block's patch tokens laid out on the patch grid, channels last, for dense tasks."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_non_negative_int, check_positive_int


@keras.saving.register_keras_serializable(package="keras_vit")
class TokenMap(keras.layers.Layer):
    """Splits tokens (B, T, D) into a feature map (B, h, w, D) and the prefix tokens (B, P, D).

    The grid is read from the feature map the tokens were made from (the image, or a stem's
    output), so one layer serves every image size: h and w are its height and width divided by
    `patch_size`, rows first as the patch encoder flattens them.

    Args:
        patch_size: int. Pixels (or stem cells) per patch side of the features passed with the tokens.
        num_prefix_tokens: int. Leading non-patch tokens (class, distillation and register
            tokens). Defaults to 1.

    Example:

    >>> import numpy as np
    >>> tokens, image = np.ones((2, 1 + 6, 8), "float32"), np.ones((2, 8, 12, 3), "float32")
    >>> grid, prefix = TokenMap(4, num_prefix_tokens=1)(tokens, image)
    >>> tuple(grid.shape), tuple(prefix.shape)
    ((2, 2, 3, 8), (2, 1, 8))
    """

    def __init__(self, patch_size, num_prefix_tokens=1, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("patch_size", patch_size)
        check_non_negative_int("num_prefix_tokens", num_prefix_tokens)
        self.patch_size = patch_size
        self.num_prefix_tokens = num_prefix_tokens

    def call(self, tokens, features):
        rows, cols = self._grid(features.shape, ops.shape(features))
        patches = tokens[:, self.num_prefix_tokens:]
        grid = ops.reshape(patches, (-1, rows, cols, ops.shape(tokens)[-1]))
        return grid, tokens[:, : self.num_prefix_tokens]

    def _grid(self, static, dynamic):
        return tuple(
            static[axis] // self.patch_size if static[axis] is not None else dynamic[axis] // self.patch_size
            for axis in (1, 2)
        )

    def compute_output_shape(self, tokens_shape, features_shape):
        rows, cols = (None if side is None else side // self.patch_size for side in features_shape[1:3])
        return (tokens_shape[0], rows, cols, tokens_shape[-1]), (tokens_shape[0], self.num_prefix_tokens, tokens_shape[-1])

    def get_config(self):
        return {**super().get_config(), "patch_size": self.patch_size, "num_prefix_tokens": self.num_prefix_tokens}
