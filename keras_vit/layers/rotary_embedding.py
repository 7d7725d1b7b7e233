"""RotaryPositionEmbedding: 2-D rotary position (RoPE) of the patch grid; DINOv3, EVA-02 and PE-Core are settings of it.

A rotary model adds no position vector to its tokens: each block's attention rotates the query
and key of every patch token by angles that grow with the patch's row and column, so that
their dot product depends on where the two patches are. The angles are computed from the grid
of the image at hand, so a rotary model takes any image size and has no table to resample.

One head's width w is split in two halves, the first for one image axis and the second for the
other (`axes`); each half holds w/4 frequencies 1 / period_k, period_k = theta^(4k / w). A
patch at coordinate c on an axis turns each pair of channels of that frequency by c / period_k
(times 2 pi on the "centered" grid). `ROPE_VARIANTS` names the settings of the families that
use it; a model states its settings as a dict of `ROPE_FIELDS` (`rope_settings`):

- grid: str. "centered": each patch's centre, (i + 0.5 + offset) / n, mapped to [-1, 1] per
  axis (n patches on it), angles 2 pi c / period (DINOv3: Hugging Face's
  `DINOv3ViTRopePositionEmbedding`, timm's `RotaryEmbeddingDinoV3`). "index": the patch index
  i + offset, rescaled by reference / n when `reference_grid` is set, angles c / period (EVA-02
  and PE-Core: timm's `RotaryEmbeddingCat` with in_pixels=False).
- theta: float. The base of the periods (100 DINOv3, 10000 EVA-02 and PE).
- offset: float. Added to every index (PE-Core's 1: its class token sits at 0, unrotated).
- reference_grid: (int, int) or None. The (rows, cols) an "index" grid's coordinates are
  rescaled to, whatever the image's grid (EVA-02's 16x16 pre-training grid, timm's
  `ref_feat_shape`); None keeps the indices.
- axes: str. Which axis the first half of each head's channels encodes: "yx" rows first
  (DINOv3, EVA-02), "xy" columns first (PE-Core, timm's grid_indexing="xy").
- layout: str. Which channels rotate together: "half" pairs channel j with j + w/2 (DINOv3,
  timm's rotate_half), "interleaved" pairs 2j with 2j + 1 (EVA-02, PE-Core).

The class, distillation and register tokens before the patches are not rotated.
"""

from __future__ import annotations

import math

import keras
import numpy as np
from keras import ops

from keras_vit._validation import check_choice, check_divisible, check_positive_int, check_positive_number, plain

ROPE_GRIDS = ("centered", "index")
ROPE_AXES = ("yx", "xy")
ROPE_LAYOUTS = ("half", "interleaved")
# Every setting of a rotary position embedding, in the order of RotaryPositionEmbedding's arguments.
ROPE_FIELDS = ("grid", "theta", "offset", "reference_grid", "axes", "layout")
# The families' settings, read from their reference code (see the module docstring). A row or a
# checkpoint states one of them, possibly with fields of its own (PE-Core's reference grid is the
# pre-training grid of each model: (24, 24) for the 384 px S/16, (14, 14) for the 224 px B/16).
ROPE_VARIANTS = {
    "dinov3": dict(grid="centered", theta=100.0, offset=0.0, reference_grid=None, axes="yx", layout="half"),
    "eva02": dict(grid="index", theta=10000.0, offset=0.0, reference_grid=(16, 16), axes="yx", layout="interleaved"),
    "pe": dict(grid="index", theta=10000.0, offset=1.0, reference_grid=None, axes="xy", layout="interleaved"),
}


def rope_settings(value, name="rope"):
    """The full settings dict (every field of `ROPE_FIELDS`) of `value`; None stays None.

    Args:
        value: None, str or dict. A name of `ROPE_VARIANTS`, or a dict of fields, with an
            optional "variant" naming the settings it starts from (else "dinov3").
        name: str. The argument's name, for messages. Defaults to "rope".

    Example:

    >>> rope_settings("dinov3")["theta"], rope_settings({"variant": "pe", "reference_grid": [24, 24]})["reference_grid"]
    (100.0, (24, 24))
    >>> rope_settings({"variant": "mixed"})
    Traceback (most recent call last):
    ...
    ValueError: Invalid rope variant='mixed'. Expected one of ['dinov3', 'eva02', 'pe'].
    """
    if value is None:
        return None
    if isinstance(value, str):
        value = {"variant": value}
    if not isinstance(value, dict):
        raise ValueError(
            f"Invalid {name}={value!r}. Expected None, a name of {sorted(ROPE_VARIANTS)} or a dict of "
            f"{list(ROPE_FIELDS)} (with an optional 'variant')."
        )
    unknown = sorted(set(value) - set(ROPE_FIELDS) - {"variant"})
    if unknown:
        raise ValueError(
            f"Invalid {name}: unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} in "
            f"{value!r}. Expected fields {list(ROPE_FIELDS)} and 'variant'."
        )
    variant = value.get("variant", "dinov3")
    if variant not in ROPE_VARIANTS:
        raise ValueError(f"Invalid {name} variant={variant!r}. Expected one of {sorted(ROPE_VARIANTS)}.")
    settings = {**ROPE_VARIANTS[variant], **{key: plain(v) for key, v in value.items() if key != "variant"}}
    check_choice(f"{name} grid", settings["grid"], ROPE_GRIDS)
    check_choice(f"{name} axes", settings["axes"], ROPE_AXES)
    check_choice(f"{name} layout", settings["layout"], ROPE_LAYOUTS)
    check_positive_number(f"{name} theta", settings["theta"])
    offset = settings["offset"]
    if not isinstance(offset, (int, float)) or isinstance(offset, bool) or not math.isfinite(offset):
        raise ValueError(f"Invalid {name} offset={offset!r}. Expected a finite number.")
    reference = settings["reference_grid"]
    if reference is not None:
        if not isinstance(reference, (tuple, list)) or len(reference) != 2:
            raise ValueError(f"Invalid {name} reference_grid={reference!r}. Expected None or (rows, cols).")
        for axis_name, size in zip(("rows", "cols"), reference):
            check_positive_int(f"{name} reference_grid {axis_name}", size)
        reference = tuple(reference)
    return {**settings, "theta": float(settings["theta"]), "offset": float(offset), "reference_grid": reference}


@keras.saving.register_keras_serializable(package="keras_vit")
class RotaryPositionEmbedding(keras.layers.Layer):
    """The rotation of each token for images (B, H, W, C): what the attention's `rope=` takes.

    Returns (table, rotation): table (2, T, w), the cosine and the signed sine of every token's
    angles (T = prefix tokens + patches, row by row; the prefix rows cos 1, sin 0), and rotation
    (w,) int32, the channel each channel pairs with. A query or key x (..., T, heads, w) rotates
    as x * cos + take(x, rotation) * sin (`apply_rotary`). Computed in float32 from the image's
    grid at call time. See the module docstring for the settings.

    Args:
        patch_size: int. Side of the patches, in pixels of the input.
        head_dim: int. Width w of one attention head; a multiple of 4.
        num_prefix_tokens: int. Tokens before the patches, left unrotated. Defaults to 0.
        grid: str. "centered" or "index". Defaults to "centered".
        theta: float. Base of the periods. Defaults to 100.
        offset: float. Added to every patch index. Defaults to 0.
        reference_grid: (int, int) or None. What an "index" grid is rescaled to. Defaults to None.
        axes: str. "yx" or "xy". Defaults to "yx".
        layout: str. "half" or "interleaved". Defaults to "half".

    Example:

    >>> import numpy as np
    >>> table, rotation = RotaryPositionEmbedding(4, 8, num_prefix_tokens=1)(np.zeros((1, 8, 12, 3), "float32"))
    >>> tuple(table.shape), np.asarray(rotation).tolist()
    ((2, 7, 8), [4, 5, 6, 7, 0, 1, 2, 3])
    """

    def __init__(self, patch_size, head_dim, num_prefix_tokens=0, grid="centered", theta=100.0, offset=0.0,
                 reference_grid=None, axes="yx", layout="half", **kwargs):
        super().__init__(**kwargs)
        check_positive_int("patch_size", patch_size)
        check_positive_int("head_dim", head_dim)
        check_divisible("head_dim", head_dim, "4 (2-D rotary position: two axes, pairs of channels)", 4)
        if not isinstance(num_prefix_tokens, int) or isinstance(num_prefix_tokens, bool) or num_prefix_tokens < 0:
            raise ValueError(f"Invalid num_prefix_tokens={num_prefix_tokens!r}. Expected an integer >= 0.")
        settings = rope_settings(dict(grid=grid, theta=theta, offset=offset, reference_grid=reference_grid, axes=axes,
                                      layout=layout))
        self.patch_size = patch_size
        self.head_dim = head_dim
        self.num_prefix_tokens = num_prefix_tokens
        for field in ROPE_FIELDS:
            setattr(self, field, settings[field])

    def call(self, images):
        p, w = self.patch_size, self.head_dim
        shape = ops.shape(images)
        rows, cols = shape[1] // p, shape[2] // p
        reference = self.reference_grid or (None, None)
        y, x = self._coordinates(rows, reference[0]), self._coordinates(cols, reference[1])
        # Row-major patches: the row coordinate repeats along a row, the column one cycles.
        y = ops.reshape(ops.broadcast_to(y[:, None], (rows, cols)), (-1,))
        x = ops.reshape(ops.broadcast_to(x[None, :], (rows, cols)), (-1,))
        per_axis = (y, x) if self.axes == "yx" else (x, y)
        periods = self.theta ** (np.arange(w // 4, dtype="float64") * 4.0 / w)
        scale = 2.0 * math.pi if self.grid == "centered" else 1.0
        frequencies = ops.convert_to_tensor((scale / periods).astype("float32"))
        angles = ops.concatenate([axis[:, None] * frequencies[None, :] for axis in per_axis], axis=1)  # (N, w/2)
        cos, sin = ops.cos(angles), ops.sin(angles)
        if self.layout == "half":
            cos, sin = ops.concatenate([cos, cos], axis=1), ops.concatenate([-sin, sin], axis=1)
        else:
            cos = ops.reshape(ops.stack([cos, cos], axis=-1), (-1, w))
            sin = ops.reshape(ops.stack([-sin, sin], axis=-1), (-1, w))
        if self.num_prefix_tokens:
            prefix = self.num_prefix_tokens
            cos = ops.concatenate([ops.ones((prefix, w), "float32"), cos], axis=0)
            sin = ops.concatenate([ops.zeros((prefix, w), "float32"), sin], axis=0)
        table = ops.cast(ops.stack([cos, sin]), self.compute_dtype)
        return table, ops.convert_to_tensor(_rotation(w, self.layout))

    def _coordinates(self, n, reference):
        """The coordinate of each of n patches on one axis (float32)."""
        size = ops.cast(n, "float32")
        index = ops.cast(ops.arange(n), "float32") + self.offset
        if self.grid == "centered":
            return 2.0 * ((index + 0.5) / size) - 1.0
        if reference is not None:
            return index / size * float(reference)
        return index

    def compute_output_spec(self, images):
        p = self.patch_size
        height, width = images.shape[1], images.shape[2]
        tokens = None if height is None or width is None else (height // p) * (width // p) + self.num_prefix_tokens
        return (keras.KerasTensor((2, tokens, self.head_dim), dtype=self.compute_dtype),
                keras.KerasTensor((self.head_dim,), dtype="int32"))

    def get_config(self):
        return {
            **super().get_config(),
            "patch_size": self.patch_size,
            "head_dim": self.head_dim,
            "num_prefix_tokens": self.num_prefix_tokens,
            **{field: getattr(self, field) for field in ROPE_FIELDS},
        }


def _rotation(width, layout):
    """The channel each channel pairs with: j <-> j + w/2 ("half"), 2j <-> 2j + 1 ("interleaved")."""
    index = np.arange(width)
    if layout == "half":
        return ((index + width // 2) % width).astype("int32")
    return (index ^ 1).astype("int32")


def apply_rotary(x, rope):
    """Rotates queries or keys x (B, T, heads, w) by `rope` = (table, rotation) of `RotaryPositionEmbedding`.

    Example:

    >>> import numpy as np
    >>> rope = RotaryPositionEmbedding(4, 8)(np.zeros((1, 8, 8, 3), "float32"))
    >>> x = np.ones((1, 4, 2, 8), "float32")
    >>> rotated = np.asarray(apply_rotary(x, rope))
    >>> bool(np.allclose(np.linalg.norm(rotated, axis=-1), np.linalg.norm(x, axis=-1)))  # a rotation keeps lengths
    True
    """
    table, rotation = rope
    x = ops.convert_to_tensor(x)
    table = ops.cast(table, x.dtype)
    cos, sin = table[0][:, None, :], table[1][:, None, :]
    return x * cos + ops.take(x, rotation, axis=-1) * sin
