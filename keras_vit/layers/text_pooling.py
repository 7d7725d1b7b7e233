"""TextPooling: the one token state a text tower reads (CLIP's end-of-text token, SigLIP's last position)."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._validation import check_choice

# "eos": the first position of `eos_token_id` (CLIP); "argmax": the position of the largest id
# (CLIP checkpoints whose config states eos_token_id 2: the end-of-text token is the largest id);
# "last": the last position, padding or not (SigLIP, SigLIP 2).
TEXT_POOLINGS = ("eos", "argmax", "last")


@keras.saving.register_keras_serializable(package="keras_vit")
class TextPooling(keras.layers.Layer):
    """Picks one token state per sequence: called on (states (B, T, D), token ids (B, T)) -> (B, D).

    Args:
        mode: str. "eos", "argmax" or "last" (see `TEXT_POOLINGS`).
        eos_token_id: int or None. The end-of-text id that mode "eos" looks for. Defaults to None.

    Example:

    >>> import numpy as np
    >>> states = np.arange(12, dtype="float32").reshape(1, 4, 3)
    >>> TextPooling("eos", eos_token_id=9)([states, np.array([[5, 9, 0, 9]])]).numpy().tolist()
    [[3.0, 4.0, 5.0]]
    """

    def __init__(self, mode, eos_token_id=None, **kwargs):
        super().__init__(**kwargs)
        check_choice("mode", mode, TEXT_POOLINGS)
        if mode == "eos" and not isinstance(eos_token_id, int):
            raise ValueError(f"Invalid eos_token_id={eos_token_id!r}: mode 'eos' needs the end-of-text token's id.")
        self.mode = mode
        self.eos_token_id = eos_token_id

    def call(self, inputs):
        states, ids = inputs
        if self.mode == "last":
            return states[:, -1]
        ids = ops.cast(ids, "int32")
        if self.mode == "eos":
            ids = ops.cast(ops.equal(ids, self.eos_token_id), "int32")
        position = ops.argmax(ids, axis=-1)  # the first maximum
        picked = ops.take_along_axis(states, ops.cast(position, "int32")[:, None, None], axis=1)
        return picked[:, 0]

    def compute_output_shape(self, input_shape):
        states = input_shape[0]
        return (states[0], states[2])

    def get_config(self):
        return {**super().get_config(), "mode": self.mode, "eos_token_id": self.eos_token_id}
