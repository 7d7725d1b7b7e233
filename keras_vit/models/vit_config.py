"""A ViT's configuration resolved and checked: `resolve_config`, whose dict `keras_vit.models.vit.build` reads.

The sources of each field, first found wins: the builder's arguments, the variant's row of
`keras_vit.configs.VARIANTS` (or a timm model name), the checkpoint's architecture, the
defaults. A given value that contradicts the checkpoint is refused, every contradiction in one
message; each field is then checked by name.

Example:

>>> config = resolve_config("tiny", num_classes=10, pooling="gap")
>>> config["pooling"], config["name"], pixel_patch(config)
('gap', 'vit_tiny', 4)
"""

from __future__ import annotations

import dataclasses

import keras

from keras_vit import configs
from keras_vit._validation import (
    check_bool,
    check_choice,
    check_divisible,
    check_positive_int,
    check_positive_number,
    check_rate,
    plain,
)
from keras_vit.layers.grid_resampling import INTERPOLATIONS
from keras_vit.layers.naflex_patch_encoder import NAFLEX_INTERPOLATION
from keras_vit.layers.patch_encoder import POSITION_EMBEDDINGS
from keras_vit.layers.rotary_embedding import rope_settings
from keras_vit.layers.self_attention import QKV_BIASES
from keras_vit.layers.token_pooling import ALL_POOLINGS
from keras_vit.layers.transformer_block import MLP_ACTIVATIONS
from keras_vit.weights.timm_names import TIMM_ARCHITECTURES, timm_image_size


def resolve_config(variant=None, checkpoint=None, *, backbone=None, **arguments):
    """Resolves every field of a ViT into one serializable config: what `build` reads.

    Sources, first found wins: the explicit `arguments` (None or "auto" = not given), the
    `variant` row, the checkpoint's `architecture`, the defaults. A given value (explicit or the
    variant's) that differs from the checkpoint's in a field outside
    `keras_vit.configs.ADJUSTABLE_FIELDS` is a contradiction: one ValueError lists them all.

    Args:
        variant: str or None. A row of `keras_vit.configs.VARIANTS` or a timm model name. Defaults to None.
        checkpoint: `keras_vit.weights.Checkpoint` or None. Defaults to None.
        backbone: Keras model or layer or None. A custom stem replaces the variant's or the
            checkpoint's; it is not part of the config. Defaults to None.
        **arguments: the architecture and build arguments of `ViT`, by name.

    Returns:
        dict: every field of `keras_vit.configs.ARCHITECTURE_FIELDS`, plus image_size,
        include_top, classifier_activation, preprocessing, dropout rates, fused_attention,
        interpolation, name and backbone (None, or the name of a custom backbone).

    Example:

    >>> config = resolve_config("tiny", num_classes=10)
    >>> config["patch_size"], config["num_heads"], config["pooling"], config["image_size"]
    (4, 2, 'token', (32, 32))
    """
    row, timm_changes = _variant_row(variant)
    found = checkpoint.architecture if checkpoint is not None else {}
    arguments = {key: plain(value) for key, value in arguments.items()}
    given = {key: value for key, value in arguments.items() if not _is_unset(key, value)}
    from_variant = _variant_fields(row, timm_changes, backbone)
    for source in (given, from_variant):  # a variant name or partial settings, compared with the file's in full
        if source.get("rope") is not None:
            source["rope"] = rope_settings(source["rope"])
    if backbone is not None:
        given.update(stem=None, stem_width=None)
        found = {key: value for key, value in found.items() if key not in ("stem", "stem_width", "channels")}
    config = _merged(given, from_variant, found, variant, checkpoint)
    _fill_defaults(config, checkpoint, given)
    _check_config(config, checkpoint)
    _resolve_input_size(config, arguments.get("image_size", "auto"), row, found, backbone)
    _resolve_build_arguments(config, arguments, checkpoint, variant, backbone)
    return config


def _variant_fields(row, timm_changes, backbone):
    """The fields the variant's row states: its core fields, the family fields it sets apart from the paper's, its stem."""
    if row is None:
        return {}
    from_variant = {key: getattr(row, key) for key in configs.CORE_FIELDS}
    from_variant.update({key: getattr(row, key) for key in configs.FAMILY_FIELDS
                         if getattr(row, key) != configs.FAMILY_DEFAULTS[key]})
    from_variant.update(timm_changes)
    if from_variant.get("pooling") == "auto":
        del from_variant["pooling"]
    if backbone is None:
        from_variant.update(stem=row.stem, stem_width=row.stem_width if row.stem is not None else None)
    return from_variant


def _merged(given, from_variant, found, variant, checkpoint):
    """Every architecture field, first found in `given`, `from_variant`, `found` (the file's); contradictions refused."""
    conflicts = []
    config = {}
    for field in configs.ARCHITECTURE_FIELDS:
        value, source = None, None
        if field in given:
            value, source = given[field], "given"
        elif field in from_variant:
            value, source = from_variant[field], f"variant={variant!r}"
        file_value = found.get(field)
        # A patch size differs from the file's only when asked for (FlexiViT resize), not through a variant.
        adjustable = field in configs.ADJUSTABLE_FIELDS and (field != "patch_size" or source == "given")
        if source is not None and file_value is not None and not adjustable:
            if _normalized(value) != _normalized(file_value):
                conflicts.append(f"{field}: {value!r} ({source}), the file has {file_value!r}")
        config[field] = value if source is not None else file_value
    if conflicts:
        raise ValueError(
            f"The arguments contradict the checkpoint {checkpoint.path!r} ({checkpoint.layout} layout):\n  "
            + "\n  ".join(conflicts)
            + "\nLeave these arguments (and variant=) out to build what the file holds."
        )
    return config


def _resolve_input_size(config, image_size, row, found, backbone):
    """Sets the config's image_size and grid_size: a NaFlex model has no image size, only its position grid."""
    config["image_size"] = _builder_image_size(image_size, config, row, found, backbone)
    dynamic = config["image_size"] is None or None in config["image_size"]
    config["grid_size"] = _resolve_grid(config, row, found, backbone) if dynamic else None
    if config["naflex"]:  # no image size: the grid the position table is stored for
        if not dynamic:
            pixels = pixel_patch(config)
            config["grid_size"] = (config["image_size"][0] // pixels, config["image_size"][1] // pixels)
        config["image_size"] = None


def _resolve_build_arguments(config, arguments, checkpoint, variant, backbone):
    """Sets and checks what the config carries beside the architecture (`BUILD_DEFAULTS`, interpolation, backbone)."""
    for key in BUILD_DEFAULTS:
        config[key] = arguments.get(key, BUILD_DEFAULTS[key])
    if config["include_top"] is None:
        config["include_top"] = True
    # NaFlex is defined with its own resampling (SigLIP 2's), whatever file its weights come from.
    config["interpolation"] = arguments.get("interpolation") or (
        NAFLEX_INTERPOLATION if config["naflex"]
        else checkpoint.record.interpolation if checkpoint is not None else "bicubic")
    config["name"] = config["name"] or _default_name(variant)
    if config["image_processor"] is None and checkpoint is not None and not config["naflex"]:
        # The checkpoint's own resize and crop of a photo (keras_vit.image_processor), which predictors apply.
        record = checkpoint.preprocessing
        config["image_processor"] = None if record is None else record.processor
    config["backbone"] = getattr(backbone, "name", type(backbone).__name__) if backbone is not None else None
    _check_build_arguments(config)
    if config["naflex"] and (config["preprocessing"] is not None or backbone is not None):
        raise ValueError(
            f"naflex=True (given, the variant's or the checkpoint's) takes patch sequences, not images: it cannot have "
            f"{'preprocessing=' + repr(config['preprocessing']) if config['preprocessing'] is not None else 'a backbone'}. "
            "keras_vit.naflex.naflex_inputs scales the pixels (scaling=) while it cuts the patches; naflex=False "
            "builds the same weights on images."
        )


# The build arguments a config carries besides the architecture; `keras_vit.models.vit.build` fills
# them into a config saved before one of them existed.
BUILD_DEFAULTS = {
    "include_top": True, "classifier_activation": "softmax", "preprocessing": None, "dropout_rate": 0.0,
    "attention_dropout_rate": 0.0, "drop_path_rate": 0.0, "fused_attention": "auto", "name": None,
    "image_processor": None, "head_norm": None, "class_names": None,
}
HEAD_NORMS = (None, "l2")


def _variant_row(variant):
    """The table row `variant` names and the fields a timm name changes on it; (None, {}) without a variant.

    A timm model name (a key of `keras_vit.weights.timm_names.TIMM_ARCHITECTURES`, e.g.
    "vit_small_patch16_224") stands for its row built as timm builds that name, at timm's default size.
    """
    if variant is None:
        return None, {}
    if isinstance(variant, str) and variant in TIMM_ARCHITECTURES:
        row_name, changes = TIMM_ARCHITECTURES[variant]
        return dataclasses.replace(configs.VARIANTS[row_name], image_size=timm_image_size(variant)), dict(changes)
    return configs.get_variant(variant), {}


def _is_unset(key, value):
    if key in ("pooling", "representation_size", "projection_size", "rope"):  # None is a choice: no pooling, no layer
        return isinstance(value, str) and value == "auto"
    return value is None


def _normalized(value):
    return tuple(value) if isinstance(value, list) else value


def _fill_defaults(config, checkpoint, given):
    """Defaults for what neither the arguments, the variant nor the checkpoint say."""
    if config["naflex"] is None:
        config["naflex"] = False
    if config["class_token"] is None:
        config["class_token"] = not config["naflex"]  # NaFlex's sequences are patches alone
    if "pooling" in given:
        config["pooling"] = "gap" if given["pooling"] == "avg" else given["pooling"]
    elif config["pooling"] is None:
        config["pooling"] = "token" if config["class_token"] else "gap"
    if config["position_embedding"] is None:
        if checkpoint is not None:
            raise ValueError(
                f"The checkpoint {checkpoint.path!r} stores no position embedding, which leaves its kind "
                "open ('none' or the fixed 'sincos2d'; a rotary model such as timm's DINOv3 stores none either): "
                "pass position_embedding= to say which (and rope=, or load the timm Hub folder whose config.json "
                "names the architecture)."
            )
        config["position_embedding"] = "learned"
    if config["channels"] is None:
        config["channels"] = 3
    if config["approximate_gelu"] is None:
        config["approximate_gelu"] = False
    if config["layer_norm_epsilon"] is None:
        config["layer_norm_epsilon"] = 1e-6
    if config["num_classes"] is None:
        config["num_classes"] = 1000
    if config["mlp_activation"] is None and checkpoint is not None:
        raise ValueError(
            f"The checkpoint {checkpoint.path!r} ({checkpoint.layout} layout) does not say its MLP activation "
            "(a timm CLIP tower: OpenAI's weights use QuickGELU, LAION's and DFN's GELU): pass "
            "mlp_activation='quick_gelu' or mlp_activation='gelu'."
        )
    for field in _PAPER_DEFAULTED:
        if config[field] is None:
            config[field] = configs.FAMILY_DEFAULTS[field]
    if config["stem"] is not None:
        config["stem"] = tuple(config["stem"])
        config["stem_width"] = config["stem_width"] or 64


# Family fields that take the paper ViT's value when neither the arguments, the variant nor the
# checkpoint state one (class_token, pooling, GELU form and epsilon have their own rules above;
# None is itself the paper's value of layer_scale_init, projection_size and rope).
_PAPER_DEFAULTED = ("distillation_token", "num_register_tokens", "prefix_position_embedding", "mlp_activation",
                    "pre_norm", "patch_bias", "qkv_bias", "mlp_norm", "fc_norm")


def _check_config(config, checkpoint):
    missing = [key for key in configs.CORE_FIELDS if config[key] is None]
    if missing and checkpoint is not None:
        why = " (timm fuses query, key and value, which hides the head count)" if checkpoint.layout == "timm" else ""
        raise ValueError(
            f"The checkpoint {checkpoint.path!r} ({checkpoint.layout} layout) does not store "
            f"{', '.join(missing)}{why}: pass " + ", ".join(f"{key}=" for key in missing) + " (or variant=)."
        )
    if missing:
        raise ValueError(
            f"Pass variant= (one of {sorted(configs.VARIANTS)}) or all of the architecture "
            f"arguments; missing: {', '.join(missing)}."
        )
    for key in configs.CORE_FIELDS + ("channels",):
        check_positive_int(key, config[key])
    check_divisible("hidden_size", config["hidden_size"], "num_heads", config["num_heads"])
    check_choice("position_embedding", config["position_embedding"], POSITION_EMBEDDINGS)
    check_choice("pooling", config["pooling"], ALL_POOLINGS + ("avg", None))
    check_choice("mlp_activation", config["mlp_activation"], MLP_ACTIVATIONS)
    check_choice("qkv_bias", config["qkv_bias"], QKV_BIASES)
    config["rope"] = rope_settings(config["rope"])
    if config["rope"] is not None and (config["hidden_size"] // config["num_heads"]) % 4:
        raise ValueError(
            f"Invalid rope={config['rope']!r} with hidden_size={config['hidden_size']} and num_heads="
            f"{config['num_heads']}: 2-D rotary position needs a head width (hidden_size / num_heads = "
            f"{config['hidden_size'] // config['num_heads']}) divisible by 4."
        )
    for key in ("representation_size", "projection_size", "pooling_heads", "pooling_mlp_dim"):
        if config[key] is not None:
            check_positive_int(key, config[key])
    configs.fold_pooling_fields(config)  # a row, a file and an argument stating the blocks' value agree
    if config["pooling_heads"] is not None:
        check_divisible("hidden_size", config["hidden_size"], "pooling_heads", config["pooling_heads"])
    registers = config["num_register_tokens"]
    if not isinstance(registers, int) or isinstance(registers, bool) or registers < 0:
        raise ValueError(f"Invalid num_register_tokens={registers!r}. Expected an integer >= 0.")
    if config["layer_scale_init"] is not None:
        check_positive_number("layer_scale_init", config["layer_scale_init"])
    check_positive_number("layer_norm_epsilon", config["layer_norm_epsilon"])
    for key in ("class_token", "approximate_gelu", "distillation_token", "prefix_position_embedding", "pre_norm",
                "patch_bias", "naflex", "mlp_norm", "fc_norm"):
        check_bool(key, config[key])
        config[key] = bool(config[key])  # NumPy's bool as Python's, for the JSON config
    if config["distillation_token"] and not config["class_token"]:
        raise ValueError("distillation_token=True needs class_token=True (DeiT puts it after the class token).")
    if config["pooling"] in ("token", "token_and_mean") and not config["class_token"]:
        raise ValueError(f"pooling={config['pooling']!r} needs class_token=True; use pooling='gap' without a class token.")
    if config["naflex"]:
        _check_naflex(config)


def _check_naflex(config):
    """Refuses what a NaFlex model (patch sequences, no prefix tokens, a learned grid) cannot have, naming it."""
    found = [f"{key}={config[key]!r}" for key, plain_value in (
        ("class_token", False), ("distillation_token", False), ("num_register_tokens", 0), ("position_embedding", "learned"),
        ("stem", None), ("rope", None)) if config[key] != plain_value]
    if found:
        raise ValueError(
            f"naflex=True embeds patch sequences alone with a learned position grid (SigLIP 2 NaFlex); it cannot "
            f"have {', '.join(found)}. Pass naflex=False for a model on images."
        )


def _check_build_arguments(config):
    check_choice("interpolation", config["interpolation"], INTERPOLATIONS)
    check_choice("head_norm", config["head_norm"], HEAD_NORMS)
    names = config["class_names"]
    if names is not None:
        if not (isinstance(names, (list, tuple)) and all(isinstance(name, str) and name for name in names)
                and len(set(names)) == len(names) and config["include_top"] and len(names) == config["num_classes"]):
            raise ValueError(f"Invalid class_names={names!r}: expected num_classes={config['num_classes']} distinct "
                             "non-empty names of a model with include_top=True.")
        config["class_names"] = list(names)
    check_choice("preprocessing", config["preprocessing"], tuple(configs.SCALINGS) + (None,))
    check_bool("include_top", config["include_top"])
    config["include_top"] = bool(config["include_top"])
    if config["include_top"]:
        try:
            keras.activations.get(config["classifier_activation"])
        except (ValueError, TypeError):
            raise ValueError(
                f"Invalid classifier_activation={config['classifier_activation']!r}. Expected None (logits), a "
                "Keras activation name such as 'softmax', or a callable."
            ) from None
        num_classes = config["num_classes"]
        if not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes < 1:
            raise ValueError(f"Invalid num_classes={num_classes!r}: include_top=True needs an integer >= 1.")
        if config["pooling"] is None:
            raise ValueError(
                "include_top=True needs pooling='token', 'gap', 'avg', 'max', 'map' or 'token_and_mean', got pooling=None.")
        if config["distillation_token"] and config["pooling"] != "token":
            raise ValueError(
                f"A distilled model's two heads read the class and distillation tokens: include_top=True "
                f"needs pooling='token', got pooling={config['pooling']!r}."
            )
    for rate_name in ("dropout_rate", "attention_dropout_rate", "drop_path_rate"):
        check_rate(rate_name, config[rate_name])


def pixel_patch(config):
    """Pixels behind one token's side, through the config's own stem if any."""
    return config["patch_size"] * configs.stem_stride(config["stem"])


def _builder_image_size(image_size, config, row, found, backbone):
    """The builder's `image_size` argument resolved: "auto" is the checkpoint's grid or the row's side.

    (A training run's side, chosen from its data, is `keras_vit.models.spec.resolve_image_size`.)
    """
    if isinstance(image_size, str):
        if image_size != "auto":
            raise ValueError(f"Invalid image_size={image_size!r}. Expected an int, (height, width), None or 'auto'.")
        grid = found.get("grid_size")
        if grid is not None and backbone is None:
            # The file's own patch: a new patch_size= (FlexiViT resize) keeps the image size.
            pixels = pixel_patch({**config, "patch_size": found.get("patch_size") or config["patch_size"]})
            return (grid[0] * pixels, grid[1] * pixels)
        side = row.image_size if row is not None else configs.DEFAULT_IMAGE_SIZE
        return (side, side)
    if image_size is None:
        return None
    if isinstance(image_size, int) and not isinstance(image_size, bool):
        return (image_size, image_size)
    if isinstance(image_size, (tuple, list)) and len(image_size) == 2:
        return None if tuple(image_size) == (None, None) else tuple(image_size)
    raise ValueError(f"Invalid image_size={image_size!r}. Expected an int or (height, width).")


def _resolve_grid(config, row, found, backbone):
    """The grid a dynamic-size model stores its learned position embedding for."""
    if found.get("grid_size") is not None:
        return tuple(found["grid_size"])
    side = row.image_size if row is not None else configs.DEFAULT_IMAGE_SIZE
    if backbone is not None:
        side = backbone.compute_output_shape((1, side, side, config["channels"]))[1] // config["patch_size"]
    else:
        side //= pixel_patch(config)
    return (side, side)


def _default_name(variant):
    if variant is None:
        return "vit"
    if variant in TIMM_ARCHITECTURES:
        return variant
    return "vit_" + configs.normalize_variant_name(variant).lower()
