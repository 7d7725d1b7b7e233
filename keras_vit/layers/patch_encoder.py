"""PatchEncoder: linear patch projection, class token and position embedding (paper eq. 1)."""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_vit._validation import check_choice, check_divisible, check_positive_int
from keras_vit.layers.grid_resampling import INTERPOLATIONS, resample_grid
from keras_vit.layers.patches import _check_image_shape

POSITION_EMBEDDINGS = ("learned", "sincos2d", "none")


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchEncoder(keras.layers.Layer):
    """Embeds images (B, H, W, C) as tokens (B, T, D): z0 = [x_class; x_p E] + E_pos.

    The projection E is a convolution with kernel = stride = P, so its kernel has the (P, P, C,
    D) layout of the original checkpoints. The tokens are, in this order: the class token, the
    distillation token (DeiT), the register tokens, then the N patch tokens; T counts them all.
    Register tokens never get a position embedding (DINOv2-reg); the class and distillation
    tokens get one unless `prefix_position_embedding=False` (DeiT-III, timm's `no_embed_class`).

    Args:
        patch_size: int. Side P of the square patches.
        hidden_size: int. Token width D.
        class_token: bool. Prepend a learnable class token (initialised to zeros). Defaults to
            True.
        position_embedding: str. "learned" (one row per token, class token included, N(0, 0.02)
            init), "sincos2d" (fixed 2-D sine-cosine; the class token gets zeros) or "none".
            Defaults to "learned".
        grid_size: (int, int) or None. Patch grid (rows, cols) the learned position embedding
            is stored for; None takes the grid of the build-time image size. Images of another
            size (sides multiples of the patch size, e.g. a model built with a dynamic image
            size) get the embedding resampled to their grid at call time. Defaults to None.
        interpolation: str. How the learned embedding is resampled at call time: "bilinear"
            (vit_jax), "bicubic" (timm) or "bicubic_hf" (Hugging Face); see
            `keras_vit.layers.grid_resampling`. Defaults to "bicubic".
        distillation_token: bool. Add DeiT's learnable distillation token after the class
            token. Defaults to False.
        num_register_tokens: int. Learnable register tokens after the class (and distillation)
            token (Darcet et al. 2024). Defaults to 0.
        prefix_position_embedding: bool. The learned or sincos2d embedding has rows for the
            class and distillation tokens; False adds it to the patch tokens only. Defaults to
            True.
        use_bias: bool. The patch projection has a bias (False for CLIP). Defaults to True.

    Example:

    >>> import numpy as np
    >>> tuple(PatchEncoder(16, 64)(np.zeros((2, 224, 224, 3), "float32")).shape)
    (2, 197, 64)
    """

    def __init__(
        self,
        patch_size,
        hidden_size,
        class_token=True,
        position_embedding="learned",
        grid_size=None,
        interpolation="bicubic",
        distillation_token=False,
        num_register_tokens=0,
        prefix_position_embedding=True,
        use_bias=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("patch_size", patch_size)
        check_positive_int("hidden_size", hidden_size)
        check_choice("position_embedding", position_embedding, POSITION_EMBEDDINGS)
        if position_embedding == "sincos2d":
            check_divisible("hidden_size", hidden_size, "4 (sincos2d position embedding)", 4)
        check_choice("interpolation", interpolation, INTERPOLATIONS)
        if grid_size is not None:
            grid_size = grid_pair(grid_size)
        self.patch_size = patch_size
        self.hidden_size = hidden_size
        self.class_token = bool(class_token)
        self.position_embedding = position_embedding
        self.grid_size = grid_size
        self.interpolation = interpolation
        if not isinstance(num_register_tokens, int) or isinstance(num_register_tokens, bool) or num_register_tokens < 0:
            raise ValueError(f"Invalid num_register_tokens={num_register_tokens!r}. Expected an integer >= 0.")
        self.distillation_token = bool(distillation_token)
        self.num_register_tokens = num_register_tokens
        self.prefix_position_embedding = bool(prefix_position_embedding)
        self.use_bias = bool(use_bias)

    @property
    def num_prefix_tokens(self):
        """Tokens before the patch tokens: class, distillation and register tokens."""
        return int(self.class_token) + int(self.distillation_token) + self.num_register_tokens

    @property
    def num_position_prefix_tokens(self):
        """Rows of the position embedding before the patch rows (class and distillation tokens)."""
        if not self.prefix_position_embedding:
            return 0
        return int(self.class_token) + int(self.distillation_token)

    def build(self, input_shape):
        _check_image_shape(input_shape, self.patch_size)
        height, width, channels = input_shape[1:]
        if channels is None:
            raise ValueError(f"The channel axis of the images must be known, got input_shape={tuple(input_shape)}.")
        p, d = self.patch_size, self.hidden_size
        self.kernel = self.add_weight(
            name="kernel", shape=(p, p, channels, d), initializer="lecun_normal"
        )
        self.bias = self.add_weight(name="bias", shape=(d,), initializer="zeros") if self.use_bias else None
        if self.class_token:
            self.cls = self.add_weight(name="class_token", shape=(1, 1, d), initializer="zeros")
        if self.distillation_token:
            self.dist = self.add_weight(name="distillation_token", shape=(1, 1, d), initializer="zeros")
        if self.num_register_tokens:
            self.registers = self.add_weight(
                name="register_tokens", shape=(1, self.num_register_tokens, d),
                initializer=keras.initializers.RandomNormal(stddev=1e-6),
            )
        if self.position_embedding == "learned":
            if self.grid_size is None:
                if height is None or width is None:
                    raise ValueError(
                        "A learned position embedding with a dynamic image size needs grid_size= "
                        f"(the stored grid), got grid_size=None and input_shape={tuple(input_shape)}."
                    )
                self.grid_size = (height // p, width // p)
            num_tokens = self.grid_size[0] * self.grid_size[1] + self.num_position_prefix_tokens
            self.pos_embedding = self.add_weight(
                name="position_embedding",
                shape=(1, num_tokens, d),
                initializer=keras.initializers.RandomNormal(stddev=0.02),
            )
        super().build(input_shape)

    def call(self, images):
        p, d = self.patch_size, self.hidden_size
        # With a dynamic image size the build-time check saw None: check the actual size.
        _check_image_shape(tuple(images.shape), p)
        x = ops.conv(images, self.kernel, strides=p, padding="valid")
        if self.use_bias:
            x = x + self.bias
        shape = ops.shape(x)
        rows, cols = shape[1], shape[2]
        x = ops.reshape(x, (-1, rows * cols, d))
        batch = ops.shape(x)[0]
        position_prefix = ([self.cls] if self.class_token else []) + ([self.dist] if self.distillation_token else [])
        if self.prefix_position_embedding:
            x = self._prepend(x, position_prefix)
        if self.position_embedding == "learned":
            x = x + ops.cast(self._position_embedding_for(images.shape[1:3], rows, cols), x.dtype)
        elif self.position_embedding == "sincos2d":
            pos = sincos2d_embedding(rows, cols, d, dtype=x.dtype)
            if self.num_position_prefix_tokens:
                pos = ops.concatenate([ops.zeros((self.num_position_prefix_tokens, d), x.dtype), pos], axis=0)
            x = x + pos[None]
        if not self.prefix_position_embedding:
            x = self._prepend(x, position_prefix)
        if self.num_register_tokens:
            # After the class and distillation tokens, before the patches; never position-embedded.
            first = int(self.class_token) + int(self.distillation_token)
            registers = ops.broadcast_to(ops.cast(self.registers, x.dtype), (batch, self.num_register_tokens, d))
            x = ops.concatenate([x[:, :first], registers, x[:, first:]], axis=1)
        return x

    def _prepend(self, x, tokens):
        if not tokens:
            return x
        batch, d = ops.shape(x)[0], self.hidden_size
        tokens = [ops.broadcast_to(ops.cast(token, x.dtype), (batch, 1, d)) for token in tokens]
        return ops.concatenate(tokens + [x], axis=1)

    def _position_embedding_for(self, static_size, rows, cols):
        p = self.patch_size
        if None not in static_size and (static_size[0] // p, static_size[1] // p) == self.grid_size:
            return self.pos_embedding
        # Another (or a not yet known) grid: resample the patch rows, keep the class-token row.
        table = ops.cast(self.pos_embedding, "float32")
        prefix = table[0, : self.num_position_prefix_tokens]
        grid = ops.reshape(table[0, self.num_position_prefix_tokens:], self.grid_size + (self.hidden_size,))
        grid = resample_grid(grid, rows, cols, self.interpolation)
        grid = ops.reshape(grid, (-1, self.hidden_size))
        return ops.concatenate([prefix, grid], axis=0)[None]

    def compute_output_shape(self, input_shape):
        _check_image_shape(input_shape, self.patch_size)
        batch, height, width, _ = input_shape
        p = self.patch_size
        tokens = None
        if height is not None and width is not None:
            tokens = (height // p) * (width // p) + self.num_prefix_tokens
        return (batch, tokens, self.hidden_size)

    def get_config(self):
        return {
            **super().get_config(),
            "patch_size": self.patch_size,
            "hidden_size": self.hidden_size,
            "class_token": self.class_token,
            "position_embedding": self.position_embedding,
            "grid_size": self.grid_size,
            "interpolation": self.interpolation,
            "distillation_token": self.distillation_token,
            "num_register_tokens": self.num_register_tokens,
            "prefix_position_embedding": self.prefix_position_embedding,
            "use_bias": self.use_bias,
        }


def grid_pair(grid_size):
    """`grid_size` (an int or (rows, cols), each >= 1) as a (rows, cols) tuple; ValueError naming it otherwise."""
    if isinstance(grid_size, int):
        grid_size = (grid_size, grid_size)
    try:
        pair = tuple(grid_size)
    except TypeError:
        pair = ()
    if len(pair) != 2:
        raise ValueError(f"Invalid grid_size={grid_size!r}. Expected (rows, cols).")
    grid_size = pair
    for axis_name, size in zip(("grid_size rows", "grid_size cols"), grid_size):
        check_positive_int(axis_name, size)
    return tuple(grid_size)


def sincos2d_embedding(rows, cols, width, temperature=10000.0, dtype="float32"):
    """Fixed 2-D sine-cosine position embedding of a rows x cols grid, shape (rows*cols, width).

    The first half of the channels encodes the column, the second half the row, each as sines
    then cosines over width/4 frequencies, as in MoCo v3 and big_vision.

    Example:

    >>> tuple(sincos2d_embedding(2, 3, 8).shape)
    (6, 8)
    """
    quarter = width // 4
    omega = np.arange(quarter, dtype="float32") / max(quarter - 1, 1)
    omega = ops.convert_to_tensor(1.0 / temperature**omega, "float32")
    y = ops.repeat(ops.arange(rows, dtype="float32"), cols)
    x = ops.tile(ops.arange(cols, dtype="float32"), [rows])
    x_angles = x[:, None] * omega[None]
    y_angles = y[:, None] * omega[None]
    pos = ops.concatenate(
        [ops.sin(x_angles), ops.cos(x_angles), ops.sin(y_angles), ops.cos(y_angles)], axis=1
    )
    return ops.cast(pos, dtype)
