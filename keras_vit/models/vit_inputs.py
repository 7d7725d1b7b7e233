"""What a ViT takes: images (checked when built and when called) or NaFlex's patch sequences.

An image model's input is `keras.Input` of (height, width, channels), its sides multiples of
the pixels a token covers; a free side is checked at call time (`checked_image_sides`). A
NaFlex model takes a dict of padded patch sequences and each image's patch grid
(`naflex_input_spec`; `keras_vit.naflex.naflex_inputs` makes them from images).

Example:

>>> make_input((32, 32, 3), None, 4).shape
(None, 32, 32, 3)
>>> check_token_count((2048, 2048), 4)
Traceback (most recent call last):
...
ValueError: Invalid image size 2048x2048 with 4-pixel patches: 262,144 patch tokens, more than MAX_PATCH_TOKENS=65,536 (a 256x256 grid; attention over them needs 256 GiB per head and image). Pass a smaller image_size or a larger patch_size.
"""

from __future__ import annotations

import keras
import numpy as np

from keras_vit._validation import check_divisible, check_positive_int


# Most patch tokens a model may have: 4x a 1024 px image at patch 8, beyond every checkpoint's grid.
MAX_PATCH_TOKENS = 256 * 256


def check_token_count(sides, token_pixels):
    """Refuses an image size whose patch tokens exceed MAX_PATCH_TOKENS (`token_pixels`: pixels per token side)."""
    if None in sides:
        return
    tokens = (sides[0] // token_pixels) * (sides[1] // token_pixels)
    if tokens > MAX_PATCH_TOKENS:
        # Past this the model builds, then one image's attention matrix alone runs the machine
        # out of memory (or the position table does, for a giant grid), far from any message.
        raise ValueError(
            f"Invalid image size {sides[0]}x{sides[1]} with {token_pixels}-pixel patches: {tokens:,} patch tokens, "
            f"more than MAX_PATCH_TOKENS={MAX_PATCH_TOKENS:,} (a 256x256 grid; attention over them needs "
            f"{tokens**2 * 4 / 2**30:,.0f} GiB per head and image). Pass a smaller image_size or a larger patch_size."
        )


def make_input(input_shape, input_tensor, pixel_patch):
    """The model's image input: `input_tensor` checked against `input_shape`, or a new `keras.Input` of it."""
    input_shape = tuple(input_shape)
    if len(input_shape) != 3:
        raise ValueError(f"Invalid input_shape={input_shape!r}. Expected (height, width, channels).")
    if input_tensor is not None:
        tensor_shape = tuple(input_tensor.shape[1:])
        if len(tensor_shape) != 3:
            raise ValueError(
                f"input_tensor must be images (batch, height, width, channels), got shape {tuple(input_tensor.shape)}."
            )
        if tensor_shape[-1] != input_shape[-1] and None not in (tensor_shape[-1], input_shape[-1]):
            raise ValueError(
                f"Channels mismatch: input_tensor has {tensor_shape[-1]} channels but "
                f"input_shape={input_shape!r} expects {input_shape[-1]}."
            )
        input_shape = tensor_shape
    for axis_name, size in (("image height", input_shape[0]), ("image width", input_shape[1])):
        if size is not None:
            check_positive_int(axis_name, size)
            check_divisible(axis_name, size, "patch_size", pixel_patch)
    if input_tensor is not None:
        return input_tensor
    return keras.Input(shape=input_shape, name="images")


def checked_image_sides(inputs, expected, multiple, model_name):
    """`inputs` with each free side of `expected` (a model's input shape) checked by `checked_image_side`.

    A free image size would otherwise crop the image (or drop it, at 0 px) in silence. No
    `multiple` (a custom backbone) checks nothing.
    """
    for axis, side_name in ((1, "height"), (2, "width")):
        if expected[axis] is None and multiple:
            inputs = checked_image_side(inputs, axis, side_name, multiple, model_name)
    return inputs


def checked_image_side(inputs, axis, side_name, multiple, model_name):
    """Refuses a free-size side that is not a positive multiple of `multiple`: now if known, else at run time."""
    side = inputs.shape[axis]
    message = (
        # No quotes: TensorFlow's assertion message would print them escaped.
        f"Invalid image {side_name}={{}} for model {model_name} (images of shape {{}}): with a free image "
        f"size, height and width must be positive multiples of patch_size={multiple}."
    )
    if side is not None:
        if side < 1 or side % multiple:
            raise ValueError(message.format(side, tuple(inputs.shape)))
        return inputs
    # Unknown while tracing, which only TensorFlow does (a tf.function with None sides): the graph checks it.
    from keras_vit.backends import tensorflow

    shape = keras.ops.shape(inputs)
    fits = keras.ops.logical_and(shape[axis] > 0, keras.ops.equal(shape[axis] % multiple, 0))
    inputs = tensorflow.checked(inputs, fits, message, shape[axis], keras.ops.convert_to_tensor(shape))
    # XLA drops assertions; it cannot drop a reshape whose size differs from the input's
    # unless the side is a positive multiple (the side rounded down, but at least one patch).
    side_fitted = keras.ops.maximum(shape[axis] // multiple, 1) * multiple
    target = [side_fitted if i == axis else shape[i] for i in range(4)]
    return keras.ops.reshape(inputs, keras.ops.stack(target))


def naflex_input_spec(config):
    """{input name: (shape without the batch, dtype)} of a NaFlex model's dict input.

    "patches": (N, P*P*C) float32, the patches of each image flattened in (row, column,
    channel) order and padded to N (any N); "spatial_shapes": (2,) int32, each image's patch
    grid (rows, cols); rows * cols of its first patches are real, the rest padding.

    Example:

    >>> from keras_vit.models.vit_config import resolve_config
    >>> naflex_input_spec(resolve_config("tiny_siglip2"))
    {'patches': ((None, 48), 'float32'), 'spatial_shapes': ((2,), 'int32')}
    """
    depth = config["patch_size"] ** 2 * config["channels"]
    return {"patches": ((None, depth), "float32"), "spatial_shapes": ((2,), "int32")}


def naflex_keras_inputs(config):
    """New `keras.Input`s of a NaFlex model (`naflex_input_spec`)."""
    return {key: keras.Input(shape=shape, dtype=dtype, name=key) for key, (shape, dtype) in naflex_input_spec(config).items()}


def check_spatial_shapes(name, inputs):
    """Refuses NaFlex grids that are empty or hold more patches than the sequences, where the values are known.

    In a traced call (a compiled function, an export) they are not, and are not checked. (Images
    instead of the dict Keras refuses itself, naming the two keys.)
    """
    patches, shapes = inputs.get("patches"), inputs.get("spatial_shapes")
    if patches is None or shapes is None:
        return
    try:
        shapes = np.asarray(keras.ops.convert_to_numpy(shapes))
    except Exception:  # a symbolic tensor of a traced call: nothing to check now
        return
    length = patches.shape[1]
    if shapes.ndim != 2 or shapes.shape[-1] != 2:
        raise ValueError(f"Invalid spatial_shapes of shape {shapes.shape} for model {name}: expected (batch, 2), "
                         "each image's patch grid (rows, cols).")
    for i, (rows, cols) in enumerate(shapes.tolist()):
        if rows < 1 or cols < 1:
            raise ValueError(f"Invalid spatial_shapes[{i}]=({rows}, {cols}) for model {name}: an image needs a "
                             "patch grid of at least 1x1.")
        if length is not None and rows * cols > length:
            raise ValueError(
                f"Invalid spatial_shapes[{i}]=({rows}, {cols}) for model {name}: {rows * cols} patches, over the "
                f"{length} of the patch sequences (the patch budget). keras_vit.naflex.naflex_inputs resizes "
                "images to fit max_num_patches."
            )
