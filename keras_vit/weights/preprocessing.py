"""The pixel scaling, input size and resize a checkpoint states in its own files (`Preprocessing`).

Three sources: a Hugging Face `preprocessor_config.json` (image_mean, image_std, do_normalize,
do_rescale and rescale_factor, size, crop_size, resample; a NaFlex processor's max_num_patches and
patch_size; else the same keys under "image_processor" in `processor_config.json`), the `pretrained_cfg` of a timm
`config.json` (mean, std, input_size, interpolation, crop_pct), and the `preprocessing` and
`resolution` fields of a named preset (`keras_vit.weights.CHECKPOINTS`). Mean and std are kept in
[0, 1] pixel units, as both ecosystems write them; `scaling` names the entry of
`keras_vit.configs.SCALINGS` (kept in [0, 255] units) they match, or None.

Example:

>>> preprocessing_from_scaling("symmetric", 224, "a preset").mean
(0.5, 0.5, 0.5)
"""

from __future__ import annotations

import dataclasses
import math
import os

from keras_vit.configs import SCALINGS
from keras_vit.image_processor import processor_record
from keras_vit.weights.files import CheckpointError, read_json_object

HF_PREPROCESSOR_FILE = "preprocessor_config.json"
# What transformers 5's `save_pretrained` of a whole processor writes: the image processor's dict under "image_processor".
HF_PROCESSOR_FILE = "processor_config.json"
TIMM_CONFIG_FILE = "config.json"
# How close (in [0, 1] units) a stated mean and std must be to a SCALINGS entry to be named by it.
SCALING_TOLERANCE = 1e-3
# PIL's resampling filters, by the integer Hugging Face image processors store in `resample`.
PIL_RESAMPLE = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
INTERPOLATIONS = tuple(PIL_RESAMPLE.values())
# transformers' image processor classes whose own `resample` (used where the file states none) is
# not the library's bilinear.
HF_BICUBIC_PROCESSORS = ("CLIPImageProcessor", "SiglipImageProcessor", "BitImageProcessor")
# timm's eval transform where a pretrained_cfg states none (timm.data.resolve_data_config).
TIMM_EVAL_DEFAULTS = {"crop_pct": 0.875, "crop_mode": "center", "interpolation": "bicubic"}
TIMM_CROP_MODES = ("center", "squash")


@dataclasses.dataclass(frozen=True)
class Preprocessing:
    """How a checkpoint expects its images: pixel mean and std, input size and resize.

    Args:
        scaling: str or None. The key of `keras_vit.configs.SCALINGS` whose mean and std match
            (within 1e-3 in [0, 1] units), else None.
        mean: tuple of float. Per channel, in [0, 1] pixel units.
        std: tuple of float. Per channel, in [0, 1] pixel units.
        image_size: (int, int) or None. (height, width) the checkpoint expects, or None.
        interpolation: str or None. The resize filter: "bilinear", "bicubic", ...
        crop_pct: float or None. Centre-crop fraction after resizing the short side, or None.
        source: str. The file (and key) it was read from, for messages and training headers.
        max_num_patches: int or None. A NaFlex processor's patch budget (SigLIP 2's
            `Siglip2ImageProcessor`), else None. Defaults to None.
        patch_size: int or None. The patch side a NaFlex processor cuts, else None. Defaults to
            None.
        processor: dict or None. How a photo of any size becomes `image_size`: resize, centre
            crop and PIL filter (`keras_vit.image_processor`), or None where the files state
            none (a NaFlex processor, a preset). Defaults to None.

    Example:

    >>> p = Preprocessing("imagenet", (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), (224, 224), "bicubic", 0.9, "x")
    >>> p.scaling, p.image_size
    ('imagenet', (224, 224))
    """

    scaling: str | None
    mean: tuple
    std: tuple
    image_size: tuple | None
    interpolation: str | None
    crop_pct: float | None
    source: str
    max_num_patches: int | None = None
    patch_size: int | None = None
    processor: dict | None = None


def match_scaling(mean, std):
    """The key of `keras_vit.configs.SCALINGS` whose mean and std (per channel, [0, 1] units) match, or None.

    Example:

    >>> match_scaling((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)), match_scaling((0.4, 0.4, 0.4), (0.2, 0.2, 0.2))
    ('symmetric', None)
    """
    for name, (scale_mean, scale_std) in SCALINGS.items():
        if len(scale_mean) not in (1, len(mean)) or len(scale_std) not in (1, len(std)):
            continue
        pairs = [(value, scale_mean[i % len(scale_mean)] / 255.0) for i, value in enumerate(mean)]
        pairs += [(value, scale_std[i % len(scale_std)] / 255.0) for i, value in enumerate(std)]
        if all(abs(a - b) <= SCALING_TOLERANCE for a, b in pairs):
            return name
    return None


def preprocessing_from_scaling(scaling, resolution, source, channels=3):
    """The `Preprocessing` of a SCALINGS key and an image side, as a named preset states them.

    Args:
        scaling: str. A key of `keras_vit.configs.SCALINGS`.
        resolution: int or None. The image side it was trained at.
        source: str. Where the two values come from.
        channels: int. Channels to spread a one-value scaling over. Defaults to 3.
    """
    if scaling not in SCALINGS:
        raise CheckpointError(f"{source}: preprocessing={scaling!r} is not a key of keras_vit.configs.SCALINGS "
                              f"({sorted(SCALINGS)}).")
    mean, std = (_per_channel(values, channels) for values in SCALINGS[scaling])
    size = (resolution, resolution) if resolution is not None else None
    return Preprocessing(scaling, mean, std, size, None, None, source)


def _per_channel(values, channels):
    """SCALINGS values ([0, 255], one for all channels or one each) in [0, 1] units, one per channel."""
    return tuple(round(values[i % len(values)] / 255.0, 8) for i in range(max(channels, len(values))))


def read_preprocessing(path, layout):
    """The `Preprocessing` the files of checkpoint `path` state, or None when none states it.

    Only the file of the checkpoint's own ecosystem is read, in the folder of `path` (or `path`
    itself): a timm checkpoint's `config.json` (`pretrained_cfg`), a Hugging Face one's
    `preprocessor_config.json`, else the "image_processor" of its `processor_config.json` (what
    transformers 5 writes for a processor of image and text). A vit_jax `.npz` comes with neither.

    Args:
        path: str. A checkpoint file or folder.
        layout: str. Its layout, "timm", "hf" or "vit_jax".

    Example:

    >>> import json, os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> json.dump({"image_mean": [0.5] * 3, "image_std": [0.5] * 3, "size": {"height": 224, "width": 224},
    ...            "resample": 2}, open(os.path.join(folder, "preprocessor_config.json"), "w"))
    >>> p = read_preprocessing(folder, "hf")
    >>> p.scaling, p.image_size, p.interpolation
    ('symmetric', (224, 224), 'bilinear')
    """
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    if layout == "timm":
        file = os.path.join(folder, TIMM_CONFIG_FILE)
        return _read_timm(file) if os.path.isfile(file) else None
    if layout != "hf":
        return None
    for name in (HF_PREPROCESSOR_FILE, HF_PROCESSOR_FILE):
        if os.path.isfile(os.path.join(folder, name)):
            return _read_hf(os.path.join(folder, name))
    return None


def _read_timm(file):
    config = read_json_object(file, "Config")
    if "architecture" not in config:
        return None  # a Hugging Face config.json: its scaling is in preprocessor_config.json
    return timm_preprocessing(config, file)


def timm_preprocessing(config, file):
    """The `Preprocessing` a timm config.json (dict `config`, read from `file`) states, or None without mean and std.

    Example:

    >>> cfg = {"mean": [0.5] * 3, "std": [0.5] * 3, "input_size": [3, 240, 240], "crop_pct": 0.95}
    >>> timm_preprocessing({"architecture": "flexivit_base", "pretrained_cfg": cfg}, "config.json").image_size
    (240, 240)
    """
    # timm's older single-dict layout keeps the pretrained_cfg keys at the top level.
    cfg, prefix = (config["pretrained_cfg"], "pretrained_cfg.") if "pretrained_cfg" in config else (config, "")
    if not isinstance(cfg, dict):
        raise CheckpointError(f"timm config {file!r}: pretrained_cfg is {cfg!r}; expected a JSON object.")
    if "mean" not in cfg and "std" not in cfg:
        return None
    where = f"{file} ({prefix}mean, {prefix}std)"
    mean = _channels(cfg.get("mean"), file, prefix + "mean", positive=False)
    std = _channels(cfg.get("std"), file, prefix + "std", positive=True)
    if len(mean) != len(std):
        mean, std = _broadcast(mean, std, file)
    size = cfg.get("input_size")
    if size is not None:
        if not (isinstance(size, list) and len(size) == 3 and all(_is_positive_int(v) for v in size)):
            raise CheckpointError(f"timm config {file!r}: {prefix}input_size is {size!r}; expected [channels, height, "
                                  "width] of integers >= 1.")
        size = (size[1], size[2])
    interpolation = cfg.get("interpolation")
    if interpolation is not None and interpolation not in INTERPOLATIONS:
        raise CheckpointError(f"timm config {file!r}: {prefix}interpolation is {interpolation!r}; expected one of "
                              f"{list(INTERPOLATIONS)}.")
    crop_pct = cfg.get("crop_pct")
    if crop_pct is not None and not (_is_number(crop_pct) and 0 < crop_pct <= 1):
        raise CheckpointError(f"timm config {file!r}: {prefix}crop_pct is {crop_pct!r}; expected a number in (0, 1].")
    crop_mode = cfg.get("crop_mode")
    if crop_mode is not None and crop_mode not in TIMM_CROP_MODES:
        raise CheckpointError(f"timm config {file!r}: {prefix}crop_mode is {crop_mode!r}; keras_vit applies timm's "
                              f"eval transform for {list(TIMM_CROP_MODES)}.")
    processor = None if size is None else _timm_processor(size, crop_pct, crop_mode, interpolation, f"{file} ({prefix})")
    return Preprocessing(match_scaling(mean, std), mean, std, size, interpolation,
                         float(crop_pct) if crop_pct is not None else None, where, processor=processor)


def _timm_processor(size, crop_pct, crop_mode, interpolation, source):
    """timm's eval transform (`transforms_imagenet_eval`) for `size`, as a processor dict."""
    crop_pct = crop_pct or TIMM_EVAL_DEFAULTS["crop_pct"]
    scaled = [math.floor(side / crop_pct) for side in size]
    if (crop_mode or TIMM_EVAL_DEFAULTS["crop_mode"]) == "squash":
        resize, target = "squash", scaled
    elif scaled[0] == scaled[1]:
        resize, target = "shortest_edge", scaled[0]
    else:
        resize, target = "keep_ratio", scaled
    return processor_record(resize, target, list(size), interpolation or TIMM_EVAL_DEFAULTS["interpolation"], "round",
                            source + "input_size, crop_pct, crop_mode, interpolation", crop_pct=crop_pct)


def _read_hf(file):
    config = read_json_object(file, "Hugging Face preprocessor config")
    if os.path.basename(file) == HF_PROCESSOR_FILE:
        config = config.get("image_processor")
        if not isinstance(config, dict):
            return None  # a processor of text alone
        file = f"{file} (image_processor)"
    if config.get("rescale_offset"):
        raise CheckpointError(f"Hugging Face preprocessor config {file!r}: rescale_offset is "
                              f"{config['rescale_offset']!r}; keras_vit reads only a plain rescale (x * rescale_factor).")
    for key in ("do_normalize", "do_rescale", "do_center_crop"):
        if key in config and not isinstance(config[key], bool):
            raise CheckpointError(f"Hugging Face preprocessor config {file!r}: {key} is {config[key]!r}; expected "
                                  "true or false.")
    # Absent flags are the image processors' own defaults (transformers builds them so).
    normalize, rescale = config.get("do_normalize", True), config.get("do_rescale", True)
    factor = config.get("rescale_factor", 1 / 255) if rescale else 1.0
    if not (_is_number(factor) and factor > 0):
        raise CheckpointError(f"Hugging Face preprocessor config {file!r}: rescale_factor is {factor!r}; expected a "
                              "number > 0.")
    if normalize:
        mean = _channels(config.get("image_mean"), file, "image_mean", positive=False)
        std = _channels(config.get("image_std"), file, "image_std", positive=True)
    else:
        mean, std = (0.0,), (1.0,)
    # The model sees (x * factor - mean) / std of pixels x in [0, 255]; in [0, 1] units that is
    # (x01 - mean / (255 factor)) / (std / (255 factor)).
    unit = 255.0 * factor
    mean = tuple(round(value / unit, 8) for value in mean)
    std = tuple(round(value / unit, 8) for value in std)
    if len(mean) != len(std):
        mean, std = _broadcast(mean, std, file)
    keys = ["image_mean", "image_std"] if normalize else ["do_normalize"]
    keys += ["rescale_factor"] if rescale and "rescale_factor" in config else []
    size, crop_pct = _hf_size(config, file)
    resample = config.get("resample")
    if resample is not None and resample not in PIL_RESAMPLE:
        raise CheckpointError(f"Hugging Face preprocessor config {file!r}: resample is {resample!r}; expected one "
                              f"of PIL's filters {PIL_RESAMPLE}.")
    naflex = {key: _side(config[key], file, key) if key in config else None for key in ("max_num_patches", "patch_size")}
    return Preprocessing(match_scaling(mean, std), mean, std, size, PIL_RESAMPLE.get(resample), crop_pct,
                         f"{file} ({', '.join(keys)})", **naflex, processor=_hf_processor(config, file))


def _hf_size(config, file):
    """(image size, crop_pct) from `size` and, when the processor crops, `crop_size`."""
    size = config.get("size")
    crop = config.get("crop_size")
    cropping = config.get("do_center_crop", crop is not None)
    short_edge = None
    if isinstance(size, dict) and "shortest_edge" in size:
        short_edge = _side(size["shortest_edge"], file, "size.shortest_edge")
        resized = None
    elif size is not None:
        resized = _height_width(size, file, "size")
        short_edge = min(resized)
    else:
        resized = None
    if cropping:
        if crop is None:
            raise CheckpointError(f"Hugging Face preprocessor config {file!r}: do_center_crop is true but crop_size is "
                                  "missing; expected {height, width} or an integer.")
        cropped = _height_width(crop, file, "crop_size")
        return cropped, (round(min(cropped) / short_edge, 6) if short_edge else None)
    return resized, None


def _hf_processor(config, file):
    """The resize and crop of a Hugging Face image processor, as a processor dict, or None where it states none.

    A plain `size` {height, width} (or one integer) is a squash to it, {shortest_edge} the short
    side to it; `do_center_crop` then crops `crop_size`. Other sizes (NaFlex's patch budget, a
    longest edge) leave None: the model's own resize.
    """
    size = config.get("size")
    if not config.get("do_resize", True) or size is None or config.get("max_num_patches") is not None:
        return None
    if isinstance(size, dict) and set(size) - {"height", "width", "shortest_edge"}:
        return None
    resample = config.get("resample")
    if resample is None:
        resample = 3 if config.get("image_processor_type", "").removesuffix("Fast") in HF_BICUBIC_PROCESSORS else 2
    crop = config.get("crop_size")
    cropping = config.get("do_center_crop", crop is not None)
    crop = _height_width(crop, file, "crop_size") if cropping else None
    if isinstance(size, dict) and "shortest_edge" in size:
        resize, target = "shortest_edge", _side(size["shortest_edge"], file, "size.shortest_edge")
    else:
        resize, target = "squash", list(_height_width(size, file, "size"))
    try:
        return processor_record(resize, target, crop, PIL_RESAMPLE[resample], "floor",
                                f"{file} (do_resize, size, do_center_crop, crop_size, resample)")
    except ValueError as error:
        raise CheckpointError(f"Hugging Face preprocessor config {error}") from None


def _height_width(value, file, key):
    if isinstance(value, dict) and set(value) >= {"height", "width"}:
        return (_side(value["height"], file, f"{key}.height"), _side(value["width"], file, f"{key}.width"))
    if _is_positive_int(value):
        return (value, value)
    raise CheckpointError(f"Hugging Face preprocessor config {file!r}: {key} is {value!r}; expected "
                          "{height, width}, {shortest_edge} or an integer.")


def _side(value, file, key):
    if not _is_positive_int(value):
        raise CheckpointError(f"Hugging Face preprocessor config {file!r}: {key} is {value!r}; expected an integer >= 1.")
    return value


def _channels(value, file, key, positive):
    """Per-channel numbers (a list, or one number for all channels) as a tuple of floats."""
    values = [value] if _is_number(value) else value
    if not (isinstance(values, list) and values and all(_is_number(v) and math.isfinite(v) for v in values)
            and (not positive or all(v > 0 for v in values))):
        what = "missing" if value is None else repr(value)
        raise CheckpointError(f"{file!r}: {key} is {what}; expected a number or a list of numbers per channel"
                              + (", each > 0." if positive else "."))
    return tuple(float(v) for v in values)


def _broadcast(mean, std, file):
    if len(mean) == 1:
        return mean * len(std), std
    if len(std) == 1:
        return mean, std * len(mean)
    raise CheckpointError(f"{file!r}: {len(mean)} mean values and {len(std)} std values; expected one per channel.")


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_positive_int(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1
