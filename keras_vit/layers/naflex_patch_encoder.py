"""NaFlexPatchEncoder: SigLIP 2 NaFlex's embedding of padded patch sequences of images of any aspect."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_choice, check_positive_int
from keras_vit.layers.grid_resampling import INTERPOLATIONS, interpolation_weights
from keras_vit.layers.patch_encoder import grid_pair

# How SigLIP 2 resamples its position grid to each image's (Siglip2VisionEmbeddings.resize_positional_embeddings).
NAFLEX_INTERPOLATION = "bilinear_antialias"


@keras.saving.register_keras_serializable(package="keras_vit")
class NaFlexPatchEncoder(keras.layers.Layer):
    """Embeds patch sequences (B, N, P*P*C) as tokens (B, N, D) with their padding mask (B, N).

    SigLIP 2 NaFlex (Hugging Face `Siglip2VisionEmbeddings`): each image of a batch is cut into
    its own h x w grid of patches (`spatial_shapes` (B, 2) holds (h, w)), flattened row by row and
    padded to N. Token n is patch n times a linear map E plus a bias, plus the learned position
    table (`grid_size`) resampled to that image's h x w grid by `interpolation`. Tokens from
    h * w on are padding: their mask is False (pass it to the blocks and the pooling) and, as in
    the reference, they get the position of the grid's first cell.

    Patches are flattened in (row, column, channel) order (`keras_vit.layers.Patches`,
    `keras_vit.naflex.naflex_inputs`, Hugging Face's `Siglip2ImageProcessor`). The kernel keeps
    `PatchEncoder`'s (P, P, C, D) layout (a convolution with stride P is the same linear map) and
    the table its (1, rows * cols, D) shape, so both encoders read the same checkpoints.

    Args:
        patch_size: int. Side P of the square patches.
        hidden_size: int. Token width D.
        grid_size: int or (int, int). Grid (rows, cols) the position table is stored for.
        interpolation: str. How the table is resampled to each image's grid (see
            `keras_vit.layers.grid_resampling`). Defaults to "bilinear_antialias" (SigLIP 2's).
        use_bias: bool. The patch projection has a bias. Defaults to True.

    Example:

    >>> import numpy as np
    >>> encoder = NaFlexPatchEncoder(4, 8, grid_size=4)
    >>> patches = np.zeros((2, 6, 4 * 4 * 3), "float32")
    >>> tokens, mask = encoder(patches, np.array([[2, 3], [1, 4]], "int32"))
    >>> tuple(tokens.shape), np.asarray(mask).sum(axis=1).tolist()
    ((2, 6, 8), [6, 4])
    """

    # What the checkpoint mappings shared with PatchEncoder ask of an encoder: no prefix tokens.
    class_token = distillation_token = False
    num_register_tokens = num_prefix_tokens = num_position_prefix_tokens = 0
    position_embedding = "learned"

    def __init__(self, patch_size, hidden_size, grid_size, interpolation=NAFLEX_INTERPOLATION, use_bias=True, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("patch_size", patch_size)
        check_positive_int("hidden_size", hidden_size)
        check_choice("interpolation", interpolation, INTERPOLATIONS)
        self.patch_size = patch_size
        self.hidden_size = hidden_size
        self.grid_size = grid_pair(grid_size)
        self.interpolation = interpolation
        self.use_bias = bool(use_bias)

    def build(self, input_shape):
        p, d = self.patch_size, self.hidden_size
        depth = input_shape[-1] if len(input_shape) == 3 else None
        if depth is None or depth % (p * p):
            raise ValueError(
                f"Expected patches of shape (batch, patches, {p}*{p}*channels) (patch_size={p}), got "
                f"input_shape={tuple(input_shape)}."
            )
        self.kernel = self.add_weight(name="kernel", shape=(p, p, depth // (p * p), d), initializer="lecun_normal")
        self.bias = self.add_weight(name="bias", shape=(d,), initializer="zeros") if self.use_bias else None
        self.pos_embedding = self.add_weight(
            name="position_embedding", shape=(1, self.grid_size[0] * self.grid_size[1], d),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
        )
        super().build(input_shape)

    def call(self, patches, spatial_shapes):
        d = self.hidden_size
        x = ops.matmul(patches, ops.reshape(self.kernel, (-1, d)))
        if self.use_bias:
            x = x + self.bias
        position, mask = self._positions(spatial_shapes, ops.shape(patches)[1])
        return x + ops.cast(position, x.dtype), mask

    def _positions(self, spatial_shapes, length):
        """Each image's resampled table, padded to `length` tokens (B, length, D), and the mask (B, length)."""
        shapes = ops.cast(spatial_shapes, "int32")
        rows, cols = shapes[:, :1], shapes[:, 1:]  # (B, 1)
        index = ops.arange(length, dtype="int32")[None]  # (1, N)
        mask = ops.less(index, rows * cols)
        per_row = ops.maximum(cols, 1)
        row = ops.where(mask, ops.floor_divide(index, per_row), 0)
        col = ops.where(mask, ops.mod(index, per_row), 0)
        # Resampling is linear and separable: each token weighs the table by its row's and its column's weights.
        grid_rows, grid_cols = self.grid_size
        row_weights = interpolation_weights(grid_rows, row, rows, self.interpolation)  # (B, N, grid rows)
        col_weights = interpolation_weights(grid_cols, col, cols, self.interpolation)  # (B, N, grid cols)
        weights = ops.reshape(row_weights[..., :, None] * col_weights[..., None, :],
                              (ops.shape(row)[0], length, grid_rows * grid_cols))
        table = ops.cast(self.pos_embedding, "float32")[0]
        return ops.matmul(weights, table), mask

    def compute_output_spec(self, patches, spatial_shapes):
        batch, length = patches.shape[0], patches.shape[1]
        return (keras.KerasTensor((batch, length, self.hidden_size), dtype=self.compute_dtype),
                keras.KerasTensor((batch, length), dtype="bool"))

    def get_config(self):
        return {
            **super().get_config(),
            "patch_size": self.patch_size,
            "hidden_size": self.hidden_size,
            "grid_size": self.grid_size,
            "interpolation": self.interpolation,
            "use_bias": self.use_bias,
        }
