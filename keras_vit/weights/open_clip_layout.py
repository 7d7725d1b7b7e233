"""open_clip Hub folders (`open_clip_config.json` + `open_clip_model.safetensors`) read as Hugging Face CLIP.

open_clip's native CLIP (`open_clip.model.CLIP`: a `VisionTransformer` with class token, ln_pre,
ln_post and proj; a `TextTransformer` with causal mask, argmax pooling, ln_final and
text_projection) is the architecture of Hugging Face's `CLIPModel`. Its folder is read by renaming
its keys to the file keys of a `CLIPModel` (`RENAMES`: the fused `in_proj` split into query, key
and value, the projections transposed) and stating its `model_cfg` as a CLIP config.json
(`hf_config`), so that the Hugging Face CLIP readers build and load the same towers. Its
`preprocess_cfg` becomes the image processor open_clip's eval transform is (`preprocessing`).
Configs of other towers (timm image towers, Hugging Face text towers, attention pools, layer
scale, custom attention blocks...) are refused, naming the key, its value and what is read.

Example:

>>> rename_open_clip_key("visual.transformer.resblocks.3.mlp.c_fc.bias")
'vision_model.encoder.layers.3.mlp.fc1.bias'
>>> rename_open_clip_key("ln_final.weight")
'text_model.final_layer_norm.weight'
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from keras_vit.image_processor import processor_record
from keras_vit.weights.config_json import config_value
from keras_vit.weights.files import TORCH_TO_SAFETENSORS, CheckpointError, read_json_object, read_safetensors
from keras_vit.weights.huggingface.family import HFFamily
from keras_vit.weights.huggingface.layout import rename_hf_key
from keras_vit.weights.preprocessing import PIL_RESAMPLE, Preprocessing, match_scaling, preprocessing_from_scaling

CONFIG_FILE = "open_clip_config.json"
WEIGHTS_FILE = "open_clip_model.safetensors"
TORCH_WEIGHTS_FILE = "open_clip_pytorch_model.bin"
# open_clip's LayerNorm (torch's default epsilon) in both towers.
LAYER_NORM_EPS = 1e-5
# transformers' CLIP text tower pools at the largest id (open_clip's "argmax") where eos_token_id is 2.
ARGMAX_EOS_TOKEN_ID = 2
# open_clip key -> Hugging Face CLIPModel file key, both ways ("{i}": a block; a name ending in ".": its keys).
_BLOCK = (
    ("ln_1.", "layer_norm1."), ("ln_2.", "layer_norm2."), ("attn.in_proj_weight", "self_attn.in_proj_weight"),
    ("attn.in_proj_bias", "self_attn.in_proj_bias"),
    ("attn.out_proj.", "self_attn.out_proj."), ("mlp.c_fc.", "mlp.fc1."), ("mlp.c_proj.", "mlp.fc2."),
)
RENAMES = (
    ("visual.conv1.weight", "vision_model.embeddings.patch_embedding.weight"),
    ("visual.class_embedding", "vision_model.embeddings.class_embedding"),
    ("visual.positional_embedding", "vision_model.embeddings.position_embedding.weight"),
    ("visual.ln_pre.", "vision_model.pre_layrnorm."),
    ("visual.ln_post.", "vision_model.post_layernorm."),
    ("visual.proj", "visual_projection.weight"),
    *((f"visual.transformer.resblocks.{{i}}.{a}", f"vision_model.encoder.layers.{{i}}.{b}") for a, b in _BLOCK),
    ("token_embedding.weight", "text_model.embeddings.token_embedding.weight"),
    ("positional_embedding", "text_model.embeddings.position_embedding.weight"),
    *((f"transformer.resblocks.{{i}}.{a}", f"text_model.encoder.layers.{{i}}.{b}") for a, b in _BLOCK),
    ("ln_final.", "text_model.final_layer_norm."),
    ("text_projection", "text_projection.weight"),
    ("logit_scale", "logit_scale"),
    ("logit_bias", "logit_bias"),
)
_FAMILY = HFFamily((), RENAMES, (), 1, {}, None)
# Stored as x @ proj (width, embed_dim); a CLIPModel's Linear keeps (embed_dim, width).
_TRANSPOSED = ("visual_projection.weight", "text_projection.weight")
# model_cfg keys read, and those that change nothing at inference (their tensors, if any, are in the file).
_TOP_KEYS = ("embed_dim", "vision_cfg", "text_cfg", "quick_gelu", "init_logit_scale", "init_logit_bias",
             "nonscalar_logit_scale", "custom_text")
_VISION_KEYS = ("image_size", "patch_size", "width", "layers", "head_width", "mlp_ratio", "patch_dropout",
                "output_tokens", "attn_pooler_queries", "attn_pooler_heads", "final_ln_after_pool",
                "timm_model_pretrained", "timm_pool", "timm_proj", "timm_proj_bias", "timm_drop", "timm_drop_path")
_TEXT_KEYS = ("context_length", "vocab_size", "width", "heads", "layers", "mlp_ratio", "output_tokens", "pad_id",
              "eos_id", "final_ln_after_pool", "hf_model_pretrained", "hf_proj_type", "hf_pooler_type")
# Keys of the other towers and blocks open_clip builds: the value of open_clip's CLIP, the only one read.
_SAME_AS_CLIP = {
    "vision_cfg": {"timm_model_name": None, "attentional_pool": False, "ls_init_value": None, "no_ln_pre": False,
                   "pos_embed_type": "learnable", "pool_type": "tok", "act_kwargs": None, "norm_kwargs": None,
                   "block_type": None, "qk_norm": False, "scaled_cosine_attn": False, "scale_heads": False,
                   "scale_attn_inner": False, "scale_attn": False, "scale_fc": False},
    "text_cfg": {"hf_model_name": None, "hf_tokenizer_name": None, "tokenizer_mode": None, "tokenizer_kwargs": None,
                 "ls_init_value": None, "embed_cls": False, "no_causal_mask": False, "pool_type": "argmax",
                 "proj_type": "linear", "proj_bias": False, "act_kwargs": None, "norm_kwargs": None,
                 "block_type": None, "qk_norm": False, "scaled_cosine_attn": False, "scale_heads": False,
                 "scale_attn_inner": False, "scale_attn": False, "scale_fc": False},
}
# preprocess_cfg: open_clip's eval resize modes keras_vit applies -> its processor's resize.
_RESIZE_MODES = {"shortest": "shortest_edge", "squash": "squash"}
# open_clip's eval transform resizes bilinear for "bilinear", else bicubic ("random" included).
_INTERPOLATIONS = {"bicubic": "bicubic", "bilinear": "bilinear", "random": "bicubic"}


@dataclasses.dataclass(frozen=True)
class OpenClipFolder:
    """An open_clip folder read as a Hugging Face CLIP two-tower checkpoint.

    Args:
        path: str. The folder.
        config_path: str. Its open_clip_config.json.
        weights_path: str. Its open_clip_model.safetensors.
        hf_config: dict. The CLIP config.json its model_cfg states.
        tensors: dict. Its tensors under a CLIPModel's file keys.
        origins: dict. Each of those keys -> the open_clip key it comes from.
        preprocessing: `keras_vit.weights.Preprocessing`. Its preprocess_cfg, as open_clip's
            eval transform applies it.
    """

    path: str
    config_path: str
    weights_path: str
    hf_config: dict
    tensors: dict
    origins: dict
    preprocessing: Preprocessing


def is_open_clip_folder(folder):
    """Whether `folder` is an open_clip folder and no Hugging Face one (whose config.json is read first)."""
    return os.path.isfile(os.path.join(folder, CONFIG_FILE)) and not os.path.isfile(os.path.join(folder, "config.json"))


def rename_open_clip_key(key):
    """An open_clip state-dict key -> the CLIPModel file key; None for a key with no place there."""
    renamed = rename_hf_key(key, _FAMILY, to_canonical=True)
    return renamed if renamed != key or key in ("logit_scale", "logit_bias") else None


def read_open_clip_folder(folder):
    """The `OpenClipFolder` of `folder`; CheckpointError naming the file, the key and what keras_vit reads otherwise."""
    config_path = os.path.join(folder, CONFIG_FILE)
    weights_path = os.path.join(folder, WEIGHTS_FILE)
    if not os.path.isfile(weights_path):
        torch_file = os.path.join(folder, TORCH_WEIGHTS_FILE)
        command = TORCH_TO_SAFETENSORS.replace("MODEL.pth", TORCH_WEIGHTS_FILE)
        command = command.replace("MODEL.safetensors", WEIGHTS_FILE)
        also = (f" It has {TORCH_WEIGHTS_FILE}, a PyTorch pickle keras_vit does not unpickle: convert it first, e.g. "
                f"{command}" if os.path.isfile(torch_file) else "")
        raise CheckpointError(f"open_clip folder {folder!r} has no {WEIGHTS_FILE} beside its {CONFIG_FILE}.{also}")
    config = read_json_object(config_path, "open_clip config")
    model_cfg = config_value(config, "model_cfg", config_path, "object")
    hf_config = hf_config_of(model_cfg, f"{config_path} (model_cfg)")
    preprocess = config_value(config, "preprocess_cfg", config_path, "object", {}) or {}
    image_size = hf_config["vision_config"]["image_size"]
    preprocessing = preprocessing_of(preprocess, image_size, f"{config_path} (preprocess_cfg)")
    tensors, origins = hf_tensors(read_safetensors(weights_path), weights_path)
    return OpenClipFolder(folder, config_path, weights_path, hf_config, tensors, origins, preprocessing)


def hf_config_of(model_cfg, where):
    """The CLIP config.json (dict) of an open_clip `model_cfg`; CheckpointError naming a key keras_vit does not read."""
    _refuse_other_keys(model_cfg, _TOP_KEYS, where)
    if model_cfg.get("custom_text"):
        raise CheckpointError(f"open_clip config {where}: custom_text is {model_cfg['custom_text']!r}; keras_vit reads "
                              "open_clip's CLIP (custom_text false), whose text tower keys sit at the top level.")
    vision = config_value(model_cfg, "vision_cfg", where, "object")
    text = config_value(model_cfg, "text_cfg", where, "object")
    for name, cfg, keys in (("vision_cfg", vision, _VISION_KEYS), ("text_cfg", text, _TEXT_KEYS)):
        _refuse_other_keys(cfg, keys + tuple(_SAME_AS_CLIP[name]), f"{where}.{name}")
        for key, expected in _SAME_AS_CLIP[name].items():
            value = cfg.get(key, expected)
            if value != expected and not (expected is None and value == {}):
                raise CheckpointError(
                    f"open_clip config {where}: {name}.{key} is {value!r}; keras_vit reads open_clip's CLIP "
                    f"VisionTransformer and TextTransformer, with {key}={expected!r} (other towers, pools and "
                    "blocks are not read).")
    if isinstance(vision.get("layers"), (list, tuple)):
        raise CheckpointError(f"open_clip config {where}: vision_cfg.layers is {vision['layers']!r}, a ModifiedResNet "
                              "image tower; keras_vit reads open_clip's VisionTransformer (an integer).")
    act = "quick_gelu" if config_value(model_cfg, "quick_gelu", where, "flag", False) else "gelu"
    embed_dim = config_value(model_cfg, "embed_dim", where, "size")
    vision_where, text_where = f"{where}.vision_cfg", f"{where}.text_cfg"
    width = config_value(vision, "width", vision_where, "size", 768)
    head_width = config_value(vision, "head_width", vision_where, "size", 64)
    if width % head_width:
        raise CheckpointError(f"open_clip config {vision_where}: width {width} is not a multiple of head_width "
                              f"{head_width}; expected whole attention heads.")
    text_width = config_value(text, "width", text_where, "size", 512)
    image_size = config_value(vision, "image_size", vision_where, "sides", 224)
    common = {"hidden_act": act, "layer_norm_eps": LAYER_NORM_EPS, "projection_dim": embed_dim}
    return {
        "model_type": "clip", "projection_dim": embed_dim,
        "vision_config": {
            "hidden_size": width, "num_hidden_layers": config_value(vision, "layers", vision_where, "size", 12),
            "num_attention_heads": width // head_width,
            "intermediate_size": int(width * config_value(vision, "mlp_ratio", vision_where, "positive", 4.0)),
            "image_size": image_size[0] if image_size[0] == image_size[1] else list(image_size),
            "patch_size": config_value(vision, "patch_size", vision_where, "square", 16), "num_channels": 3, **common,
        },
        "text_config": {
            "hidden_size": text_width, "num_hidden_layers": config_value(text, "layers", text_where, "size", 12),
            "num_attention_heads": config_value(text, "heads", text_where, "size", 8),
            "intermediate_size": int(text_width * config_value(text, "mlp_ratio", text_where, "positive", 4.0)),
            "vocab_size": config_value(text, "vocab_size", text_where, "size", 49408),
            "max_position_embeddings": config_value(text, "context_length", text_where, "size", 77),
            "eos_token_id": ARGMAX_EOS_TOKEN_ID, **common,
        },
    }


def _refuse_other_keys(cfg, known, where):
    other = sorted(key for key in cfg if key not in known)
    if other:
        raise CheckpointError(
            f"open_clip config {where}: {other[0]} is {cfg[other[0]]!r}, a key of no tower keras_vit reads (it "
            f"reads open_clip's CLIP, whose keys are {sorted(known)}).")


def preprocessing_of(preprocess, image_size, where):
    """The `Preprocessing` of open_clip's eval transform for `preprocess_cfg` at the image tower's `image_size`.

    open_clip sizes the transform by its image tower, not by preprocess_cfg's `size`; mean and std
    default to OpenAI's (`keras_vit.configs.SCALINGS["clip"]`), the resize to the short side then a
    centre crop with torchvision's rounded offsets, bicubic.
    """
    size = tuple(image_size) if isinstance(image_size, (list, tuple)) else (image_size, image_size)
    defaults = preprocessing_from_scaling("clip", None, where)
    mean = tuple(float(v) for v in _channels(preprocess, "mean", defaults.mean, where))
    std = tuple(float(v) for v in _channels(preprocess, "std", defaults.std, where))
    if any(v <= 0 for v in std):
        raise CheckpointError(f"open_clip config {where}: std is {list(std)}; expected numbers > 0.")
    mode = preprocess.get("mode", "RGB")
    if mode != "RGB":
        raise CheckpointError(f"open_clip config {where}: mode is {mode!r}; open_clip's eval transform takes 'RGB'.")
    interpolation = preprocess.get("interpolation", "bicubic")
    if interpolation not in _INTERPOLATIONS:
        raise CheckpointError(f"open_clip config {where}: interpolation is {interpolation!r}; expected one of "
                              f"{list(_INTERPOLATIONS)}.")
    resize_mode = preprocess.get("resize_mode", "shortest")
    if resize_mode not in _RESIZE_MODES or (resize_mode == "shortest" and size[0] != size[1]):
        detail = " at a non-square image size" if resize_mode in _RESIZE_MODES else ""
        raise CheckpointError(
            f"open_clip config {where}: resize_mode is {resize_mode!r}{detail}; keras_vit applies open_clip's eval "
            f"transform for {list(_RESIZE_MODES)} ('shortest' at a square size), not its padding or keep-ratio resize.")
    resize = _RESIZE_MODES[resize_mode]
    processor = processor_record(resize, size[0] if resize == "shortest_edge" else list(size),
                                 list(size) if resize == "shortest_edge" else None, _INTERPOLATIONS[interpolation],
                                 "round", f"{where} (resize_mode, interpolation)")
    return Preprocessing(match_scaling(mean, std), mean, std, size, _INTERPOLATIONS[interpolation],
                         1.0 if resize == "shortest_edge" else None, f"{where} (mean, std)", processor=processor)


def clip_processor_config(preprocessing):
    """The preprocessor_config.json (dict) of a CLIPImageProcessor for an open_clip folder's `preprocessing`.

    Its resize, filter, mean and std; transformers' crop floors the offsets open_clip's rounds.
    """
    processor = preprocessing.processor
    height, width = processor["output"]
    shortest = processor["resize"] == "shortest_edge"
    crop = {"do_center_crop": True, "crop_size": {"height": height, "width": width}} if shortest else \
        {"do_center_crop": False}
    return {
        "image_processor_type": "CLIPImageProcessor", "do_resize": True, "do_convert_rgb": True,
        "size": {"shortest_edge": processor["size"]} if shortest else {"height": height, "width": width},
        "resample": {name: code for code, name in PIL_RESAMPLE.items()}[processor["interpolation"]], **crop,
        "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
        "image_mean": list(preprocessing.mean), "image_std": list(preprocessing.std),
    }


def _channels(preprocess, key, default, where):
    value = preprocess.get(key)
    if value is None:
        return default
    values = [value] * 3 if isinstance(value, (int, float)) and not isinstance(value, bool) else value
    if not (isinstance(values, list) and len(values) == 3
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v) for v in values)):
        raise CheckpointError(f"open_clip config {where}: {key} is {value!r}; expected a number or three, one per "
                              "channel.")
    return values


def hf_tensors(raw, path):
    """(tensors, origins): an open_clip CLIP state dict's tensors under a CLIPModel's file keys (in_proj split,
    projections transposed), and each of those keys -> the open_clip key it comes from, for messages."""
    tensors, origins, unknown = {}, {}, []
    for key, array in raw.items():
        name = rename_open_clip_key(key)
        if name is None:
            unknown.append(key)
        elif ".self_attn.in_proj_" in name:
            head, kind = name.split(".self_attn.in_proj_")
            if array.shape[0] % 3:
                raise CheckpointError(f"open_clip checkpoint {path!r}: {key} has shape {array.shape}; expected query, "
                                      "key and value stacked on its first axis.")
            for part, piece in zip(("q", "k", "v"), np.split(np.asarray(array), 3)):
                tensors[f"{head}.self_attn.{part}_proj.{kind}"] = piece
                origins[f"{head}.self_attn.{part}_proj.{kind}"] = key
        else:
            tensors[name] = np.asarray(array).T if name in _TRANSPOSED else array
            origins[name] = key
    if unknown:
        raise CheckpointError(
            f"open_clip checkpoint {path!r} has {len(unknown)} tensors of no part of open_clip's CLIP towers keras_vit "
            f"reads (the first: {', '.join(sorted(unknown)[:3])}).")
    return tensors, origins
