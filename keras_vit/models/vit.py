"""The ViT builders: `ViT` (arguments to a built, loaded model), `build` (a resolved config to a model), and the named ones (ViT_B16, ...).

`ViT` resolves its arguments into one config (`keras_vit.models.vit_config.resolve_config`),
builds it (`build`: the inputs of `keras_vit.models.vit_inputs` through the graph of
`keras_vit.models.vit_graph`, as a `keras_vit.models.vit_model.VisionTransformer`) and loads
the checkpoint of `weights=`.

Example:

>>> model = ViT_Ti16(num_classes=10, num_layers=1, image_size=32)
>>> type(model).__name__, model.output_shape
('VisionTransformer', (None, 10))
"""

from __future__ import annotations

import os

import keras

from keras_vit import configs
from keras_vit._validation import plain
from keras_vit.layers.rotary_embedding import rope_settings
from keras_vit.models.resnet import BiTResNet
from keras_vit.models.vit_config import BUILD_DEFAULTS, pixel_patch, resolve_config
from keras_vit.models.vit_graph import apply_backbone, encoder_graph, new_layer, preprocessing_layer
from keras_vit.models.vit_inputs import check_token_count, make_input, naflex_keras_inputs
from keras_vit.models.vit_model import VisionTransformer
from keras_vit.weights import Checkpoint, load_weights
from keras_vit.weights.registry import imagenet_checkpoint


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
    fused_attention="auto",
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
        fused_attention: bool or "auto". Each block's attention runs one fused kernel where it
            needs neither the weights nor dropout (see `MultiHeadSelfAttention`'s `fused`): same
            weights and outputs, another speed; "auto" where it pays (cuDNN flash attention
            under JAX on recent GPUs). Defaults to "auto".
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
    arguments = dict(locals())  # every argument, by name: those resolve_config takes go to it as given
    for key in ("variant", "weights", "classes", "input_shape", "input_tensor", "backbone"):
        del arguments[key]
    if backbone is not None and patch_size is None:
        arguments["patch_size"] = 1
    checkpoint = _checkpoint_of(weights, variant)
    if classes is not None and num_classes is not None and classes != num_classes:
        raise ValueError(
            f"Contradicting num_classes={num_classes!r} and classes={classes!r}: `classes` is the "
            "keras.applications name of `num_classes`. Pass one of them."
        )
    arguments["num_classes"] = classes if classes is not None else num_classes
    input_shape = plain(input_shape)  # goes to build, past resolve_config's own conversion
    arguments["channels"] = None
    if input_tensor is not None and len(input_tensor.shape) == 4:
        arguments["image_size"], arguments["channels"] = tuple(input_tensor.shape[1:3]), input_tensor.shape[-1]
    elif input_shape is not None and len(tuple(input_shape)) == 3:
        arguments["image_size"], arguments["channels"] = tuple(input_shape)[:2], tuple(input_shape)[-1]
    config = resolve_config(variant, checkpoint, backbone=backbone, **arguments)
    model = build(config, backbone=backbone, input_shape=input_shape, input_tensor=input_tensor)
    if checkpoint is not None:
        load_weights(model, checkpoint, interpolation=config["interpolation"])
    return model


def _checkpoint_of(weights, variant):
    """The `Checkpoint` of the builder's `weights` argument, or None; "imagenet" is the variant's ImageNet-1k one."""
    if isinstance(weights, str) and weights == "imagenet":
        weights = imagenet_checkpoint(variant)
    if weights is None or isinstance(weights, Checkpoint):
        return weights
    if not isinstance(weights, (str, os.PathLike)):
        raise ValueError(
            f"Invalid weights={weights!r}. Expected None, 'imagenet', a checkpoint file or folder, a Hub id "
            "'hf-hub:ORG/NAME', a name of keras_vit.weights.CHECKPOINTS or a keras_vit.weights.Checkpoint."
        )
    return Checkpoint(weights)


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
    config = {**BUILD_DEFAULTS, "rope": None, "qkv_bias": "qkv", "pooling_heads": None, "pooling_mlp_dim": None,
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
        inputs = naflex_keras_inputs(config)
        x = encoder_graph(config, inputs, new_layer)
        return VisionTransformer(inputs, x, name=config["name"], vit_config=config)
    stem = config["stem"]
    # With a stem, patch_size counts feature-map cells: apply_backbone checks the sizes.
    input_multiple = 1 if backbone is not None or stem is not None else config["patch_size"]
    size = config["image_size"]
    if input_shape is None:
        input_shape = (None, None, config["channels"]) if size is None else (size[0], size[1], config["channels"])
    inputs = make_input(input_shape, input_tensor, input_multiple)
    if backbone is None:  # a custom backbone's stride is its own
        check_token_count(tuple(inputs.shape[1:3]), pixel_patch(config))
    x = inputs
    if config["preprocessing"] is not None:
        x = preprocessing_layer(config["preprocessing"], inputs.shape[-1])(x)
    if backbone is None and stem is not None:
        backbone = BiTResNet(stem, config["stem_width"], channels=inputs.shape[-1], name="resnet")
    if backbone is not None:
        x = apply_backbone(backbone, x, config["patch_size"])
    x = encoder_graph(config, x, new_layer)
    model_inputs = keras.utils.get_source_inputs(input_tensor) if input_tensor is not None else inputs
    return VisionTransformer(model_inputs, x, name=config["name"], vit_config=config)


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
