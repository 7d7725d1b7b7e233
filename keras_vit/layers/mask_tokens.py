"""MaskTokens: MAE's decoder input, the encoded tokens put back in place among learned mask tokens."""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_vit._validation import check_non_negative_int
from keras_vit.layers.patch_encoder import grid_pair


def mae_sincos_table(rows, cols, width):
    """MAE's fixed 2-D sine-cosine position table (rows * cols, width), as its released weights hold it.

    Per position [sin(c w), cos(c w), sin(r w), cos(r w)] for column c and row r, over width / 4
    frequencies w = 10000^(-k / (width / 4)): the column first (the official code's naming swap
    that its checkpoints keep, and that Hugging Face's `ViTMAEEmbeddings` rotates back to).

    Example:

    >>> table = mae_sincos_table(2, 3, 8)
    >>> table.shape, table[0].tolist() == [0, 0, 1, 1, 0, 0, 1, 1]
    ((6, 8), True)
    """
    if width % 4:
        raise ValueError(f"Invalid width={width!r}: MAE's sine-cosine table needs a multiple of 4.")
    quarter = width // 4
    omega = 1.0 / 10000.0 ** (np.arange(quarter, dtype="float64") / quarter)
    row, col = np.meshgrid(np.arange(rows, dtype="float64"), np.arange(cols, dtype="float64"), indexing="ij")
    angles_c, angles_r = np.outer(col.ravel(), omega), np.outer(row.ravel(), omega)
    return np.concatenate([np.sin(angles_c), np.cos(angles_c), np.sin(angles_r), np.cos(angles_r)], 1).astype("float32")


@keras.saving.register_keras_serializable(package="keras_vit")
class MaskTokens(keras.layers.Layer):
    """Puts the visible tokens back among mask tokens and adds the decoder's fixed position table.

    Takes (tokens (B, P + K, D): P prefix tokens then the K visible patch tokens in shuffled
    order, ids_restore (B, N) from `RandomPatchMasking`) and returns (B, P + N, D): the prefix
    tokens, then every patch in image order, the hidden ones a learned `mask_token`, plus the
    `position_embedding` (P zero rows, then MAE's sine-cosine table of the grid; not trained,
    as MAE's).

    Args:
        grid_size: int or (int, int). The patch grid (rows, cols).
        num_prefix_tokens: int. Tokens before the patches (the class token). Defaults to 1.

    Example:

    >>> import numpy as np
    >>> layer = MaskTokens((2, 2))
    >>> tuple(layer(np.zeros((1, 3, 8), "float32"), np.array([[0, 2, 1, 3]])).shape)
    (1, 5, 8)
    """

    def __init__(self, grid_size, num_prefix_tokens=1, **kwargs):
        super().__init__(**kwargs)
        check_non_negative_int("num_prefix_tokens", num_prefix_tokens)
        self.grid_size = grid_pair(grid_size)
        self.num_prefix_tokens = num_prefix_tokens

    def build(self, tokens_shape, ids_restore_shape=None):
        width = tokens_shape[-1]
        rows, cols = self.grid_size
        self.mask_token = self.add_weight(name="mask_token", shape=(1, 1, width),
                                          initializer=keras.initializers.RandomNormal(stddev=0.02))
        table = np.concatenate([np.zeros((self.num_prefix_tokens, width), "float32"), mae_sincos_table(rows, cols, width)])
        self.position_embedding = self.add_weight(name="position_embedding", shape=(1,) + table.shape,
                                                  initializer=keras.initializers.Constant(table[None]), trainable=False)
        super().build(tokens_shape)

    def call(self, tokens, ids_restore):
        shape = ops.shape(tokens)
        prefix = self.num_prefix_tokens
        num_patches = self.grid_size[0] * self.grid_size[1]
        visible = tokens.shape[1] - prefix
        masked = ops.broadcast_to(ops.cast(self.mask_token, tokens.dtype), (shape[0], num_patches - visible, shape[2]))
        shuffled = ops.concatenate([tokens[:, prefix:], masked], axis=1)
        index = ops.broadcast_to(ops.cast(ids_restore, "int32")[:, :, None], (shape[0], num_patches, shape[2]))
        patches = ops.take_along_axis(shuffled, index, axis=1)
        return ops.concatenate([tokens[:, :prefix], patches], axis=1) + ops.cast(self.position_embedding, tokens.dtype)

    def compute_output_shape(self, tokens_shape, ids_restore_shape=None):
        return (tokens_shape[0], self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1], tokens_shape[-1])

    def get_config(self):
        return {**super().get_config(), "grid_size": self.grid_size, "num_prefix_tokens": self.num_prefix_tokens}
