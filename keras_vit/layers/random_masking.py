"""RandomPatchMasking: MAE's per-image random choice of the patch tokens the encoder sees."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_number_in


@keras.saving.register_keras_serializable(package="keras_vit")
class RandomPatchMasking(keras.layers.Layer):
    """Keeps a random `1 - mask_ratio` share of each image's patch tokens (B, N, D), as MAE does.

    Each image draws its own uniform noise (B, N); its `int(N * (1 - mask_ratio))` patches of
    lowest noise are kept, in the order of their noise, as Hugging Face's `ViTMAEModel` and the
    official MAE code do, so the same `noise` gives the same mask as theirs. Returns (visible
    tokens (B, K, D), mask (B, N) float32, 1 for a hidden patch, ids_restore (B, N) int32: the
    position of each patch in the shuffled order, which the decoder uses to put the tokens back).

    Args:
        mask_ratio: float. Share of the patches hidden, in (0, 1). Defaults to 0.75.
        seed: int or None. Seed of the noise drawn when the call passes none. Defaults to None.

    Example:

    >>> import numpy as np
    >>> visible, mask, ids_restore = RandomPatchMasking(0.5)(np.zeros((2, 4, 3), "float32"))
    >>> tuple(visible.shape), np.asarray(mask).sum(axis=1).tolist()
    ((2, 2, 3), [2.0, 2.0])
    """

    def __init__(self, mask_ratio=0.75, seed=None, **kwargs):
        super().__init__(**kwargs)
        check_number_in("mask_ratio", mask_ratio, 0, 1, include_low=False, include_high=False)
        self.mask_ratio = float(mask_ratio)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def visible_count(self, num_patches):
        """Patches kept of `num_patches`: `int(num_patches * (1 - mask_ratio))`, as Hugging Face's and MAE's code."""
        return int(num_patches * (1.0 - self.mask_ratio))

    def call(self, tokens, noise=None):
        shape = ops.shape(tokens)
        num_patches = tokens.shape[1]
        keep = self.visible_count(num_patches)
        if noise is None:
            noise = keras.random.uniform((shape[0], num_patches), seed=self.seed_generator)
        ids_shuffle = ops.cast(ops.argsort(ops.cast(noise, "float32"), axis=1), "int32")
        ids_restore = ops.cast(ops.argsort(ids_shuffle, axis=1), "int32")
        ids_keep = ids_shuffle[:, :keep]
        visible = ops.take_along_axis(tokens, ops.broadcast_to(ids_keep[:, :, None], (shape[0], keep, shape[2])), axis=1)
        shuffled = ops.concatenate([ops.zeros((shape[0], keep)), ops.ones((shape[0], num_patches - keep))], axis=1)
        mask = ops.take_along_axis(shuffled, ids_restore, axis=1)
        return visible, mask, ids_restore

    def compute_output_spec(self, tokens, noise=None):
        batch, num_patches, width = tokens.shape
        keep = self.visible_count(num_patches)
        return (keras.KerasTensor((batch, keep, width), tokens.dtype), keras.KerasTensor((batch, num_patches), "float32"),
                keras.KerasTensor((batch, num_patches), "int32"))

    def get_config(self):
        return {**super().get_config(), "mask_ratio": self.mask_ratio, "seed": self.seed}
