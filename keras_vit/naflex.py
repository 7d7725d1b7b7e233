"""SigLIP 2 NaFlex inputs: images of any size and aspect as patch sequences under a patch budget.

A NaFlex model (`keras_vit.ViT(..., naflex=True)`, Hugging Face model_type "siglip2") takes no
images but, for each image, its own grid of patches: the image is resized, its aspect kept, to
the largest size whose sides are multiples of the patch size and whose patches fit
`max_num_patches` (`naflex_image_size`), cut into rows x cols patches and padded to
`max_num_patches`. `naflex_inputs` does all of it as Hugging Face's `Siglip2ImageProcessor`
does: the same target size, the same antialiased bilinear resize (a uint8 image: PIL's
`Image.resize`, exactly, as `Siglip2ImageProcessorPil` calls it; torchvision's uint8 kernel, which
the default backend calls where torchvision is installed, rounds its 16-bit weights otherwise and
puts a pixel here and there one level apart), the same patch order.

Example:

>>> import numpy as np
>>> naflex_image_size(480, 640, patch_size=16, max_num_patches=256)
(224, 288)
>>> inputs, mask = naflex_inputs(np.zeros((480, 640, 3), "uint8"), patch_size=16, max_num_patches=256)
>>> inputs["patches"].shape, inputs["spatial_shapes"].tolist(), int(mask.sum())
((1, 256, 768), [[14, 18]], 252)
"""

from __future__ import annotations

import os

import numpy as np

from keras_vit._validation import check_positive_int

# The reference's binary search for the scale (get_image_size_for_max_num_patches): its range and
# its stopping width. The width halves each step, from 100 to under 1e-5 in 24 steps whichever way
# each step goes (after 23 it is still 1.2e-5), so the search is a fixed number of steps.
SEARCH_EPS = 1e-5
SCALE_RANGE = (SEARCH_EPS / 10, 100.0)
SEARCH_STEPS = 24
DEFAULT_MAX_NUM_PATCHES = 256  # Siglip2ImageProcessor's
NAFLEX_FILTER = "bilinear"  # Siglip2ImageProcessor's resample (PIL's BILINEAR: antialiased when it shrinks)


def is_naflex(model) -> bool:
    """True for a SigLIP 2 NaFlex model (`naflex=True`): it takes patch sequences, not images.

    Example:

    >>> import keras_vit
    >>> is_naflex(keras_vit.ViT("tiny_siglip2")), is_naflex(keras_vit.ViT("tiny"))
    (True, False)
    """
    return bool((getattr(model, "vit_config", None) or {}).get("naflex"))


def fitted_size(height, width, patch_size, max_num_patches, xp=np):
    """The reference's target (height, width) in pixels, in float64 arrays of the array namespace `xp`.

    One function for NumPy (`naflex_image_size`) and for TensorFlow's NumPy API (the serving
    signature of `keras_vit.export`), with the reference's operations in its order, so both
    give its sizes exactly.

    Args:
        height: float64 scalar of `xp`. Image height in pixels.
        width: float64 scalar of `xp`. Image width in pixels.
        patch_size: int. Patch side in pixels.
        max_num_patches: int. The patch budget.
        xp: module. `numpy` or `tensorflow.experimental.numpy`. Defaults to numpy.

    Example:

    >>> [int(side) for side in fitted_size(np.float64(480), np.float64(640), 16, 256)]
    [224, 288]
    """
    def scaled(scale, size):
        return xp.maximum(xp.ceil(size * scale / patch_size) * patch_size, patch_size)

    low, high = SCALE_RANGE
    for _ in range(SEARCH_STEPS):
        scale = (low + high) / 2
        fits = (scaled(scale, height) / patch_size) * (scaled(scale, width) / patch_size) <= max_num_patches
        low, high = xp.where(fits, scale, low), xp.where(fits, high, scale)
    return scaled(low, height), scaled(low, width)


def naflex_image_size(height, width, patch_size, max_num_patches=DEFAULT_MAX_NUM_PATCHES):
    """The (height, width) NaFlex resizes an image of `height` x `width` pixels to.

    The largest size of the image's aspect (within the reference's search) whose sides are
    multiples of `patch_size` (at least one patch each: an image smaller than a patch is
    enlarged to one, as the reference does) and whose patches number at most
    `max_num_patches`: Hugging Face's `get_image_size_for_max_num_patches`, exactly.

    Args:
        height: int. Image height in pixels, >= 1.
        width: int. Image width in pixels, >= 1.
        patch_size: int. Patch side in pixels.
        max_num_patches: int. The patch budget. Defaults to 256 (Siglip2ImageProcessor's).

    Returns:
        (int, int): the target height and width in pixels.

    Raises:
        ValueError: an empty image, or one so elongated that even the reference's smallest
            scale needs more than `max_num_patches` patches (the reference's model then
            refuses it: "Resized positional embeddings exceed max_length").

    Example:

    >>> naflex_image_size(3, 5, patch_size=4, max_num_patches=16)  # smaller than a patch: enlarged
    (12, 20)
    """
    for name, value in (("image height", height), ("image width", width), ("patch_size", patch_size),
                        ("max_num_patches", max_num_patches)):
        check_positive_int(name, value)
    target = tuple(int(side) for side in fitted_size(np.float64(height), np.float64(width), patch_size,
                                                     max_num_patches))
    grid = (target[0] // patch_size, target[1] // patch_size)
    if grid[0] * grid[1] > max_num_patches:
        raise ValueError(
            f"Invalid image of {height}x{width} pixels for max_num_patches={max_num_patches}: its aspect needs a "
            f"{grid[0]}x{grid[1]} grid of {patch_size}-pixel patches ({grid[0] * grid[1]}) even at the smallest "
            "scale NaFlex searches. Crop it or raise max_num_patches."
        )
    return target


def naflex_inputs(images, patch_size=None, max_num_patches=None, scaling="auto", *, weights=None, model=None):
    """A NaFlex model's input from images of any sizes: (inputs, padding_mask).

    Each image is resized to `naflex_image_size` with an antialiased bilinear filter
    (half-pixel centres, a triangle widened by the shrink factor: torchvision's and PIL's, which
    the reference uses; see `resize_antialiased`), its pixels scaled by `scaling`, cut into its grid of patches, each flattened in (row, column,
    channel) order, and padded with zeros to `max_num_patches`.

    Args:
        images: array (height, width, channels) of pixels in [0, 255] (uint8 or float), a
            batch of such arrays of one size (4-D), or a sequence of them of any sizes.
        patch_size: int or None. The model's patch side in pixels; None takes the one the
            `weights` processor states (required without `weights`). Defaults to None.
        max_num_patches: int or None. The patch budget: the length of every patch sequence.
            None takes the one the `weights` processor states, else 256
            (Siglip2ImageProcessor's default). Defaults to None.
        scaling: str or None. A key of `keras_vit.configs.SCALINGS` ("symmetric", [-1, 1], is
            SigLIP 2's), None for the pixels as they are, or "auto": the one the `weights`
            processor states, else "symmetric". Defaults to "auto".
        weights: str, `keras_vit.weights.Checkpoint` or None. The checkpoint the model was
            loaded from (a Hugging Face folder, Hub id or name): its `preprocessor_config.json`
            gives `max_num_patches`, `patch_size` and the scaling; a value passed that
            contradicts it is refused, and one it lacks must be passed. The images' channels
            are checked against the ones it states. Defaults to None.
        model: keras.Model or None. The NaFlex model the inputs are for: its patch size fills
            `patch_size` (one that contradicts it is refused) and the images' channels are
            checked against its. Defaults to None.

    Raises:
        ValueError: images whose channel count is not the one `model` or `weights` takes
            (naming both), besides the bad values of each argument.

    Returns:
        (dict, array): inputs {"patches": (B, max_num_patches, patch_size**2 * channels)
        float32, "spatial_shapes": (B, 2) int32, each image's (rows, cols)}, what the model
        takes; padding_mask (B, max_num_patches) bool, True for the real patches (the
        tokens of `pooling=None` worth reading).

    Example:

    >>> import numpy as np
    >>> images = [np.zeros((30, 50, 3), "uint8"), np.zeros((64, 16, 3), "uint8")]
    >>> inputs, mask = naflex_inputs(images, patch_size=4, max_num_patches=24)
    >>> inputs["spatial_shapes"].tolist(), mask.sum(axis=1).tolist()
    ([[4, 6], [8, 2]], [24, 16])
    """
    from keras_vit.applications import preprocess_input

    takes = []  # (channels, what states it) of the model and the checkpoint
    if model is not None:
        config = _naflex_config(model)
        if patch_size is None:
            patch_size = config["patch_size"]
        elif patch_size != config["patch_size"]:
            raise ValueError(f"Contradicting patch_size={patch_size!r} and model={model.name!r}, whose patch_size is "
                             f"{config['patch_size']}. Leave patch_size out to take the model's.")
        takes.append((config["channels"], f"model={model.name!r}", "its config"))
    record = _checkpoint_preprocessing(weights) if weights is not None else None
    patch_size, max_num_patches, scaling = _processor_settings(weights, record, patch_size, max_num_patches, scaling)
    if weights is not None:
        stated = _checkpoint_channels(weights, record)
        if stated is not None:
            takes.append((stated[0], f"weights={_name(weights)!r}", stated[1]))
    images = _image_list(images)
    channels = {image.shape[-1] for image in images}
    if len(channels) > 1:
        raise ValueError(f"Invalid images: their channels differ ({sorted(channels)}); a batch has one channel count.")
    for expected, what, source in takes:
        _check_channels(images[0].shape[-1], expected, what, source)
    batch, depth = len(images), patch_size * patch_size * images[0].shape[-1]
    patches = np.zeros((batch, max_num_patches, depth), "float32")
    shapes = np.zeros((batch, 2), "int32")
    for i, image in enumerate(images):
        height, width = naflex_image_size(image.shape[0], image.shape[1], patch_size, max_num_patches)
        resized = resize_antialiased(image, height, width)
        if scaling is not None:
            resized = preprocess_input(resized, mode=scaling)
        rows, cols = height // patch_size, width // patch_size
        cut = resized.reshape(rows, patch_size, cols, patch_size, -1).transpose(0, 2, 1, 3, 4)
        patches[i, : rows * cols] = cut.reshape(rows * cols, depth)
        shapes[i] = rows, cols
    mask = np.arange(max_num_patches)[None] < (shapes[:, :1] * shapes[:, 1:])
    return {"patches": patches, "spatial_shapes": shapes}, mask


def processor_settings(weights, patch_size=None, max_num_patches=None, scaling="auto", *, with_scaling=True):
    """(patch_size, max_num_patches, scaling) of a NaFlex processor: as given, else as the `weights` files state.

    Args:
        weights: str, `keras_vit.weights.Checkpoint` or None. See `naflex_inputs`.
        patch_size: int or None. See `naflex_inputs`. Defaults to None.
        max_num_patches: int or None. See `naflex_inputs`. Defaults to None.
        scaling: str or None. See `naflex_inputs`. Defaults to "auto".
        with_scaling: bool. False for a caller that scales nothing (a file on patches already
            scaled): the scaling is neither read nor checked, and None is returned for it.
            Defaults to True.

    Raises:
        ValueError: a value given that contradicts the file (naming both), or one neither
            given nor stated (naming the argument to pass).

    Example:

    >>> processor_settings(None, 16)
    (16, 256, 'symmetric')
    """
    record = _checkpoint_preprocessing(weights) if weights is not None else None
    return _processor_settings(weights, record, patch_size, max_num_patches, scaling, with_scaling=with_scaling)


def _processor_settings(weights, record, patch_size, max_num_patches, scaling, *, with_scaling=True):
    """`processor_settings` with the checkpoint's `Preprocessing` (or None) already read."""
    unset = {"patch_size": None, "max_num_patches": None, "scaling": "auto"}
    given = {"patch_size": patch_size, "max_num_patches": max_num_patches}
    if with_scaling:
        given["scaling"] = scaling
    if weights is None:
        stated, where = {"max_num_patches": DEFAULT_MAX_NUM_PATCHES, "scaling": "symmetric"}, None
    else:
        stated = {} if record is None else {key: getattr(record, key) for key in given}
        stated = {key: value for key, value in stated.items() if value is not None}
        where = f"weights={_name(weights)!r} ({'its' if record is not None else 'it has no'} preprocessor_config.json)"
    settings = {}
    for key, value in given.items():
        if value == unset[key]:
            if key not in stated:
                stating = f"{where} states none" if weights is not None else "no weights= to read it from"
                raise ValueError(f"Missing {key}: {stating}. Pass {key}= ({_WHAT[key]}).")
            value = stated[key]
        elif key in stated and weights is not None and value != stated[key]:
            raise ValueError(f"Contradicting {key}={value!r} and {where}, which states {key}={stated[key]!r}. "
                             f"Leave {key} out to take the checkpoint's.")
        settings[key] = value
    check_positive_int("patch_size", settings["patch_size"])
    check_positive_int("max_num_patches", settings["max_num_patches"])
    return settings["patch_size"], settings["max_num_patches"], settings.get("scaling")


_WHAT = {"patch_size": "the model's patch side in pixels", "max_num_patches": "the patch budget, e.g. 256",
         "scaling": "a key of keras_vit.configs.SCALINGS, or None for raw pixels"}


def _checkpoint_preprocessing(weights):
    """The `Preprocessing` of a checkpoint: a local folder's files read alone, anything else through `Checkpoint`."""
    from keras_vit.weights import Checkpoint
    from keras_vit.weights.preprocessing import read_preprocessing

    if isinstance(weights, Checkpoint):
        return weights.preprocessing
    if isinstance(weights, (str, os.PathLike)) and os.path.exists(weights):
        return read_preprocessing(os.fspath(weights), "hf")  # NaFlex checkpoints are Hugging Face's alone
    if not isinstance(weights, (str, os.PathLike)):
        raise ValueError(f"Invalid weights={weights!r}: expected a checkpoint folder, Hub id or name, or a "
                         "keras_vit.weights.Checkpoint.")
    return Checkpoint(weights).preprocessing


def _name(weights):
    return getattr(weights, "source", None) or str(weights)


def _naflex_config(model):
    """The `vit_config` of a NaFlex model; ValueError naming `model` for any other."""
    if not is_naflex(model):
        raise ValueError(f"Invalid model={getattr(model, 'name', model)!r}: it takes images, not NaFlex patch "
                         "sequences (a model built with naflex=True takes them).")
    return model.vit_config


def _checkpoint_channels(weights, record):
    """(channels, where it is stated) of a checkpoint, or None when it states none.

    A `Checkpoint` read already states them in its architecture. Of a folder, only its
    processor is read (the weights may be gigabytes): the channels it normalizes, when its mean
    has one value per channel.
    """
    from keras_vit.weights import Checkpoint

    if isinstance(weights, Checkpoint) and weights.architecture.get("channels"):
        return weights.architecture["channels"], "its architecture"
    if record is not None and len(record.mean) > 1:
        return len(record.mean), f"its processor normalizes {len(record.mean)} channels"
    return None


def _check_channels(found, expected, what, source):
    if found == expected:
        return
    fix = {(1, 3): "a grey image becomes 3 equal channels with np.repeat(image, 3, axis=-1)",
           (3, 1): "a colour image becomes grey with image.mean(axis=-1, keepdims=True)"}.get(
        (found, expected), f"convert them to {expected}")
    raise ValueError(f"Invalid images: {found} channel{'s' if found != 1 else ''} each, but {what} takes {expected} "
                     f"({source}). Pass images of {expected} channels: {fix}.")


def resize_antialiased(image, height, width):
    """Resizes an image (H, W, C) to (height, width) with the antialiased bilinear filter; uint8 stays uint8.

    The filter of PIL's BILINEAR and of torch's `interpolate(mode="bilinear", antialias=True)`
    ("bilinear_antialias" of `keras_vit.layers.grid_resampling`). A float image is resized in
    one float pass; a uint8 image exactly as PIL's `Image.resize` does it
    (`keras_vit.image_processor.pil_resize`: fixed-point weights, each pass rounded to uint8).

    Example:

    >>> resize_antialiased(np.full((4, 6, 3), 200, "uint8"), 2, 3)[0, 0].tolist()
    [200, 200, 200]
    """
    from keras_vit.image_processor import pil_resize
    from keras_vit.layers.grid_resampling import NUMPY_OPS, interpolation_matrix

    image = np.asarray(image)
    if image.dtype == np.uint8:
        sizes = (np.float64(side) for side in (image.shape[0], image.shape[1], height, width))
        return pil_resize(image.astype("float64"), *sizes, NAFLEX_FILTER).astype("uint8")
    rows, cols = (interpolation_matrix(old, new, "bilinear_antialias", "float64", xp=NUMPY_OPS)
                  for old, new in ((image.shape[0], height), (image.shape[1], width)))
    resized = np.einsum("ih,hwc,jw->ijc", rows, image.astype("float64"), cols)
    return resized.astype(image.dtype if image.dtype.kind == "f" else "float32")


def _image_list(images):
    """`images` as a list of (H, W, C) arrays; ValueError naming what is wrong."""
    if isinstance(images, np.ndarray) and images.ndim == 4:
        images = list(images)
    elif isinstance(images, np.ndarray) or not isinstance(images, (list, tuple)):
        images = [images]
    if not images:
        raise ValueError("Invalid images=[]: expected at least one image.")
    arrays = []
    for i, image in enumerate(images):
        array = np.asarray(image)
        if array.ndim != 3 or array.dtype.kind not in "uif":
            raise ValueError(
                f"Invalid image {i} of shape {array.shape} and dtype {array.dtype}: expected pixels (height, width, "
                "channels), channels last."
            )
        if 0 in array.shape:
            raise ValueError(f"Invalid image {i} of shape {array.shape}: it has no pixels.")
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            raise ValueError(f"Invalid image {i}: it has NaN or infinite pixels.")
        arrays.append(array)
    return arrays
