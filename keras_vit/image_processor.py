"""A checkpoint's own image processor: how a photo of any size becomes the model's square (resize, centre crop).

A processor is a small JSON dict, read from the checkpoint's files by
`keras_vit.weights.preprocessing` and kept in a model's `vit_config["image_processor"]`:

- "resize": "shortest_edge" (the short side to `size`, the aspect kept: CLIP's processor, timm's
  "center" crop mode), "squash" (both sides to `size`: SigLIP's processor, timm's "squash") or
  "keep_ratio" (timm's `ResizeKeepRatio`: the side that fits first to `size`, the aspect kept).
- "size": int (shortest edge) or [height, width]: the resize target for an output of `output`.
- "crop": [height, width] or None: the centre crop after the resize.
- "output": [height, width]: the size the processor gives (the crop, else the resize), for which
  `size` holds. A model of another size scales `size` by timm's rule, floor(side / crop_pct),
  with `crop_pct` (timm's) or output / size (Hugging Face's).
- "crop_pct": float or None. timm's `crop_pct`, from which it derives `size` for any output.
- "interpolation": a PIL filter: "nearest", "box", "bilinear", "hamming", "bicubic", "lanczos".
- "crop_offset": "floor" (transformers' `center_crop`: (side - crop) // 2) or "round"
  (torchvision's, which timm uses: round((side - crop) / 2), halves to even).
- "source": the file it was read from, for messages.

The resize is PIL's `Image.resize` (what transformers' PIL processors and timm's eval transforms
call), reproduced exactly: PIL's filter weights over PIL's window, turned into its 22-bit
fixed-point coefficients, one side resized and rounded to uint8, then the other, in Pillow's
order (`vertical_first`: the height first where it shrinks by more than twice the width's
pixels, Pillow 13's Resample.c; older Pillow always went width first). The
arithmetic is written once for NumPy and TensorFlow's NumPy API (`xp`), so the SavedModel's
`serve_bytes` signature runs the same steps in its graph (`keras_vit.data.processor_graph`).

Example:

>>> import numpy as np
>>> clip = {"resize": "shortest_edge", "size": 224, "crop": [224, 224], "output": [224, 224], "crop_pct": None,
...         "interpolation": "bicubic", "crop_offset": "floor", "source": "preprocessor_config.json"}
>>> geometry(clip, 480, 640, (224, 224))
((224, 298), (0, 37))
>>> process_image(np.zeros((480, 640, 3), "uint8"), clip, (224, 224)).shape
(224, 224, 3)
"""

from __future__ import annotations

import math

import numpy as np

RESIZES = ("shortest_edge", "squash", "keep_ratio")
CROP_OFFSETS = ("floor", "round")
# PIL's filters (Resample.c) and their supports, in input pixels at scale 1.
FILTER_SUPPORT = {"nearest": 0.0, "box": 0.5, "bilinear": 1.0, "hamming": 1.0, "bicubic": 2.0, "lanczos": 3.0}
FILTERS = tuple(FILTER_SUPPORT)
# PIL's fixed-point coefficients of 8-bit images: 32 - 8 - 2 bits.
PRECISION_BITS = 22


def processor_record(resize, size, crop, interpolation, crop_offset, source, crop_pct=None):
    """A processor dict (see the module docstring), checked; ValueError naming the field.

    Example:

    >>> processor_record("squash", [224, 224], None, "bicubic", "floor", "x")["output"]
    [224, 224]
    """
    if resize not in RESIZES:
        raise ValueError(f"{source}: resize={resize!r}; expected one of {list(RESIZES)}.")
    if interpolation not in FILTERS:
        raise ValueError(f"{source}: interpolation={interpolation!r}; expected one of PIL's filters {list(FILTERS)}.")
    if crop_offset not in CROP_OFFSETS:
        raise ValueError(f"{source}: crop_offset={crop_offset!r}; expected one of {list(CROP_OFFSETS)}.")
    size = int(size) if resize == "shortest_edge" else [int(side) for side in size]
    crop = None if crop is None else [int(side) for side in crop]
    output = crop if crop is not None else size
    if resize == "shortest_edge" and crop is None:
        raise ValueError(f"{source}: a shortest-edge resize without a centre crop gives images of every aspect; "
                         "a model of one image size needs a crop (do_center_crop and crop_size).")
    if crop is not None and resize != "keep_ratio" and min(crop) > min([size] if resize == "shortest_edge" else size):
        raise ValueError(f"{source}: crop {crop} is larger than the resize {size}; expected a crop inside the resized image.")
    return {"resize": resize, "size": size, "crop": crop, "output": list(output),
            "crop_pct": None if crop_pct is None else float(crop_pct), "interpolation": interpolation,
            "crop_offset": crop_offset, "source": str(source)}


def model_processor(model):
    """The checkpoint's processor a model of one image size keeps (`vit_config["image_processor"]`), or None.

    None also for a model without a `vit_config` or of another input (NaFlex patches, a dynamic
    size): its images are resized to the model's size the ordinary way.

    Example:

    >>> import keras_vit
    >>> model_processor(keras_vit.ViT("tiny", num_classes=3)) is None
    True
    """
    processor = (getattr(model, "vit_config", None) or {}).get("image_processor")
    inputs = getattr(model, "inputs", None) or ()
    if processor is None or len(inputs) != 1 or len(inputs[0].shape) != 4 or None in inputs[0].shape[1:3]:
        return None
    return processor


def sizes_for(processor, model_size):
    """(resize size, crop) of `processor` for a model taking `model_size` (height, width).

    As stated where the model takes the processor's output size; else the resize scaled as timm
    scales it, floor(side / crop_pct), and the crop made the model's size.

    Example:

    >>> timm = processor_record("shortest_edge", 248, [224, 224], "bicubic", "round", "x", crop_pct=0.9)
    >>> sizes_for(timm, (224, 224)), sizes_for(timm, (256, 256))
    ((248, [224, 224]), (284, [256, 256]))
    """
    model_size = [int(side) for side in model_size]
    if model_size == processor["output"]:
        return processor["size"], processor["crop"]
    if processor["crop"] is None:
        return (model_size, None) if processor["resize"] == "squash" else (min(model_size), model_size)
    if processor["crop_pct"] is not None:
        scaled = [math.floor(side / processor["crop_pct"]) for side in model_size]
    else:  # Hugging Face states sizes, not a fraction: the same ratio, in whole pixels
        stated = processor["size"] if isinstance(processor["size"], list) else [processor["size"]] * 2
        scaled = [side * want // got for side, want, got in zip(model_size, stated, processor["crop"])]
    return (min(scaled) if processor["resize"] == "shortest_edge" else scaled), model_size


def geometry(processor, height, width, model_size, xp=np):
    """((resized height, resized width), (top, left)) of an image of `height` x `width` pixels.

    The crop of the model's size starts at (top, left) of the resized image. Written in the
    array namespace `xp` (NumPy, or TensorFlow's NumPy API in a graph on float64 scalars), in
    the operations of the references: transformers' and torchvision's shortest-edge size
    int(short * long / short_side), timm's ResizeKeepRatio round(side / ratio).

    Example:

    >>> squash = processor_record("squash", [16, 16], None, "bilinear", "floor", "x")
    >>> geometry(squash, 30, 50, (16, 16))
    ((16, 16), (0, 0))
    """
    size, crop = sizes_for(processor, model_size)
    crop = crop or list(model_size)
    height, width = xp.asarray(height, "float64"), xp.asarray(width, "float64")
    if processor["resize"] == "squash":
        new_h, new_w = xp.asarray(float(size[0]), "float64"), xp.asarray(float(size[1]), "float64")
    elif processor["resize"] == "shortest_edge":
        short, long = xp.minimum(height, width), xp.maximum(height, width)
        new_long = xp.floor(size * long / short)
        new_h = xp.where(width <= height, new_long, float(size))
        new_w = xp.where(width <= height, float(size), new_long)
    else:
        ratio = xp.minimum(height / size[0], width / size[1])
        new_h, new_w = xp.round(height / ratio), xp.round(width / ratio)
    if processor["crop_offset"] == "floor":
        top, left = xp.floor((new_h - crop[0]) / 2), xp.floor((new_w - crop[1]) / 2)
    else:
        top, left = xp.round((new_h - crop[0]) / 2.0), xp.round((new_w - crop[1]) / 2.0)
    if xp is np:
        return (int(new_h), int(new_w)), (int(top), int(left))
    return (new_h, new_w), (top, left)


def _filter(name, x, xp):
    """PIL's filter `name` (Resample.c) at offsets x, float64."""
    if name == "box":
        return xp.where((x > -0.5) & (x <= 0.5), 1.0, 0.0)
    x = xp.abs(x)
    if name == "bilinear":
        return xp.where(x < 1.0, 1.0 - x, 0.0)
    if name == "bicubic":
        a = -0.5
        near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
        far = (((x - 5.0) * x + 8.0) * x - 4.0) * a
        return xp.where(x < 1.0, near, xp.where(x < 2.0, far, 0.0))
    safe = xp.where(x == 0.0, 1.0, x) * math.pi
    if name == "hamming":  # PIL's constants are C floats
        value = xp.sin(safe) / safe * (float(np.float32(0.54)) + float(np.float32(0.46)) * xp.cos(safe))
        return xp.where(x == 0.0, 1.0, xp.where(x >= 1.0, 0.0, value))
    third = xp.where(x == 0.0, 1.0, x / 3.0) * math.pi
    value = xp.where(x == 0.0, 1.0, xp.sin(safe) / safe * (xp.sin(third) / third))
    return xp.where(x < 3.0, value, 0.0)  # lanczos


def coefficients(in_size, out_size, index, name, xp=np):
    """PIL's fixed-point resampling coefficients (len(index), in_size), as float64 whole numbers.

    Row i holds the weights of output pixel `index[i]` of a side resized from `in_size` to
    `out_size` pixels, as PIL's `precompute_coeffs` computes them (its window, its
    normalisation) and `normalize_coeffs_8bpc` rounds them to `PRECISION_BITS` bits.

    Args:
        in_size: float64 scalar of `xp`. Input side in pixels.
        out_size: float64 scalar of `xp`. Resized side in pixels.
        index: float64 array of `xp`. The output pixels wanted (a crop's).
        name: str. A PIL filter of `FILTERS`.
        xp: module. `numpy` or `tensorflow.experimental.numpy`. Defaults to numpy.

    Example:

    >>> (coefficients(np.float64(4), np.float64(2), np.arange(2.0), "bilinear") / 2 ** PRECISION_BITS).round(3).tolist()
    [[0.429, 0.429, 0.143, 0.0], [0.0, 0.143, 0.429, 0.429]]
    """
    scale = in_size / out_size
    source = xp.arange(in_size, dtype="float64")[None, :]
    if name == "nearest":  # PIL resizes NEAREST by an affine transform: the pixel under each centre
        picked = xp.floor((index[:, None] + 0.5) * scale)
        return xp.where(source == picked, float(1 << PRECISION_BITS), 0.0)
    filter_scale = xp.maximum(scale, 1.0)
    support = FILTER_SUPPORT[name] * filter_scale
    center = (index[:, None] + 0.5) * scale
    low = xp.maximum(xp.floor(center - support + 0.5), 0.0)
    high = xp.minimum(xp.floor(center + support + 0.5), in_size)
    inside = (source >= low) & (source < high)
    weights = xp.where(inside, _filter(name, (source - center + 0.5) * (1.0 / filter_scale), xp), 0.0)
    weights = weights / xp.sum(weights, axis=1, keepdims=True)
    fixed = weights * float(1 << PRECISION_BITS)
    return xp.where(weights < 0, xp.ceil(fixed - 0.5), xp.floor(fixed + 0.5))


def _pass(values, xp):
    """A fixed-point pass's sums to uint8 values: PIL's clip8 (a half added, shifted, clipped)."""
    return xp.clip(xp.floor((values + float(1 << (PRECISION_BITS - 1))) / float(1 << PRECISION_BITS)), 0.0, 255.0)


def vertical_first(height, width, new_height, new_width):
    """Whether Pillow resizes the height before the width: where the height shrinks by more than twice the width's pixels.

    Pillow 13's `ImagingResampleInner` rule (the order moves a rounding to uint8, so a pixel
    here and there one level). Scalars of NumPy or of TensorFlow's NumPy API.

    Example:

    >>> vertical_first(100, 37, 64, 24), vertical_first(40, 52, 24, 32)
    (True, False)
    """
    return (height - new_height > 0) & (height - new_height > 2 * (width - new_width))


def _along_width(image, cols, xp):
    """(h, w, c) -> (h, j, c) by the weights `cols` (j, w): sums of whole numbers, exact in float64 in any order."""
    if xp is np:  # batched matrix products (NumPy's einsum would not use BLAS)
        return np.matmul(cols, image)
    return xp.einsum("hwc,jw->hjc", image, cols)


def _along_height(rows, image, xp):
    """(h, w, c) -> (i, w, c) by the weights `rows` (i, h)."""
    if xp is np:
        return np.tensordot(rows, image, axes=(1, 0))
    return xp.einsum("ih,hwc->iwc", rows, image)


def _resample(image, rows, cols, height_first, xp):
    """Both fixed-point passes of `rows` and `cols` weights over `image`, each rounded, in the order Pillow takes."""
    def width_then_height():
        return _pass(_along_height(rows, _pass(_along_width(image, cols, xp), xp), xp), xp)

    def height_then_width():
        return _pass(_along_width(_pass(_along_height(rows, image, xp), xp), cols, xp), xp)

    if xp is np:
        return height_then_width() if height_first else width_then_height()
    return xp.cond(height_first, height_then_width, width_then_height)


def resize_crop(image, height, width, processor, model_size, xp=np):
    """An image (height, width, channels) of uint8 values as float64 -> the model's (H, W, channels), float64 values.

    The processor's resize and crop: the crop's rows and columns of PIL's resize, its two
    passes in Pillow's order (`vertical_first`), each rounded to uint8 as PIL rounds it (PIL
    skips the pass of a side it keeps; identity weights give the same pixels). `height` and
    `width` are float64 scalars of `xp`, as in `geometry`.
    """
    (new_h, new_w), (top, left) = geometry(processor, height, width, model_size, xp)
    rows = coefficients(height, new_h, top + xp.arange(model_size[0], dtype="float64"), processor["interpolation"], xp)
    cols = coefficients(width, new_w, left + xp.arange(model_size[1], dtype="float64"), processor["interpolation"], xp)
    return _resample(image, rows, cols, vertical_first(height, width, new_h, new_w), xp)


def pil_resize(image, height, width, new_height, new_width, interpolation, xp=np):
    """PIL's `Image.resize` of an image (height, width, channels) of uint8 values as float64, to float64 uint8 values.

    Args:
        image: float64 array of `xp`. Whole numbers in [0, 255].
        height: float64 scalar of `xp`. The image's height.
        width: float64 scalar of `xp`. The image's width.
        new_height: float64 scalar of `xp`. The height to resize to.
        new_width: float64 scalar of `xp`. The width to resize to.
        interpolation: str. A PIL filter of `FILTERS`.
        xp: module. `numpy` or `keras_vit.data.processor_graph.TF_OPS`. Defaults to numpy.

    Example:

    >>> pil_resize(np.full((4, 6, 3), 200.0), 4.0, 6.0, 2.0, 3.0, "bilinear")[0, 0].tolist()
    [200.0, 200.0, 200.0]
    """
    rows = coefficients(height, new_height, xp.arange(new_height, dtype="float64"), interpolation, xp)
    cols = coefficients(width, new_width, xp.arange(new_width, dtype="float64"), interpolation, xp)
    return _resample(image, rows, cols, vertical_first(height, width, new_height, new_width), xp)


def process_image(image, processor, model_size):
    """One image (height, width, channels) in [0, 255] -> float32 (H, W, channels) through `processor`.

    Float pixels are rounded to uint8 values first: the processors resize 8-bit images.

    Example:

    >>> squash = processor_record("squash", [2, 2], None, "bilinear", "floor", "x")
    >>> process_image(np.full((4, 6, 3), 200, "uint8"), squash, (2, 2))[0, 0].tolist()
    [200.0, 200.0, 200.0]
    """
    image = np.asarray(image)
    if image.dtype != np.uint8:
        image = np.clip(np.round(image.astype("float64")), 0, 255)
    model_size = tuple(int(side) for side in model_size)
    pixels = resize_crop(image.astype("float64"), np.float64(image.shape[0]), np.float64(image.shape[1]), processor,
                         model_size)
    return pixels.astype("float32")


def process_images(images, processor, model_size):
    """Images of any sizes (a list, or a 4-D batch) -> float32 (N, H, W, channels) through `processor`."""
    return np.stack([process_image(image, processor, model_size) for image in images])
