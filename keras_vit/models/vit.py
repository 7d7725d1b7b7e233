"""The generic functional ViT builder and the named variant builders (ViT_B16, ...)."""

from __future__ import annotations

import dataclasses
import os

import keras
import numpy as np

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
from keras_vit.layers import (
    AttentionPooling, NaFlexPatchEncoder, PatchEncoder, RotaryPositionEmbedding, TokenMap, TokenPooling,
    TransformerBlock,
)
from keras_vit.layers.naflex_patch_encoder import NAFLEX_INTERPOLATION
from keras_vit.layers.patch_encoder import POSITION_EMBEDDINGS
from keras_vit.layers.rotary_embedding import rope_settings
from keras_vit.layers.self_attention import QKV_BIASES
from keras_vit.layers.token_pooling import ALL_POOLINGS
from keras_vit.layers.transformer_block import MLP_ACTIVATIONS
from keras_vit.weights import INTERPOLATIONS, Checkpoint, load_weights
from keras_vit.weights.registry import imagenet_checkpoint
from keras_vit.weights.timm_names import TIMM_ARCHITECTURES, timm_image_size
from keras_vit.models.resnet import BiTResNet

# Symbolic probe size for a backbone's true stride: a multiple of every stride in common use
# (powers of two up to 64, x3, x5, x7), so ceil-rounded feature maps cannot hide a bad fit.
_STRIDE_PROBE = 2**6 * 3 * 5 * 7


def ViT(
    variant=None,
    *,
    patch_size=None,
    hidden_size=None,
    num_layers=None,
    num_heads=None,
    mlp_dim=None,
    image_size="auto",
    input_shape=None,
    input_tensor=None,
    include_top=True,
    weights=None,
    num_classes=None,
    classes=None,
    pooling="auto",
    representation_size="auto",
    classifier_activation="softmax",
    class_token=None,
    position_embedding=None,
    preprocessing=None,
    backbone=None,
    dropout_rate=0.0,
    attention_dropout_rate=0.0,
    drop_path_rate=0.0,
    fused_attention=False,
    approximate_gelu=None,
    layer_norm_epsilon=None,
    interpolation=None,
    distillation_token=None,
    num_register_tokens=None,
    prefix_position_embedding=None,
    layer_scale_init=None,
    mlp_activation=None,
    pre_norm=None,
    patch_bias=None,
    projection_size="auto",
    rope="auto",
    qkv_bias=None,
    naflex=None,
    pooling_heads=None,
    pooling_mlp_dim=None,
    mlp_norm=None,
    fc_norm=None,
    name=None,
):
    """Builds a Vision Transformer as a functional Keras model (a `VisionTransformer`).

    Every architecture field is resolved first (`resolve_config`): explicit arguments, then the
    `variant` row of `keras_vit.configs.VARIANTS`, then the checkpoint of `weights=`, which
    states its whole architecture (patch, width, depth, heads where the layout stores them,
    MLP width, class token and pooling, pre-logits width, position embedding and grid, rotary
    position, channels, GELU form, LayerNorm epsilon, hybrid stem, head size). Explicit values override
    the variant's; a value (given or the variant's) that contradicts the checkpoint raises one
    error listing each field, except the head, GELU form, epsilon and grid, which may differ.
    The model is then built from that config alone (`build`) and `model.vit_config` holds it.
    Layer names are stable: `embedding`, `rope` (rotary models: no weights), `encoderblock_{i}`,
    `encoder_norm` (or `fc_norm` after the pooling), `pre_logits`, `head`. The head is zero-initialised and computes in float32.

    Args:
        variant: str or None. Variant name such as "B16" or "ViT-B/16", or a timm model name
            such as "vit_small_patch16_224" (built as timm builds it, at timm's default size; the
            head follows `num_classes` and `include_top` as for any row;
            `keras_vit.weights.timm_names.TIMM_ARCHITECTURES` lists them). Defaults to None.
        patch_size: int or None. Patch side in pixels. Defaults to the variant's.
        hidden_size: int or None. Token width D. Defaults to the variant's.
        num_layers: int or None. Number of transformer blocks. Defaults to the variant's.
        num_heads: int or None. Attention heads per block. Defaults to the variant's or the
            checkpoint's; a timm state dict alone does not store it (fused qkv), so pass it
            unless it comes in a timm Hub folder, whose config.json states it.
        mlp_dim: int or None. MLP hidden width. Defaults to the variant's.
        image_size: int, (int, int), None or "auto". Input height and width. None makes the
            size dynamic: any size whose sides are multiples of the patch size is accepted and
            the learned position embedding is resampled to its grid at call time ((None, None)
            does the same). "auto" takes the checkpoint's size with `weights=`, else the
            variant's (224 for the paper variants). Defaults to "auto".
        input_shape: tuple or None. (H, W, C); overrides `image_size`. Defaults to None (3
            channels).
        input_tensor: Keras tensor or None. Use it as the model's input. Defaults to None.
        include_top: bool. Add the classification head. Defaults to True.
        weights: None, str or `keras_vit.weights.Checkpoint`. Pretrained weights: a `.npz`
            (Google), safetensors (timm or Hugging Face, with its config.json) file, a Hugging
            Face or timm Hub folder, format read from the content, a Hub id
            "hf-hub:ORG/NAME[@REVISION]" (`keras_vit.weights.hub`: huggingface_hub's cache,
            HF_HUB_OFFLINE, HF_TOKEN), a name of `keras_vit.weights.CHECKPOINTS`,
            or "imagenet" (the variant's ImageNet-1k fine-tuned checkpoint, see
            `keras_vit.weights.registry.IMAGENET`). See `keras_vit.load_weights` for head handling.
            Defaults to None.
        num_classes: int or None. Classes of the head (alias `classes`). Defaults to the
            checkpoint's with `weights=`, else 1000.
        classes: int or None. Alias of `num_classes`, as in keras.applications.
        pooling: str or None. "token" (class token), "gap" or its alias "avg" (mean of the
            patch tokens), "max" (maximum over the patch tokens), "map" (attention pooling with a learned
            probe, SigLIP), "token_and_mean" (class token and mean patch token concatenated, 2D
            wide: DINOv2's linear-probe head); with `include_top=False`, None
            returns all tokens. "auto" takes the checkpoint's ("gap" when it has no class
            token), else "token" with a class token and "gap" without. Defaults to "auto".
        representation_size: int, None or "auto". Width of the pre-training head's Dense +
            tanh ("pre_logits") layer; None leaves it out (as vit_jax does when fine-tuning).
            "auto" takes the checkpoint's, else None. Defaults to "auto".
        classifier_activation: str or None. Activation of the head, as in
            keras.applications: "softmax" returns probabilities, so the plain Keras losses
            (`loss="sparse_categorical_crossentropy"`) train it; None returns logits (then use
            a loss with `from_logits=True`). It runs in the head's float32. Defaults to
            "softmax".
        class_token: bool or None. Prepend a class token. None takes the checkpoint's, else
            True. Defaults to None.
        position_embedding: str or None. "learned", "sincos2d" or "none". None takes the
            checkpoint's ("learned" when it stores one; a file without one cannot tell "none"
            from "sincos2d", so pass it unless its family says, as DINOv3's does), the
            variant's, else "learned". Defaults to None.
        preprocessing: str or None. Map [0, 255] pixels inside the model: "unit" ([0, 1]),
            "symmetric" ([-1, 1], original checkpoints) or "imagenet" (mean/std); None expects
            inputs already scaled. Defaults to None.
        backbone: Keras model or layer or None. Maps images to one feature map (B, h, w, C)
            whose stride divides the image size, e.g.
            `keras.applications.ResNet50V2(include_top=False, weights=None)`; the encoder
            then patches that map (its C channels projected to `hidden_size`), and
            `patch_size` counts feature-map cells, defaulting to 1. Replaces a hybrid variant's
            own ResNet stem. None uses the variant's stem, if any. Defaults to None.
        dropout_rate: float. Dropout after the embedding and inside blocks. Defaults to 0.
        attention_dropout_rate: float. Dropout on attention weights. Defaults to 0.
        drop_path_rate: float. Stochastic depth rate of the last block, rising linearly from 0
            in the first. Defaults to 0.
        fused_attention: bool. Each block's attention runs `keras.ops.dot_product_attention`
            where it needs neither the weights nor dropout (see `MultiHeadSelfAttention`'s
            `fused`): same weights and outputs, another speed. Defaults to False.
        approximate_gelu: bool or None. tanh-approximate GELU, as the original checkpoints.
            None picks the checkpoint's (tanh for Google `.npz`, the config's for Hugging Face,
            exact for timm) and exact erf GELU without weights. Defaults to None.
        layer_norm_epsilon: float or None. Epsilon of every LayerNorm. None takes the
            checkpoint's (Hugging Face config) or 1e-6. Defaults to None.
        interpolation: str or None. How the learned position embedding is resampled to another
            grid, when loading and at call time: "bilinear" (vit_jax), "bicubic" (timm) or
            "bicubic_hf" (Hugging Face). None picks the checkpoint ecosystem's, else
            "bicubic". Defaults to None.
        distillation_token: bool or None. DeiT's distillation token (after the class token)
            and a second head `head_dist` on it; the model returns the mean of both heads'
            logits (then `classifier_activation`), as DeiT's own code at inference. Fine-tuning
            with `num_classes=N` trains both new heads on the labels (no teacher). None takes
            the checkpoint's or the variant's, else False. Defaults to None.
        num_register_tokens: int or None. Register tokens after the class (and distillation)
            token, with no position embedding (DINOv2 with registers). None takes the
            checkpoint's or the variant's, else 0. Defaults to None.
        prefix_position_embedding: bool or None. Whether the class and distillation tokens
            get position-embedding rows; False adds it to the patches only (DeiT-III, timm's
            DINOv2-reg). None takes the checkpoint's or the variant's, else True. Defaults to None.
        layer_scale_init: float or None. LayerScale on each residual branch, initialised to
            this value (1e-5 DINOv2, 1e-6 DeiT-III); None takes the checkpoint's or the
            variant's, else no LayerScale. Defaults to None.
        mlp_activation: str or None. "gelu" (exact or tanh, see `approximate_gelu`),
            "quick_gelu" (OpenAI CLIP) or "swiglu" (DINOv2 giant). None takes the checkpoint's
            or the variant's, else "gelu". Defaults to None.
        pre_norm: bool or None. A LayerNorm ("pre_norm") on the tokens before the first
            block (CLIP's ln_pre). None takes the checkpoint's or the variant's, else False.
            Defaults to None.
        patch_bias: bool or None. The patch projection has a bias (CLIP's has none). None
            takes the checkpoint's or the variant's, else True. Defaults to None.
        projection_size: int, None or "auto". Width of a linear projection without bias
            ("projection") after pooling: CLIP's visual projection to the image-text embedding.
            With `include_top=False` the model returns it; None leaves it out. "auto" takes the
            checkpoint's or the variant's, else None. Defaults to "auto".
        rope: str, dict, None or "auto". Rotary position embedding of the patch tokens in every
            block's attention (`keras_vit.layers.RotaryPositionEmbedding`, computed from each
            image's grid, so any image size): a name of
            `keras_vit.layers.rotary_embedding.ROPE_VARIANTS` ("dinov3", "eva02", "pe") or a dict
            of its settings (`rope_settings`); None has none. "auto" takes the checkpoint's or
            the variant's, else None. Defaults to "auto".
        qkv_bias: str or None. Which attention projections have a bias: "qkv" (the paper),
            "qv" (no key bias: DINOv3) or "none". None takes the checkpoint's or the variant's,
            else "qkv". Defaults to None.
        naflex: bool or None. SigLIP 2 NaFlex: the model takes patch sequences of images of any
            aspect instead of images, a dict {"patches": (B, N, P*P*C) float, "spatial_shapes":
            (B, 2) int32}, each image resized to fit a patch budget, cut into its own (h, w) grid
            of patches and padded to N (`keras_vit.naflex.naflex_inputs` makes them from image
            arrays); the learned position grid is resampled to each image's grid
            (`interpolation`, SigLIP 2's "bilinear_antialias" by default) and the padding is
            masked in attention and pooling. `image_size` is then that of the stored position
            grid. None takes the checkpoint's (True for Hugging Face model_type "siglip2") or the
            variant's, else False. Defaults to None.
        pooling_heads: int or None. Heads of the attention pooling (`pooling="map"`) when they
            differ from the blocks' (PE-Core's 8). None takes the checkpoint's or the variant's,
            else `num_heads`. Defaults to None.
        pooling_mlp_dim: int or None. Hidden width of the attention pooling's MLP when it
            differs from the blocks' (PE-Core G/14's). None takes the checkpoint's or the
            variant's, else `mlp_dim`. Defaults to None.
        mlp_norm: bool or None. A LayerNorm ("mlp_norm" in each block) on the MLP's hidden layer
            before its second Dense (EVA-02 B and L, timm's scale_mlp). None takes the
            checkpoint's or the variant's, else False. Defaults to None.
        fc_norm: bool or None. The final LayerNorm ("fc_norm") follows the pooling instead of
            normalising the tokens ("encoder_norm"): timm's fc_norm (EVA-02). The tokens
            (`pooling=None`, the intermediates' "tokens") then leave un-normalised, as timm's
            forward_features. None takes the checkpoint's or the variant's, else False.
            Defaults to None.
        name: str or None. Model name. Defaults to "vit_<variant>" or "vit".

    With `include_top=False` the model returns the family's own image embedding: the class
    token after the final LayerNorm (DINOv2's `pooler_output`, DeiT), the attention-pool output
    with `pooling="map"` (SigLIP), the projected class token with `projection_size` (CLIP's
    `image_embeds`). `pooling=None` returns every token after the final LayerNorm, in the order
    class token, distillation token, register tokens, patch tokens (row by row).

    Returns:
        A `VisionTransformer` (a functional `keras.Model` whose `get_config()` also carries
        `vit_config`).

    Example:

    >>> model = ViT("tiny", num_classes=10)
    >>> model.output_shape
    (None, 10)
    """
    if backbone is not None and patch_size is None:
        patch_size = 1
    checkpoint = None
    if isinstance(weights, str) and weights == "imagenet":
        weights = imagenet_checkpoint(variant)
    if weights is not None:
        if not isinstance(weights, (str, os.PathLike, Checkpoint)):
            raise ValueError(
                f"Invalid weights={weights!r}. Expected None, 'imagenet', a checkpoint file or folder, a Hub id "
                "'hf-hub:ORG/NAME', a name of keras_vit.weights.CHECKPOINTS or a keras_vit.weights.Checkpoint."
            )
        checkpoint = weights if isinstance(weights, Checkpoint) else Checkpoint(weights)
    if classes is not None and num_classes is not None and classes != num_classes:
        raise ValueError(
            f"Contradicting num_classes={num_classes!r} and classes={classes!r}: `classes` is the "
            "keras.applications name of `num_classes`. Pass one of them."
        )
    input_shape = plain(input_shape)  # goes to build, past resolve_config's own conversion
    channels = None
    if input_tensor is not None and len(input_tensor.shape) == 4:
        image_size, channels = tuple(input_tensor.shape[1:3]), input_tensor.shape[-1]
    elif input_shape is not None and len(tuple(input_shape)) == 3:
        image_size, channels = tuple(input_shape)[:2], tuple(input_shape)[-1]
    config = resolve_config(
        variant,
        checkpoint,
        patch_size=patch_size,
        hidden_size=hidden_size,
        num_layers=num_layers,
        num_heads=num_heads,
        mlp_dim=mlp_dim,
        class_token=class_token,
        pooling=pooling,
        representation_size=representation_size,
        position_embedding=position_embedding,
        channels=channels,
        approximate_gelu=approximate_gelu,
        layer_norm_epsilon=layer_norm_epsilon,
        num_classes=classes if classes is not None else num_classes,
        image_size=image_size,
        include_top=include_top,
        classifier_activation=classifier_activation,
        preprocessing=preprocessing,
        dropout_rate=dropout_rate,
        attention_dropout_rate=attention_dropout_rate,
        drop_path_rate=drop_path_rate,
        fused_attention=fused_attention,
        interpolation=interpolation,
        distillation_token=distillation_token,
        num_register_tokens=num_register_tokens,
        prefix_position_embedding=prefix_position_embedding,
        layer_scale_init=layer_scale_init,
        mlp_activation=mlp_activation,
        pre_norm=pre_norm,
        patch_bias=patch_bias,
        projection_size=projection_size,
        rope=rope,
        qkv_bias=qkv_bias,
        naflex=naflex,
        pooling_heads=pooling_heads,
        pooling_mlp_dim=pooling_mlp_dim,
        mlp_norm=mlp_norm,
        fc_norm=fc_norm,
        name=name,
        backbone=backbone,
    )
    model = build(config, backbone=backbone, input_shape=input_shape, input_tensor=input_tensor)
    if checkpoint is not None:
        load_weights(model, checkpoint, interpolation=config["interpolation"])
    return model


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
    if row is not None:
        from_variant = {key: getattr(row, key) for key in configs.CORE_FIELDS}
        from_variant.update({key: getattr(row, key) for key in configs.FAMILY_FIELDS
                             if getattr(row, key) != configs.FAMILY_DEFAULTS[key]})
        from_variant.update(timm_changes)
        if from_variant.get("pooling") == "auto":
            del from_variant["pooling"]
        if backbone is None:
            from_variant.update(stem=row.stem, stem_width=row.stem_width if row.stem is not None else None)
    else:
        from_variant = {}
    for source in (given, from_variant):  # a variant name or partial settings, compared with the file's in full
        if source.get("rope") is not None:
            source["rope"] = rope_settings(source["rope"])
    if backbone is not None:
        given.update(stem=None, stem_width=None)
        found = {key: value for key, value in found.items() if key not in ("stem", "stem_width", "channels")}
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
    _fill_defaults(config, checkpoint, given)
    _check_config(config, checkpoint)
    image_size = arguments.get("image_size", "auto")
    config["image_size"] = _builder_image_size(image_size, config, row, found, backbone)
    dynamic = config["image_size"] is None or None in config["image_size"]
    config["grid_size"] = _resolve_grid(config, row, found, backbone) if dynamic else None
    if config["naflex"]:  # no image size: the grid the position table is stored for
        if not dynamic:
            pixels = _pixel_patch(config)
            config["grid_size"] = (config["image_size"][0] // pixels, config["image_size"][1] // pixels)
        config["image_size"] = None
    for key in _BUILD_DEFAULTS:
        config[key] = arguments.get(key, _BUILD_DEFAULTS[key])
    if config["include_top"] is None:
        config["include_top"] = True
    # NaFlex is defined with its own resampling (SigLIP 2's), whatever file its weights come from.
    config["interpolation"] = arguments.get("interpolation") or (
        NAFLEX_INTERPOLATION if config["naflex"]
        else checkpoint.record.interpolation if checkpoint is not None else "bicubic")
    config["name"] = config["name"] or _default_name(variant)
    config["backbone"] = getattr(backbone, "name", type(backbone).__name__) if backbone is not None else None
    _check_build_arguments(config)
    if config["naflex"] and (config["preprocessing"] is not None or backbone is not None):
        raise ValueError(
            f"naflex=True (given, the variant's or the checkpoint's) takes patch sequences, not images: it cannot have "
            f"{'preprocessing=' + repr(config['preprocessing']) if config['preprocessing'] is not None else 'a backbone'}. "
            "keras_vit.naflex.naflex_inputs scales the pixels (scaling=) while it cuts the patches; naflex=False "
            "builds the same weights on images."
        )
    return config


# The build arguments a config carries besides the architecture; `build` fills them into a
# config saved before one of them existed.
_BUILD_DEFAULTS = {
    "include_top": True, "classifier_activation": "softmax", "preprocessing": None, "dropout_rate": 0.0,
    "attention_dropout_rate": 0.0, "drop_path_rate": 0.0, "fused_attention": False, "name": None,
}


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


def _pixel_patch(config):
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
            pixels = _pixel_patch({**config, "patch_size": found.get("patch_size") or config["patch_size"]})
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
        side //= _pixel_patch(config)
    return (side, side)


def build(config, *, backbone=None, input_shape=None, input_tensor=None):
    """Builds the `VisionTransformer` a resolved config (`resolve_config`) describes.

    Args:
        config: dict. A resolved config, e.g. `model.vit_config` of another model.
        backbone: Keras model or layer or None. The custom stem the config was resolved with.
            Defaults to None.
        input_shape: tuple or None. (H, W, C); overrides the config's image size. Defaults to
            None.
        input_tensor: Keras tensor or None. Use it as the model's input. Defaults to None.

    Example:

    >>> model = build(resolve_config("tiny", num_classes=10))
    >>> model.output_shape, build(model.vit_config).count_params() == model.count_params()
    ((None, 10), True)
    """
    # Configs saved before these fields existed.
    config = {**_BUILD_DEFAULTS, "rope": None, "qkv_bias": "qkv", "pooling_heads": None, "pooling_mlp_dim": None,
              "mlp_norm": False, "fc_norm": False, **config}
    for key in ("image_size", "grid_size", "stem"):
        if config.get(key) is not None:
            config[key] = tuple(config[key])
    config["rope"] = rope_settings(config["rope"])
    if config.get("backbone") is not None and backbone is None:
        raise ValueError(
            f"This config was resolved with the custom backbone {config['backbone']!r}, which is not part "
            "of it: pass backbone= to build."
        )
    if config.get("naflex"):  # a config saved before NaFlex existed has no such key
        if input_shape is not None or input_tensor is not None:
            raise ValueError("A NaFlex model takes the inputs naflex_input_spec describes: build it without "
                             "input_shape= or input_tensor=.")
        inputs = _naflex_keras_inputs(config)
        x = _encoder_graph(config, inputs, _new_layer)
        return VisionTransformer(inputs, x, name=config["name"], vit_config=config)
    stem = config["stem"]
    # With a stem, patch_size counts feature-map cells: _apply_backbone checks the sizes.
    pixel_patch = 1 if backbone is not None or stem is not None else config["patch_size"]
    size = config["image_size"]
    if input_shape is None:
        input_shape = (None, None, config["channels"]) if size is None else (size[0], size[1], config["channels"])
    inputs = _make_input(input_shape, input_tensor, pixel_patch)
    if backbone is None:  # a custom backbone's stride is its own
        _check_token_count(tuple(inputs.shape[1:3]), _pixel_patch(config))
    x = inputs
    if config["preprocessing"] is not None:
        x = _preprocessing_layer(config["preprocessing"], inputs.shape[-1])(x)
    if backbone is None and stem is not None:
        backbone = BiTResNet(stem, config["stem_width"], channels=inputs.shape[-1], name="resnet")
    if backbone is not None:
        x = _apply_backbone(backbone, x, config["patch_size"])
    x = _encoder_graph(config, x, _new_layer)
    model_inputs = keras.utils.get_source_inputs(input_tensor) if input_tensor is not None else inputs
    return VisionTransformer(model_inputs, x, name=config["name"], vit_config=config)


def naflex_input_spec(config):
    """{input name: (shape without the batch, dtype)} of a NaFlex model's dict input.

    "patches": (N, P*P*C) float32, the patches of each image flattened in (row, column,
    channel) order and padded to N (any N); "spatial_shapes": (2,) int32, each image's patch
    grid (rows, cols); rows * cols of its first patches are real, the rest padding.

    Example:

    >>> naflex_input_spec(resolve_config("tiny_siglip2"))
    {'patches': ((None, 48), 'float32'), 'spatial_shapes': ((2,), 'int32')}
    """
    depth = config["patch_size"] ** 2 * config["channels"]
    return {"patches": ((None, depth), "float32"), "spatial_shapes": ((2,), "int32")}


def _naflex_keras_inputs(config):
    return {key: keras.Input(shape=shape, dtype=dtype, name=key) for key, (shape, dtype) in naflex_input_spec(config).items()}


def _new_layer(name, make):
    """The layer factory of `build`: every layer is made fresh."""
    return make()


def _encoder_graph(config, x, layer, collect=None):
    """Applies the embedding, blocks, norm, pooling and heads a config describes to feature map x.

    `layer(name, make)` returns the layer called `name`, made by `make()` when building; the
    intermediates model (`VisionTransformer.intermediates_model`) passes one that returns the
    built model's own layer, so both graphs come from this one function. `collect`, when given,
    is a dict that receives each block's tokens and attention weights.
    """
    hidden, heads, epsilon = config["hidden_size"], config["num_heads"], config["layer_norm_epsilon"]
    features = x
    if config.get("naflex"):
        encoder = layer("embedding", lambda: NaFlexPatchEncoder(
            config["patch_size"], hidden, config["grid_size"], interpolation=config["interpolation"],
            use_bias=config["patch_bias"], name="embedding"))
        x, mask = encoder(x["patches"], x["spatial_shapes"])
        # Only NaFlex passes a mask: every other graph stays as saved models have it.
        masked = {"padding_mask": mask}
    else:
        encoder, masked = _image_encoder(config, hidden, x, layer), {}
        x = encoder(x)
    rope = None
    if config.get("rope") is not None:
        # The rotation of every token for this image's grid, computed once and taken by every block.
        rope = layer("rope", lambda: RotaryPositionEmbedding(
            config["patch_size"], hidden // heads, num_prefix_tokens=encoder.num_prefix_tokens, name="rope",
            **config["rope"]))(features)
    x = layer("embedding_dropout", lambda: keras.layers.Dropout(config["dropout_rate"], name="embedding_dropout"))(x)
    if config["pre_norm"]:
        x = layer("pre_norm", lambda: keras.layers.LayerNormalization(epsilon=epsilon, name="pre_norm"))(x)
    depth = config["num_layers"]
    for i in range(depth):
        block = layer(f"encoderblock_{i}", lambda i=i: TransformerBlock(
            hidden,
            heads,
            config["mlp_dim"],
            dropout_rate=config["dropout_rate"],
            attention_dropout_rate=config["attention_dropout_rate"],
            drop_path_rate=config["drop_path_rate"] * i / max(depth - 1, 1),
            approximate_gelu=config["approximate_gelu"],
            layer_norm_epsilon=epsilon,
            mlp_activation=config["mlp_activation"],
            layer_scale_init=config["layer_scale_init"],
            fused_attention=config["fused_attention"],
            qkv_bias=config.get("qkv_bias", "qkv"),
            mlp_norm=config.get("mlp_norm", False),
            name=f"encoderblock_{i}",
        ))
        if collect is None or "attention" not in collect:
            x = block(x, rope=rope, **masked)
        else:
            x, attention = _WithAttention(block)(x, rope=rope, **masked)
            collect["attention"].append(attention)
        if collect is not None:
            collect["blocks"].append(x)
    fc_norm = config.get("fc_norm", False)
    if not fc_norm:
        x = layer("encoder_norm", lambda: keras.layers.LayerNormalization(epsilon=epsilon, name="encoder_norm"))(x)
    if collect is not None:
        collect["tokens"] = x
        collect.update(masked)
    tokens = x
    pooling = config["pooling"]
    if pooling == "map":
        pool = layer("pooling", lambda: AttentionPooling(
            hidden, config.get("pooling_heads") or heads, config.get("pooling_mlp_dim") or config["mlp_dim"],
            mlp_activation=config["mlp_activation"],
            approximate_gelu=config["approximate_gelu"], layer_norm_epsilon=epsilon, name="pooling",
        ))
        if collect is None:
            x = pool(tokens, **masked)
        else:
            x, collect["pooling_attention"] = _WithAttention(pool)(tokens, **masked)
    elif pooling is not None:
        prefix = encoder.num_prefix_tokens
        x = layer("pooling", lambda: TokenPooling(pooling, num_prefix_tokens=prefix, name="pooling"))(tokens, **masked)
    if fc_norm and pooling is not None:
        x = layer("fc_norm", lambda: keras.layers.LayerNormalization(epsilon=epsilon, name="fc_norm"))(x)
    if config["projection_size"] is not None and pooling is not None:  # it projects the pooled embedding
        x = layer("projection", lambda: keras.layers.Dense(
            config["projection_size"], use_bias=False, name="projection"))(x)
    if config["representation_size"] is not None:
        x = layer("pre_logits", lambda: keras.layers.Dense(
            config["representation_size"], activation="tanh", name="pre_logits"))(x)
    if collect is not None:
        collect["embedding"] = x
    if not config["include_top"]:
        return x
    activation = config["classifier_activation"]
    if not config["distillation_token"]:
        return layer("head", lambda: _head(config["num_classes"], activation, "head"))(x)
    # DeiT distilled: the mean of the class-token and distillation-token heads' logits.
    dist = layer("pooling_dist", lambda: TokenPooling(
        "token", num_prefix_tokens=encoder.num_prefix_tokens, token_index=1, name="pooling_dist"))(tokens)
    logits = [layer("head", lambda: _head(config["num_classes"], None, "head"))(x),
              layer("head_dist", lambda: _head(config["num_classes"], None, "head_dist"))(dist)]
    x = layer("head_average", lambda: keras.layers.Average(dtype="float32", name="head_average"))(logits)
    if activation is not None:
        x = layer("head_activation", lambda: keras.layers.Activation(
            activation, dtype="float32", name="head_activation"))(x)
    return x


def _image_encoder(config, hidden, x, layer):
    """The `PatchEncoder` of images (or a stem's feature map) x."""
    return layer("embedding", lambda: PatchEncoder(
        config["patch_size"],
        hidden,
        class_token=config["class_token"],
        position_embedding=config["position_embedding"],
        grid_size=config["grid_size"] if None in tuple(x.shape[1:3]) else None,
        interpolation=config["interpolation"],
        distillation_token=config["distillation_token"],
        num_register_tokens=config["num_register_tokens"],
        prefix_position_embedding=config["prefix_position_embedding"],
        use_bias=config["patch_bias"],
        name="embedding",
    ))


def _head(num_classes, activation, name):
    return keras.layers.Dense(num_classes, activation=activation, kernel_initializer="zeros", dtype="float32", name=name)


class _WithAttention(keras.layers.Layer):
    """Calls a block or attention pooling (shared, not copied) with return_attention_scores=True.

    A layer's outputs in a functional graph are read from its call; calling the model's own
    block again with another signature would leave the attention untracked, so this transient
    wrapper makes the call. It is never saved: intermediates models are rebuilt from the model.
    """

    def __init__(self, inner, **kwargs):
        super().__init__(name=f"{inner.name}_with_attention", dtype=inner.dtype_policy, **kwargs)
        self.inner = inner
        self.built = True

    def call(self, inputs, training=None, rope=None, padding_mask=None):
        masked = {} if padding_mask is None else {"padding_mask": padding_mask}
        if isinstance(self.inner, TransformerBlock):
            return self.inner(inputs, training=training, return_attention_scores=True, rope=rope, **masked)
        return self.inner(inputs, return_attention_scores=True, **masked)

    def compute_output_spec(self, inputs, training=None, rope=None, padding_mask=None):
        return self.inner.compute_output_spec(inputs, return_attention_scores=True)


@keras.saving.register_keras_serializable(package="keras_vit")
class VisionTransformer(keras.Model):
    """A functional ViT that keeps the resolved config it was built from (`vit_config`).

    `get_config()` is the functional graph plus "vit_config", so `.keras` files reload it with
    no custom_objects and `build(model.vit_config)` makes a fresh copy (a model with a custom
    backbone needs that backbone passed again). Files saved as plain functional models load as
    such, without `vit_config`.

    Args:
        *args: the arguments of a functional `keras.Model` (inputs, outputs, name, ...).
        vit_config: dict or None. The resolved config. Defaults to None.
        **kwargs: the keyword arguments of a functional `keras.Model`.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT("tiny", num_classes=3)
    >>> restored = type(model).from_config(model.get_config())
    >>> type(restored).__name__, restored.vit_config["num_classes"]
    ('VisionTransformer', 3)
    """

    def __init__(self, *args, vit_config=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._vit_config = _frozen(vit_config)

    @property
    def vit_config(self):
        """dict or None. A copy of the resolved config the model was built from."""
        return None if self._vit_config is None else dict(self._vit_config)

    def get_config(self):
        return {**super().get_config(), "vit_config": self.vit_config}

    def call(self, inputs, training=None, mask=None, **kwargs):
        if isinstance(inputs, dict) and self._vit_config is not None and self._vit_config.get("naflex"):
            _check_spatial_shapes(self.name, inputs)
        # Checked here, where the model's own input is known: past this point a wrong channel
        # count surfaces as Conv2D's "depth of output is not a multiple of the number of groups".
        shape, expected = getattr(inputs, "shape", None), self.inputs[0].shape if self.inputs else None
        if shape is not None and expected is not None and len(shape) == len(expected) == 4:
            if None not in (shape[-1], expected[-1]) and shape[-1] != expected[-1]:
                raise ValueError(
                    f"Invalid images of shape {tuple(shape)} for model {self.name!r}: it takes {expected[-1]} "
                    f"channel{'s' if expected[-1] != 1 else ''}, shape (batch, {expected[1]}, {expected[2]}, "
                    f"{expected[-1]}). Convert the images (e.g. to greyscale) or build the model with "
                    f"input_shape=(..., {shape[-1]})."
                )
            inputs = checked_image_sides(inputs, expected, self.pixel_multiple, self.name)
        return super().call(inputs, training=training, mask=mask, **kwargs)

    @property
    def pixel_multiple(self):
        """int or None. What image sides must be a multiple of (the patch, through any stem); None with a custom backbone."""
        config = self._vit_config
        if config is None or config.get("backbone") is not None:
            return None
        return _pixel_patch(config)

    def intermediates_model(self):
        """A model sharing this model's layers that returns every block's tokens and attention.

        Its output is a dict: "blocks" (list, one (B, T, D) tensor per block, input side
        first, before the final LayerNorm), "attention" (list, one (B, heads, T, T) per
        block), "tokens" (B, T, D) (every token after the final LayerNorm, if before pooling: class,
        distillation, register, then patch tokens; a NaFlex model's padding tokens are
        meaningless, see `padding_mask`), "padding_mask" (B, T), True for real tokens
        (NaFlex only), "embedding" (what `include_top=False`
        returns, absent with `pooling=None`), "output" (the model's output) and, with
        `pooling="map"`, "pooling_attention" (B, heads, 1, T), the probe's attention. It is
        built with public Keras APIs from `vit_config`, like timm's `forward_intermediates`
        and big_vision's `out` dict, for dense features, probing and the attention figures.

        Example:

        >>> import numpy as np, keras_vit
        >>> model = keras_vit.ViT("tiny", num_classes=3)
        >>> out = model.intermediates_model()(np.zeros((1, 32, 32, 3), "float32"))
        >>> len(out["blocks"]), tuple(out["attention"][0].shape), tuple(out["tokens"].shape)
        (2, (1, 2, 65, 65), (1, 65, 32))
        """
        config = self._config_for("intermediates_model")
        inputs, x = self._encoder_inputs(config)
        collect = {"blocks": [], "attention": []}
        output = _encoder_graph(config, x, lambda name, make: self.get_layer(name), collect)
        collect["output"] = output
        if config["pooling"] is None:
            del collect["embedding"]
        return keras.Model(inputs, collect, name=f"{self.name}_intermediates")

    def feature_maps_model(self, indices=1, norm=True, prefix_tokens=False):
        """A model sharing this model's layers that returns chosen blocks' patch tokens as feature maps.

        What dense-task code (segmentation and depth decoders, timm's `forward_intermediates`
        with `output_fmt="NHWC"`) is written against: each chosen block's patch tokens laid out on
        the patch grid of the image, channels last, (B, H / p, W / p, D) where p is the pixels a
        token covers (through any stem). Class, distillation and register tokens are left out of
        the maps. Blocks after the last chosen one are not run. Use it inside any Keras model;
        for a frozen backbone wrap it in `keras_vit.layers.InferenceMode(..., trainable=False)`
        (no dropout or stochastic depth inside `fit` either, as `keras_vit.LinearSegmenter` does).

        Args:
            indices: int or list of int. An int n takes the last n blocks; a list names blocks
                by index, 0 the first, negative from the end (-1 the last), in the order given.
                Defaults to 1 (the last block).
            norm: bool. Apply the model's final LayerNorm to each chosen block's tokens, as
                DINOv2's and Depth Anything's backbones do (a model with `fc_norm` has none
                before its pooling, as in timm). Defaults to True.
            prefix_tokens: bool. Also return each chosen block's prefix tokens (B, P, D) (P is
                0 for models without a class token). Defaults to False.

        Returns:
            A `keras.Model` from images to a list of maps (one per chosen block), or with
            `prefix_tokens=True` a tuple (maps, prefix tokens), two lists.

        Example:

        >>> import numpy as np, keras_vit
        >>> model = keras_vit.ViT("tiny_dinov2", image_size=None, include_top=False)
        >>> maps = model.feature_maps_model(indices=[0, -1])(np.zeros((1, 16, 24, 3), "float32"))
        >>> [tuple(m.shape) for m in maps]
        [(1, 4, 6, 24), (1, 4, 6, 24)]
        """
        config = self._config_for("feature_maps_model")
        if config.get("naflex"):
            raise ValueError(
                f"feature_maps_model needs images on a patch grid; model {self.name!r} takes NaFlex patch sequences. "
                "Build or load it with naflex=False for feature maps of one image size."
            )
        check_bool("norm", norm)
        check_bool("prefix_tokens", prefix_tokens)
        chosen = block_indices(indices, config["num_layers"])
        inputs, x = self._encoder_inputs(config)
        collect = {"blocks": []}
        _encoder_graph(config, x, lambda name, make: self.get_layer(name), collect)
        to_map = TokenMap(config["patch_size"], self.get_layer("embedding").num_prefix_tokens, name="token_map")
        # A model whose final LayerNorm follows the pooling (fc_norm: EVA-02) has none for tokens, as in timm.
        final_norm = None if config.get("fc_norm") or not norm else self.get_layer("encoder_norm")
        maps, prefixes = [], []
        for i in chosen:
            tokens = collect["blocks"][i]
            grid, prefix = to_map(final_norm(tokens) if final_norm is not None else tokens, x)
            maps.append(grid)
            prefixes.append(prefix)
        return keras.Model(inputs, (maps, prefixes) if prefix_tokens else maps, name=f"{self.name}_feature_maps")

    def _config_for(self, method):
        config = self.vit_config
        if config is None:
            raise ValueError(
                f"Model {self.name!r} has no vit_config (it was loaded from a file saved as a plain functional "
                f"model): rebuild it with keras_vit.ViT to call {method}, or use keras_vit.inspect.attention_model."
            )
        return config

    def _encoder_inputs(self, config):
        """New inputs like the model's, and what its patch encoder takes from them (after preprocessing and stem)."""
        if config.get("naflex"):
            inputs = _naflex_keras_inputs(config)
            return inputs, inputs
        inputs = x = keras.Input(batch_shape=self.inputs[0].shape, dtype=self.inputs[0].dtype, name="images")
        if config["preprocessing"] is not None:
            x = self.get_layer("preprocessing")(x)
        stem = "resnet" if config["backbone"] is None and config["stem"] is not None else config["backbone"]
        if stem is not None:
            x = self.get_layer(stem)(x)
        return inputs, x


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


def block_indices(indices, depth):
    """The blocks `indices` chooses, as non-negative indices in the order given.

    Args:
        indices: int or list of int. An int n chooses the last n blocks; a list names blocks, negative
            from the end.
        depth: int. The number of blocks.

    Example:

    >>> block_indices(2, 12), block_indices([2, 5, -1], 12)
    ([10, 11], [2, 5, 11])
    """
    if isinstance(indices, (int, np.integer)) and not isinstance(indices, bool):
        if not 1 <= indices <= depth:
            raise ValueError(f"Invalid indices={indices!r}: an int chooses the last n blocks, 1 to {depth} "
                             f"for a model of {depth} blocks.")
        return list(range(depth - int(indices), depth))
    if not isinstance(indices, (list, tuple)) or not indices or not all(
            isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in indices):
        raise ValueError(f"Invalid indices={indices!r}: expected an int (the last n blocks) or a non-empty list "
                         "of block indices.")
    beyond = [i for i in indices if not -depth <= i < depth]
    if beyond:
        raise ValueError(f"Invalid indices={list(indices)!r}: block(s) {beyond} beyond the depth; a model of {depth} "
                         f"blocks has indices 0 to {depth - 1} (or -{depth} to -1 from the end).")
    return [int(i) % depth for i in indices]


def _check_spatial_shapes(name, inputs):
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


def _frozen(config):
    """A copy with the tuples JSON turned into lists made tuples again (a rotary reference grid's too)."""
    if config is None:
        return None
    config = dict(config)
    for key in ("image_size", "grid_size", "stem"):
        if isinstance(config.get(key), list):
            config[key] = tuple(config[key])
    if config.get("rope") is not None:  # its reference_grid too (EVA-02, PE-Core)
        config["rope"] = rope_settings(config["rope"])
    return config


# Most patch tokens a model may have: 4x a 1024 px image at patch 8, beyond every checkpoint's grid.
MAX_PATCH_TOKENS = 256 * 256


def _check_token_count(sides, token_pixels):
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


def _make_input(input_shape, input_tensor, pixel_patch):
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


def _apply_backbone(backbone, x, patch_size):
    """Runs `backbone` on images x and checks it returns one feature map that tiles the image."""
    if not callable(backbone):
        raise ValueError(f"Invalid backbone={backbone!r}. Expected a Keras model or layer mapping images to a feature map.")
    features = backbone(x)
    shape = getattr(features, "shape", None)
    if shape is None or len(shape) != 4:
        got = [tuple(f.shape) for f in features] if isinstance(features, (list, tuple)) else shape
        raise ValueError(
            f"Invalid backbone={getattr(backbone, 'name', backbone)!r}: it must map images to one 4-D feature "
            f"map (batch, height, width, channels), got output shape {got}. Use include_top=False and no pooling."
        )
    if shape[-1] is None:
        raise ValueError(f"backbone {backbone.name!r} returns a feature map with unknown channels: {tuple(shape)}.")
    image = tuple(x.shape[1:3])
    cells = tuple(shape[1:3])
    probed = None
    if None not in image:
        try:
            probed = backbone.compute_output_shape((1, image[0] * _STRIDE_PROBE, image[1] * _STRIDE_PROBE, x.shape[-1]))
        except Exception:  # a backbone built for one fixed image size cannot be probed
            probed = None
    for axis, size, cell, index in (("height", image[0], cells[0], 1), ("width", image[1], cells[1], 2)):
        if size is None or cell is None:
            continue
        big = probed[index] if probed is not None and len(probed) == 4 and probed[index] else None
        stride = size * _STRIDE_PROBE / big if big else size / cell if cell else float("inf")
        if cell == 0 or size % cell or (big and big != cell * _STRIDE_PROBE):
            raise ValueError(
                f"Invalid image {axis}={size} for backbone {backbone.name!r}: its feature map of {cell} cells "
                f"does not tile the image (its stride, about {stride:.4g} pixels, must divide the image {axis}). "
                "Pick an image size that is a multiple of the backbone's stride."
            )
        if cell % patch_size:
            raise ValueError(
                f"Invalid image {axis}={size}: the backbone's feature map has {cell} cells, not divisible by "
                f"patch_size={patch_size}. Use an image {axis} that is a multiple of {int(stride) * patch_size}."
            )
    return features


def _preprocessing_layer(preprocessing, channels):
    mean, std = configs.SCALINGS[preprocessing]
    if len(mean) == 1:
        mean, std = mean * channels, std * channels
    if len(mean) != channels:
        raise ValueError(
            f"preprocessing={preprocessing!r} expects {len(mean)} channels, but the images have {channels}."
        )
    return keras.layers.Normalization(
        mean=list(mean), variance=[s * s for s in std], dtype="float32", name="preprocessing"
    )


def _default_name(variant):
    if variant is None:
        return "vit"
    if variant in TIMM_ARCHITECTURES:
        return variant
    return "vit_" + configs.normalize_variant_name(variant).lower()


def _named_builder(variant):
    row = configs.VARIANTS[variant]
    name = configs.builder_name(variant)

    def builder(**kwargs):
        return ViT(variant, **kwargs)

    builder.__name__ = builder.__qualname__ = name
    builder.__doc__ = _builder_doc(name, row)
    return builder


def _builder_doc(name, row):
    """The docstring of a named builder, written from its table row."""
    encoder = f"hidden {row.hidden_size}, MLP {row.mlp_dim}, {row.num_heads} heads, {row.num_layers} layers"
    if row.stem is None:
        summary = f"Builds {row.description}: patch {row.patch_size}, {encoder}."
        details = ""
        example_size = 2 * row.patch_size
    else:
        stages = f"stages {row.stem}" if row.stem else "the root alone"
        summary = (
            f"Builds {row.description}: BiT ResNet stem ({stages}, output stride {row.stem_stride}), then "
            f"{row.patch_size}x{row.patch_size} patches of its feature map into a ViT with {encoder}."
        )
        details = (
            '\n    The stem is the nested model "resnet" (`keras_vit.models.resnet.BiTResNet`); one token\n'
            f"    covers {row.pixel_patch_size}x{row.pixel_patch_size} pixels.\n"
        )
        example_size = row.pixel_patch_size
    return f"""{summary}
{details}
    Takes every keyword argument of `keras_vit.ViT` (num_classes, image_size, include_top,
    pooling, weights, backbone, ...), which documents them. The head returns probabilities
    (`classifier_activation="softmax"`); pass `classifier_activation=None` for logits.

    Example:

    >>> model = {name}(num_classes=10, num_layers=1, image_size={example_size})
    >>> model.output_shape
    (None, 10)
    """


# ViT_Ti16, ..., R50_ViT_B16, ...: one per row of configs.NAMED_BUILDERS, documented from the row.
globals().update({name: _named_builder(variant) for name, variant in configs.NAMED_BUILDERS.items()})
