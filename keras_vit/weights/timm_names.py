"""timm's ViT architecture names as rows of `keras_vit.configs.VARIANTS`, and a timm Hub folder's config.json read with them.

A timm Hub folder (every `timm/...` repository on the Hugging Face Hub, as
`timm.models.push_to_hf_hub` writes it) holds `model.safetensors` and a `config.json` with the
model's `architecture` (a timm model name), the `model_args` it was built with on top of that
name's defaults, and its `pretrained_cfg` (pixel mean and std, input size, interpolation). The
state dict alone hides the head count (timm fuses query, key and value) and any rotary position
(computed, not stored); the name and `model_args` state them. `TIMM_ARCHITECTURES` is the one
table from timm names to (VARIANTS row, the fields timm builds otherwise than the row). timm
builds the families of `EVA_FAMILIES` with its `Eva` class (timm/models/eva.py), whose
model_args have names and meanings of their own (`_EVA_ARGS`).

Example:

>>> TIMM_ARCHITECTURES["vit_small_patch14_reg4_dinov2"]
('DINOv2_S14_reg4', {})
>>> fields = config_architecture({"architecture": "vit_tiny_patch16_224", "model_args": {"depth": 2}}, "config.json")
>>> fields["num_layers"], fields["num_heads"], fields["hidden_size"]
(2, 3, 192)
"""

from __future__ import annotations

import math
import re

from keras_vit.configs import CORE_FIELDS, FAMILY_FIELDS, VARIANTS
from keras_vit.layers.rotary_embedding import rope_settings
from keras_vit.weights.files import CheckpointError

# timm builds its SigLIP towers with exact GELU (nn.GELU) unless the name says act_layer='gelu_tanh'.
_SIGLIP = dict(approximate_gelu=False)
_SIGLIP_TANH = dict(approximate_gelu=True)
# timm keeps CLIP's projection as its classification head, and builds GELU (even for OpenAI's
# QuickGELU weights, its notes say) unless the name has `_quickgelu_`.
_CLIP = dict(projection_size=None, mlp_activation="gelu")
_CLIP_QUICK = dict(projection_size=None, mlp_activation="quick_gelu")
_CLIP_FIELDS = dict(pre_norm=True, patch_bias=False, layer_norm_epsilon=1e-5)
_DEIT3 = dict(prefix_position_embedding=False, layer_scale_init=1e-6)
_GAP = dict(pooling="gap")
# timm's DINOv3 names pool the mean patch token by default (upstream DINOv3 reads the class token); the
# plain names have no query or value bias, the _qkvb ones have them (as Hugging Face's and the rows).
_DINOV3_QKVB = dict(pooling="gap")
_DINOV3_PLAIN = dict(pooling="gap", qkv_bias="none")


def _sized(template, *sizes):
    return tuple(template.format(size) for size in sizes)


# (timm names, VARIANTS row, the fields timm's build of that name gives otherwise than the row).
_TABLE = (
    (_sized("vit_tiny_patch16_{}", 224, 384) + ("deit_tiny_patch16_224",), "Ti16", {}),
    (_sized("vit_small_patch16_{}", 224, 384) + ("deit_small_patch16_224",), "S16", {}),
    (_sized("vit_small_patch32_{}", 224, 384), "S32", {}),
    (("vit_base_patch8_224",), "B8", {}),
    (_sized("vit_base_patch16_{}", 224, 384) + _sized("deit_base_patch16_{}", 224, 384), "B16", {}),
    (_sized("vit_base_patch32_{}", 224, 384), "B32", {}),
    (_sized("vit_large_patch16_{}", 224, 384), "L16", {}),
    (_sized("vit_large_patch32_{}", 224, 384), "L32", {}),
    (("vit_huge_patch14_224",), "H14", {}),
    (("vit_giant_patch14_224",), "g14", {}),
    (("vit_gigantic_patch14_224",), "G14", {}),
    (("deit_tiny_distilled_patch16_224",), "DeiT_Ti16_distilled", {}),
    (("deit_small_distilled_patch16_224",), "DeiT_S16_distilled", {}),
    (_sized("deit_base_distilled_patch16_{}", 224, 384), "DeiT_B16_distilled", {}),
    (_sized("deit3_small_patch16_{}", 224, 384), "DeiT3_S16", {}),
    (_sized("deit3_base_patch16_{}", 224, 384), "DeiT3_B16", {}),
    (_sized("deit3_large_patch16_{}", 224, 384), "DeiT3_L16", {}),
    (("deit3_huge_patch14_224",), "H14", _DEIT3),
    (("vit_small_patch14_dinov2",), "DINOv2_S14", {}),
    (("vit_base_patch14_dinov2",), "DINOv2_B14", {}),
    (("vit_large_patch14_dinov2",), "DINOv2_L14", {}),
    (("vit_giant_patch14_dinov2",), "DINOv2_g14", {}),
    (("vit_small_patch14_reg4_dinov2",), "DINOv2_S14_reg4", {}),
    (("vit_base_patch14_reg4_dinov2",), "DINOv2_B14_reg4", {}),
    (("vit_large_patch14_reg4_dinov2",), "DINOv2_L14_reg4", {}),
    (("vit_giant_patch14_reg4_dinov2",), "DINOv2_g14_reg4", {}),
    (_sized("vit_base_patch16_siglip_{}", 224, 256, 384, 512), "SigLIP_B16", _SIGLIP),
    (_sized("vit_base_patch16_siglip_gap_{}", 224, 256, 384, 512), "SigLIP_B16", dict(_SIGLIP, **_GAP)),
    (_sized("vit_large_patch16_siglip_{}", 256, 384), "SigLIP_L16", _SIGLIP),
    (("vit_large_patch16_siglip_512",), "SigLIP_L16", _SIGLIP_TANH),
    (_sized("vit_large_patch16_siglip_gap_{}", 256, 384), "SigLIP_L16", dict(_SIGLIP, **_GAP)),
    (("vit_large_patch16_siglip_gap_512",), "SigLIP_L16", dict(_SIGLIP_TANH, **_GAP)),
    (_sized("vit_so400m_patch14_siglip_{}", 224, 378, 384), "SigLIP_So400m14", _SIGLIP),
    (_sized("vit_so400m_patch14_siglip_gap_{}", 224, 378, 384, 448, 896), "SigLIP_So400m14", dict(_SIGLIP, **_GAP)),
    (_sized("vit_base_patch32_clip_{}", 224, 256, 384, 448), "CLIP_B32", _CLIP),
    (_sized("vit_base_patch16_clip_{}", 224, 384), "CLIP_B16", _CLIP),
    (_sized("vit_large_patch14_clip_{}", 224, 336), "CLIP_L14", _CLIP),
    (("vit_base_patch32_clip_quickgelu_224",), "CLIP_B32", _CLIP_QUICK),
    (("vit_base_patch16_clip_quickgelu_224",), "CLIP_B16", _CLIP_QUICK),
    (_sized("vit_large_patch14_clip_quickgelu_{}", 224, 336), "CLIP_L14", _CLIP_QUICK),
    (_sized("vit_huge_patch14_clip_{}", 224, 336, 378), "H14", dict(_CLIP_FIELDS, **_CLIP)),
    (_sized("vit_huge_patch14_clip_quickgelu_{}", 224, 378), "H14", dict(_CLIP_FIELDS, **_CLIP_QUICK)),
    (("vit_giant_patch14_clip_224",), "g14", dict(_CLIP_FIELDS, **_CLIP)),
    (("vit_small_patch16_dinov3",), "DINOv3_S16", _DINOV3_PLAIN),
    (("vit_small_patch16_dinov3_qkvb",), "DINOv3_S16", _DINOV3_QKVB),
    (("vit_small_plus_patch16_dinov3",), "DINOv3_S16_plus", _DINOV3_PLAIN),
    (("vit_small_plus_patch16_dinov3_qkvb",), "DINOv3_S16_plus", _DINOV3_QKVB),
    (("vit_base_patch16_dinov3",), "DINOv3_B16", _DINOV3_PLAIN),
    (("vit_base_patch16_dinov3_qkvb",), "DINOv3_B16", _DINOV3_QKVB),
    (("vit_large_patch16_dinov3",), "DINOv3_L16", _DINOV3_PLAIN),
    (("vit_large_patch16_dinov3_qkvb",), "DINOv3_L16", _DINOV3_QKVB),
    (("vit_huge_plus_patch16_dinov3",), "DINOv3_H16_plus", _DINOV3_PLAIN),
    (("vit_huge_plus_patch16_dinov3_qkvb",), "DINOv3_H16_plus", _DINOV3_QKVB),
    # EVA-02: the MIM sizes and their 336 and 448 px fine-tunes (its CLIP towers, a LayerNorm inside the
    # attention, are not rows).
    (_sized("eva02_tiny_patch14_{}", 224, 336), "EVA02_Ti14", {}),
    (_sized("eva02_small_patch14_{}", 224, 336), "EVA02_S14", {}),
    (_sized("eva02_base_patch14_{}", 224, 448), "EVA02_B14", {}),
    (_sized("eva02_large_patch14_{}", 224, 448), "EVA02_L14", {}),
    (("vit_pe_core_tiny_patch16_384",), "PE_Core_T16", {}),
    (("vit_pe_core_small_patch16_384",), "PE_Core_S16", {}),
    (("vit_pe_core_base_patch16_224",), "PE_Core_B16", {}),
    (("vit_pe_core_large_patch14_336",), "PE_Core_L14", {}),
    (("vit_pe_core_gigantic_patch14_448",), "PE_Core_G14", {}),
    (("flexivit_small",), "S16", dict(prefix_position_embedding=False)),
    (("flexivit_base",), "B16", dict(prefix_position_embedding=False)),
    (("flexivit_large",), "L16", dict(prefix_position_embedding=False)),
)
TIMM_ARCHITECTURES: dict[str, tuple[str, dict]] = {name: (row, fields) for names, row, fields in _TABLE for name in names}


# timm's default input side for names that do not end in it, where it differs from their row's.
_IMAGE_SIDES = {"flexivit_": 240, "_dinov3": 256}


def timm_image_size(name):
    """timm's default input side for model `name` (a key of `TIMM_ARCHITECTURES`): its pretrained config's.

    Example:

    >>> timm_image_size("vit_base_patch16_384"), timm_image_size("vit_small_patch14_dinov2")
    (384, 518)
    """
    match = re.fullmatch(r".*_(\d+)", name)
    if match:
        return int(match.group(1))
    sides = [side for part, side in _IMAGE_SIDES.items() if part in name]
    return sides[0] if sides else VARIANTS[TIMM_ARCHITECTURES[name][0]].image_size


def eva_architecture(name):
    """Whether timm builds `name` (a key of `TIMM_ARCHITECTURES`) with its Eva class, not its VisionTransformer.

    Example:

    >>> eva_architecture("vit_small_patch16_dinov3"), eva_architecture("vit_small_patch16_224")
    (True, False)
    """
    return VARIANTS[TIMM_ARCHITECTURES[name][0]].family in EVA_FAMILIES


def supported_patterns():
    """The names of `TIMM_ARCHITECTURES` with their image sizes folded, for messages.

    Example:

    >>> [pattern for pattern in supported_patterns() if pattern.startswith("vit_base_patch16_siglip")]
    ['vit_base_patch16_siglip_{224,256,384,512}', 'vit_base_patch16_siglip_gap_{224,256,384,512}']
    """
    groups = {}
    for name in TIMM_ARCHITECTURES:
        match = re.fullmatch(r"(.*)_(\d+)", name)
        stem, size = (match.group(1), match.group(2)) if match else (name, None)
        groups.setdefault(stem, []).append(size)
    return [stem if sizes == [None] else f"{stem}_{{{','.join(s for s in sizes if s)}}}" if len(sizes) > 1
            else f"{stem}_{sizes[0]}" for stem, sizes in groups.items()]


def architecture_fields(name, where):
    """The architecture fields timm builds for model `name` (no model_args): its row, then the table's changes.

    Args:
        name: str. A timm model name, e.g. "vit_base_patch16_224".
        where: str. The file that names it, for messages.
    """
    if name not in TIMM_ARCHITECTURES:
        raise CheckpointError(
            f"{where}: architecture={name!r} is not a timm ViT architecture keras_vit has a row for. Supported: "
            + ", ".join(supported_patterns()) + "."
        )
    row_name, changes = TIMM_ARCHITECTURES[name]
    row = VARIANTS[row_name]
    fields = {key: getattr(row, key) for key in CORE_FIELDS + FAMILY_FIELDS}
    fields.update(channels=3)  # timm's in_chans default
    fields.update(changes)
    fields["rope"] = rope_settings(fields["rope"])
    if fields["pooling"] == "auto":
        fields["pooling"] = "token" if fields["class_token"] else "gap"
    return fields


# timm's global_pool -> keras_vit's pooling ("" keeps every token).
GLOBAL_POOLS = {"token": "token", "avg": "gap", "max": "max", "map": "map", "": None}
# timm's act_layer names -> (mlp_activation, approximate_gelu).
ACTIVATIONS = {"gelu": ("gelu", False), "gelu_tanh": ("gelu", True), "quick_gelu": ("quick_gelu", False)}
# model_args of timm's VisionTransformer that only change training or run-time behaviour, not the weights' meaning.
_RUN_TIME_ARGS = ("dynamic_img_size", "dynamic_img_pad", "weight_init", "fix_init", "drop_rate", "pos_drop_rate",
                  "patch_drop_rate", "proj_drop_rate", "attn_drop_rate", "drop_path_rate")
# model_args keras_vit builds only at timm's default value: name -> that value.
_FIXED_ARGS = {"qk_norm": False, "proj_bias": True, "final_norm": True, "scale_attn_norm": False,
               "pool_include_prefix": False}
_ARCHITECTURE_ARGS = ("img_size", "patch_size", "in_chans", "num_classes", "global_pool", "embed_dim", "depth",
                      "num_heads", "mlp_ratio", "init_values", "class_token", "pos_embed", "no_embed_class",
                      "reg_tokens", "pre_norm", "fc_norm", "act_layer", "qkv_bias", "scale_mlp_norm")
# The families timm builds with its Eva class, and Eva's model_args: the architecture ones (those
# named as VisionTransformer's mean the same, but under attn_type "eva" qkv_bias gives the query and
# value a bias, never the key; `_EVA_RENAMED` are VisionTransformer's under other names), those
# keras_vit builds at one value only, and the run-time ones (rope_*_coords: training-time coordinate
# augmentation).
EVA_FAMILIES = ("dinov3", "eva02", "pe")
_EVA_RENAMED = {"num_reg_tokens": "reg_tokens", "use_fc_norm": "fc_norm", "use_pre_transformer_norm": "pre_norm",
                "scale_mlp": "scale_mlp_norm"}
_EVA_ARGS = (
    ("img_size", "patch_size", "in_chans", "num_classes", "global_pool", "embed_dim", "depth", "num_heads", "mlp_ratio",
     "qkv_bias", "init_values", "class_token", "no_embed_class", "num_reg_tokens", "use_fc_norm", "use_abs_pos_emb",
     "use_rot_pos_emb", "rope_type", "rope_temperature", "rope_rotate_half", "rope_grid_offset", "rope_grid_indexing",
     "ref_feat_shape", "swiglu_mlp", "swiglu_align_to", "use_pre_transformer_norm", "attn_type", "attn_pool_num_heads",
     "attn_pool_mlp_ratio", "scale_mlp", "qkv_fused"),
    {"qk_norm": False, "scale_attn_inner": False, "use_post_norm": False, "attn_only_layer_scale": False,
     "num_kv_heads": None, "dynamic_img_pad": False},
    ("dynamic_img_size", "drop_rate", "pos_drop_rate", "patch_drop_rate", "proj_drop_rate", "attn_drop_rate",
     "drop_path_rate", "rope_shift_coords", "rope_jitter_coords", "rope_rescale_coords", "head_init_scale"),
)
# The model_args each Eva family's timm names are built with that their rows do not state as such: the attention
# ("eva": query and value biases; "rope": one fused qkv bias) and the attention pool's heads and MLP ratio.
_EVA_NAME_ARGS = {"dinov3": {"attn_type": "eva"}, "eva02": {"attn_type": "eva"},
                  "pe": {"attn_type": "rope", "attn_pool_num_heads": 8, "attn_pool_mlp_ratio": 4.0}}
# timm's rope_type -> the grid of keras_vit's rotary settings (`keras_vit.layers.rotary_embedding`).
ROPE_TYPES = {"dinov3": "centered", "cat": "index"}
# The rotary position Eva builds with use_rot_pos_emb=True and no other rope_* argument.
_EVA_ROPE = dict(grid="index", theta=10000.0, offset=0.0, reference_grid=None, axes="yx", layout="interleaved")


def config_architecture(config, path):
    """The architecture fields a timm `config.json` states: its `architecture`'s, then its `model_args`.

    Returns a dict of `keras_vit.configs.ARCHITECTURE_FIELDS` (num_classes None without a head)
    plus "grid_size" when model_args give img_size.

    Args:
        config: dict. The parsed config.json.
        path: str. Its path, for messages.
    """
    name = config.get("architecture")
    if not isinstance(name, str):
        raise CheckpointError(f"timm config {path!r}: architecture is {name!r}; expected a timm model name.")
    fields = architecture_fields(name, f"timm config {path!r}")
    args = config.get("model_args", {})
    if not isinstance(args, dict):
        raise CheckpointError(f"timm config {path!r}: model_args is {args!r}; expected a JSON object.")
    eva = eva_architecture(name)
    family = VARIANTS[TIMM_ARCHITECTURES[name][0]].family
    known, fixed, run_time = _EVA_ARGS if eva else (_ARCHITECTURE_ARGS, _FIXED_ARGS, _RUN_TIME_ARGS)
    unknown = sorted(set(args) - set(known) - set(fixed) - set(run_time))
    if unknown:
        raise CheckpointError(
            f"timm config {path!r}: model_args {unknown} are not arguments keras_vit reads for {name!r} "
            f"(timm's {'Eva' if eva else 'VisionTransformer'}); it reads {sorted(known + tuple(fixed))} (and ignores "
            f"the run-time {sorted(run_time)})."
        )
    shown = {}
    if eva:  # read under VisionTransformer's names below, named as written in messages
        shown = {_EVA_RENAMED[key]: key for key in args if key in _EVA_RENAMED}
        args = {_EVA_RENAMED.get(key, key): value for key, value in args.items()}

    def refuse(key, expected):
        return CheckpointError(f"timm config {path!r}: model_args.{shown.get(key, key)} is {args[key]!r}; {expected}.")

    for key, value in fixed.items():
        if key in args and args[key] != value:
            raise refuse(key, f"keras_vit builds {key}={value} only")
    for key, field in (("embed_dim", "hidden_size"), ("depth", "num_layers"), ("num_heads", "num_heads"),
                       ("in_chans", "channels")):
        if key in args:
            if not _is_positive_int(args[key]):
                raise refuse(key, "expected an integer >= 1")
            fields[field] = args[key]
    if "patch_size" in args:
        fields["patch_size"] = _square(args, "patch_size", refuse)
    if "mlp_ratio" in args and not eva:  # Eva's SwiGLU counts it otherwise (_eva_fields)
        width = int(fields["hidden_size"] * _ratio(args, refuse))
        # timm's packed SwiGLU holds gate and value in one Linear of that width.
        fields["mlp_dim"] = width // 2 if fields["mlp_activation"] == "swiglu" else width
    elif "embed_dim" in args:
        fields["mlp_dim"] = None  # the name's mlp_ratio times another width: the tensors state it
    for key, field in (("class_token", "class_token"), ("pre_norm", "pre_norm")):
        if key in args:
            fields[field] = _flag(args, key, refuse)
    if "qkv_bias" in args and not eva:  # Eva's depends on its attention (_eva_fields)
        fields["qkv_bias"] = "qkv" if _flag(args, "qkv_bias", refuse) else "none"
    if "pre_norm" in args:
        fields["patch_bias"] = not args["pre_norm"]  # timm drops the patch bias exactly when it adds ln_pre
    if "no_embed_class" in args:
        fields["prefix_position_embedding"] = not _flag(args, "no_embed_class", refuse)
    if "reg_tokens" in args:
        if not (isinstance(args["reg_tokens"], int) and not isinstance(args["reg_tokens"], bool) and args["reg_tokens"] >= 0):
            raise refuse("reg_tokens", "expected an integer >= 0")
        fields["num_register_tokens"] = args["reg_tokens"]
    if "init_values" in args:
        value = args["init_values"]
        if value is not None and not (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0):
            raise refuse("init_values", "expected null (no LayerScale) or a number > 0")
        fields["layer_scale_init"] = float(value) if value is not None else None
    if "act_layer" in args:
        if args["act_layer"] not in ACTIVATIONS:
            raise refuse("act_layer", f"expected one of {sorted(ACTIVATIONS)}")
        fields["mlp_activation"], fields["approximate_gelu"] = ACTIVATIONS[args["act_layer"]]
    if "pos_embed" in args:
        if args["pos_embed"] not in ("learn", "none", ""):
            raise refuse("pos_embed", "expected 'learn' or 'none'")
        fields["position_embedding"] = "learned" if args["pos_embed"] == "learn" else "none"
    if eva:
        _eva_fields(fields, {**_EVA_NAME_ARGS[family], **args}, refuse)
    pool = args.get("global_pool", config.get("global_pool"))
    if pool is not None:
        if pool not in GLOBAL_POOLS:
            where = "model_args.global_pool" if "global_pool" in args else "global_pool"
            raise CheckpointError(f"timm config {path!r}: {where} is {pool!r}; keras_vit pools with "
                                  f"{sorted(GLOBAL_POOLS)}.")
        fields["pooling"] = GLOBAL_POOLS[pool]
    if args.get("fc_norm") is not None:
        fields["fc_norm"] = _flag(args, "fc_norm", refuse)
    if "scale_mlp_norm" in args:  # a LayerNorm on the MLP's hidden layer (Eva: scale_mlp)
        fields["mlp_norm"] = _flag(args, "scale_mlp_norm", refuse)
    if "img_size" in args:
        size = args["img_size"]
        size = [size, size] if _is_positive_int(size) else size
        if not (isinstance(size, list) and len(size) == 2 and all(_is_positive_int(v) for v in size)):
            raise refuse("img_size", "expected an integer or [height, width]")
        fields["grid_size"] = (size[0] // fields["patch_size"], size[1] // fields["patch_size"])
    classes = args.get("num_classes", config.get("num_classes"))
    if classes is not None:
        if not (isinstance(classes, int) and not isinstance(classes, bool) and classes >= 0):
            raise CheckpointError(f"timm config {path!r}: num_classes is {classes!r}; expected an integer >= 0.")
        fields["num_classes"] = classes or None
    return fields


def _eva_fields(fields, args, refuse):
    """The fields of the model_args only timm's Eva has: absolute and rotary position, its SwiGLU and MLP width, its
    attention's biases and its attention pool's heads and MLP width."""
    if args["attn_type"] not in ("eva", "rope"):
        raise refuse("attn_type", "keras_vit builds attn_type 'eva' and 'rope'")
    biased = _flag(args, "qkv_bias", refuse) if "qkv_bias" in args else fields["qkv_bias"] != "none"
    fields["qkv_bias"] = ("qv" if args["attn_type"] == "eva" else "qkv") if biased else "none"
    if "use_abs_pos_emb" in args:
        fields["position_embedding"] = "learned" if _flag(args, "use_abs_pos_emb", refuse) else "none"
    if "swiglu_mlp" in args:
        fields["mlp_activation"] = "swiglu" if _flag(args, "swiglu_mlp", refuse) else "gelu"
    align = args.get("swiglu_align_to", 0)
    if not (isinstance(align, int) and not isinstance(align, bool) and align >= 0):
        raise refuse("swiglu_align_to", "expected an integer >= 0")
    if "mlp_ratio" in args:
        # Eva's SwiGLU has gate and value Linears of this width each, rounded up to swiglu_align_to.
        width = int(fields["hidden_size"] * _ratio(args, refuse))
        fields["mlp_dim"] = width + (-width % align if align and fields["mlp_activation"] == "swiglu" else 0)
    # The pool's own heads and MLP width; None: the blocks' (timm's `attn_pool_* or` the blocks' value).
    if "attn_pool_num_heads" in args:
        heads = args["attn_pool_num_heads"]
        if heads is not None and not _is_positive_int(heads):
            raise refuse("attn_pool_num_heads", "expected null or an integer >= 1")
        fields["pooling_heads"] = heads
    if "attn_pool_mlp_ratio" in args:
        ratio = args["attn_pool_mlp_ratio"]
        fields["pooling_mlp_dim"] = None if ratio is None else int(
            fields["hidden_size"] * _ratio(args, refuse, "attn_pool_mlp_ratio"))
    if "qkv_fused" in args:
        _flag(args, "qkv_fused", refuse)  # one Linear or three: the same attention, the reader takes either
    if "use_rot_pos_emb" in args and not _flag(args, "use_rot_pos_emb", refuse):
        fields["rope"] = None
        return
    if fields["rope"] is None and not args.get("use_rot_pos_emb"):
        return  # no rotary position: Eva ignores the rope_* arguments
    settings = dict(fields["rope"] or _EVA_ROPE)
    if "rope_type" in args:
        if args["rope_type"] not in ROPE_TYPES:
            raise refuse("rope_type", f"keras_vit builds rope_type {sorted(ROPE_TYPES)}")
        settings["grid"] = ROPE_TYPES[args["rope_type"]]
    if "rope_temperature" in args:
        value = args["rope_temperature"]
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0):
            raise refuse("rope_temperature", "expected a number > 0")
        settings["theta"] = float(value)
    if "rope_rotate_half" in args:
        settings["layout"] = "half" if _flag(args, "rope_rotate_half", refuse) else "interleaved"
    if "rope_grid_offset" in args:
        value = args["rope_grid_offset"]
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)):
            raise refuse("rope_grid_offset", "expected a number")
        settings["offset"] = float(value)
    if "rope_grid_indexing" in args:
        if args["rope_grid_indexing"] not in ("ij", "xy"):
            raise refuse("rope_grid_indexing", "expected 'ij' or 'xy'")
        settings["axes"] = "yx" if args["rope_grid_indexing"] == "ij" else "xy"
    if "ref_feat_shape" in args and settings["grid"] == "index":  # the DINOv3 rope of timm ignores it
        shape = args["ref_feat_shape"]
        shape = [shape, shape] if _is_positive_int(shape) else shape
        if shape is not None and not (isinstance(shape, list) and len(shape) == 2
                                      and all(map(_is_positive_int, shape))):
            raise refuse("ref_feat_shape", "expected null, an integer or [rows, cols]")
        settings["reference_grid"] = tuple(shape) if shape is not None else None
    fields["rope"] = rope_settings(settings)


def _flag(args, key, refuse):
    if not isinstance(args[key], bool):
        raise refuse(key, "expected true or false")
    return args[key]


def _ratio(args, refuse, key="mlp_ratio"):
    ratio = args[key]
    if not (isinstance(ratio, (int, float)) and not isinstance(ratio, bool) and ratio > 0):
        raise refuse(key, "expected a number > 0")
    return ratio


def _square(args, key, refuse):
    value = args[key]
    if isinstance(value, list) and len(value) == 2 and value[0] == value[1]:
        value = value[0]
    if not _is_positive_int(value):
        raise refuse(key, "expected an integer >= 1 (square patches)")
    return value


def _is_positive_int(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1
