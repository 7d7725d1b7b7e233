"""The generic functional ViT builder and the named variant builders (ViT_B16, ...)."""

from __future__ import annotations

import keras

from keras_vit import configs
from keras_vit._validation import (
    check_choice,
    check_divisible,
    check_positive_int,
    check_rate,
)
from keras_vit.layers import PatchEncoder, TokenPooling, TransformerBlock
from keras_vit.layers.patch_encoder import POSITION_EMBEDDINGS
from keras_vit.layers.token_pooling import POOLINGS
from keras_vit.weights import DEFAULT_INTERPOLATION, INTERPOLATIONS, Checkpoint, load_weights
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
    pooling="token",
    representation_size=None,
    classifier_activation="softmax",
    class_token=True,
    position_embedding="learned",
    preprocessing=None,
    backbone=None,
    dropout_rate=0.0,
    attention_dropout_rate=0.0,
    drop_path_rate=0.0,
    approximate_gelu=None,
    layer_norm_epsilon=None,
    interpolation=None,
    name=None,
):
    """Builds a Vision Transformer as a functional Keras model.

    The architecture comes from `variant` (a row of `keras_vit.configs.VARIANTS`) or from the
    explicit `patch_size`, `hidden_size`, `num_layers`, `num_heads`, `mlp_dim`; explicit values
    override the variant's. Layer names are stable: `embedding`, `encoderblock_{i}`,
    `encoder_norm`, `pre_logits`, `head`. The head is zero-initialised and computes in float32.

    Args:
        variant: str or None. Variant name such as "B16" or "ViT-B/16". Defaults to None.
        patch_size: int or None. Patch side in pixels. Defaults to the variant's.
        hidden_size: int or None. Token width D. Defaults to the variant's.
        num_layers: int or None. Number of transformer blocks. Defaults to the variant's.
        num_heads: int or None. Attention heads per block. Defaults to the variant's.
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
            (Google), safetensors (timm or Hugging Face, with its config.json) file or a Hugging
            Face folder, format read from the content, or a name of
            `keras_vit.weights.CHECKPOINTS`. See `keras_vit.load_weights` for head handling.
            Defaults to None.
        num_classes: int or None. Classes of the head (alias `classes`). Defaults to the
            checkpoint's with `weights=`, else 1000.
        classes: int or None. Alias of `num_classes`, as in keras.applications.
        pooling: str or None. "token" (class token) or "gap" (mean of patch tokens); with
            `include_top=False`, None returns all tokens. Defaults to "token".
        representation_size: int or None. Width of the pre-training head's Dense + tanh
            ("pre_logits") layer; None leaves it out. Defaults to None.
        classifier_activation: str or None. Activation of the head, as in
            keras.applications: "softmax" returns probabilities, so the plain Keras losses
            (`loss="sparse_categorical_crossentropy"`) train it; None returns logits (then use
            a loss with `from_logits=True`). It runs in the head's float32. Defaults to
            "softmax".
        class_token: bool. Prepend a class token. Defaults to True.
        position_embedding: str. "learned", "sincos2d" or "none". Defaults to "learned".
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
        approximate_gelu: bool or None. tanh-approximate GELU, as the original checkpoints.
            None picks the checkpoint's (tanh for Google `.npz`, the config's for Hugging Face,
            exact for timm) and exact erf GELU without weights. Defaults to None.
        layer_norm_epsilon: float or None. Epsilon of every LayerNorm. None takes the
            checkpoint's (Hugging Face config) or 1e-6. Defaults to None.
        interpolation: str or None. How the learned position embedding is resampled to another
            grid, when loading and at call time: "bilinear" (vit_jax), "bicubic" (timm) or
            "bicubic_hf" (Hugging Face). None picks the checkpoint ecosystem's, else
            "bicubic". Defaults to None.
        name: str or None. Model name. Defaults to "vit_<variant>" or "vit".

    Returns:
        A `keras.Model`.

    Example:

    >>> model = ViT("tiny", num_classes=10)
    >>> model.output_shape
    (None, 10)
    """
    if backbone is not None and patch_size is None:
        patch_size = 1
    checkpoint = None
    if weights is not None:
        checkpoint = weights if isinstance(weights, Checkpoint) else Checkpoint(weights)
    found = checkpoint.architecture if checkpoint is not None else {}
    arch = _resolve_architecture(
        variant, patch_size, hidden_size, num_layers, num_heads, mlp_dim, found if variant is None else {}
    )
    if isinstance(image_size, str):
        if image_size != "auto":
            raise ValueError(f"Invalid image_size={image_size!r}. Expected an int, (height, width), None or 'auto'.")
        image_size = found.get("image_size", arch["image_size"])
    if num_classes is None and classes is None:
        num_classes = found.get("num_classes") or 1000
    if approximate_gelu is None:
        approximate_gelu = found.get("approximate_gelu", False)
    if layer_norm_epsilon is None:
        layer_norm_epsilon = found.get("layer_norm_epsilon", 1e-6)
    if interpolation is None:
        interpolation = DEFAULT_INTERPOLATION[checkpoint.layout] if checkpoint is not None else "bicubic"
    check_choice("interpolation", interpolation, INTERPOLATIONS)
    num_classes = _resolve_num_classes(num_classes, classes, include_top)
    check_choice("position_embedding", position_embedding, POSITION_EMBEDDINGS)
    check_choice("pooling", pooling, POOLINGS + (None,))
    check_choice("preprocessing", preprocessing, tuple(configs.SCALINGS) + (None,))
    if include_top and pooling is None:
        raise ValueError("include_top=True needs pooling='token' or 'gap', got pooling=None.")
    if pooling == "token" and not class_token:
        raise ValueError("pooling='token' needs class_token=True; use pooling='gap' without a class token.")
    for rate_name, rate in (
        ("dropout_rate", dropout_rate),
        ("attention_dropout_rate", attention_dropout_rate),
        ("drop_path_rate", drop_path_rate),
    ):
        check_rate(rate_name, rate)
    if representation_size is not None:
        check_positive_int("representation_size", representation_size)

    # With a stem, patch_size counts feature-map cells: _apply_backbone checks the sizes.
    pixel_patch = 1 if backbone is not None or arch["stem"] is not None else arch["patch_size"]
    inputs = _make_input(arch, image_size, input_shape, input_tensor, pixel_patch)
    x = inputs
    if preprocessing is not None:
        x = _preprocessing_layer(preprocessing, inputs.shape[-1])(x)
    if backbone is None and arch["stem"] is not None:
        backbone = BiTResNet(arch["stem"], arch["stem_width"], channels=inputs.shape[-1], name="resnet")
    if backbone is not None:
        x = _apply_backbone(backbone, x, arch["patch_size"])
    grid_size = None
    if None in tuple(x.shape[1:3]):
        # A dynamic image size: store the embedding for the checkpoint's (or the default) grid.
        side = arch["image_size"]
        if backbone is not None:
            side = backbone.compute_output_shape((1, side, side, inputs.shape[-1]))[1]
        side //= arch["patch_size"]
        grid_size = found.get("grid_size") or (side, side)
    encoder = PatchEncoder(
        arch["patch_size"],
        arch["hidden_size"],
        class_token=class_token,
        position_embedding=position_embedding,
        grid_size=grid_size,
        interpolation=interpolation,
        name="embedding",
    )
    x = encoder(x)
    x = keras.layers.Dropout(dropout_rate, name="embedding_dropout")(x)
    depth = arch["num_layers"]
    for i in range(depth):
        x = TransformerBlock(
            arch["hidden_size"],
            arch["num_heads"],
            arch["mlp_dim"],
            dropout_rate=dropout_rate,
            attention_dropout_rate=attention_dropout_rate,
            drop_path_rate=drop_path_rate * i / max(depth - 1, 1),
            approximate_gelu=approximate_gelu,
            layer_norm_epsilon=layer_norm_epsilon,
            name=f"encoderblock_{i}",
        )(x)
    x = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="encoder_norm")(x)
    if pooling is not None:
        x = TokenPooling(pooling, num_prefix_tokens=encoder.num_prefix_tokens, name="pooling")(x)
    if representation_size is not None:
        x = keras.layers.Dense(representation_size, activation="tanh", name="pre_logits")(x)
    if include_top:
        x = keras.layers.Dense(
            num_classes,
            activation=classifier_activation,
            kernel_initializer="zeros",
            dtype="float32",
            name="head",
        )(x)

    model_inputs = keras.utils.get_source_inputs(input_tensor) if input_tensor is not None else inputs
    model = keras.Model(model_inputs, x, name=name or _default_name(variant))
    if checkpoint is not None:
        load_weights(model, checkpoint, interpolation=interpolation)
    return model


def _resolve_architecture(variant, patch_size, hidden_size, num_layers, num_heads, mlp_dim, found=None):
    explicit = {
        "patch_size": patch_size,
        "hidden_size": hidden_size,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "mlp_dim": mlp_dim,
        "image_size": None,
    }
    if variant is not None:
        row = configs.get_variant(variant)
        arch = {key: getattr(row, key) for key in explicit}
        arch.update({key: value for key, value in explicit.items() if value is not None})
        arch.update(stem=row.stem, stem_width=row.stem_width)
    else:
        explicit.update({key: found[key] for key in explicit if explicit[key] is None and key in (found or {})})
        missing = [key for key, value in explicit.items() if value is None and key != "image_size"]
        if missing:
            raise ValueError(
                f"Pass variant= (one of {sorted(configs.VARIANTS)}) or all of the architecture "
                f"arguments; missing: {', '.join(missing)}."
            )
        arch = dict(explicit, image_size=224, stem=found.get("stem") if found else None)
        arch["stem_width"] = found.get("stem_width", 64) if found else 64
    for key in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim"):
        check_positive_int(key, arch[key])
    check_divisible("hidden_size", arch["hidden_size"], "num_heads", arch["num_heads"])
    return arch


def _resolve_num_classes(num_classes, classes, include_top):
    if classes is not None:
        num_classes = classes
    if include_top and (not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes < 1):
        raise ValueError(f"Invalid num_classes={num_classes!r}: include_top=True needs an integer >= 1.")
    return num_classes


def _make_input(arch, image_size, input_shape, input_tensor, pixel_patch):
    if input_shape is None:
        size = (None, None) if image_size is None else image_size
        if isinstance(size, int) and not isinstance(size, bool):
            size = (size, size)
        if not (isinstance(size, (tuple, list)) and len(size) == 2):
            raise ValueError(f"Invalid image_size={image_size!r}. Expected an int or (height, width).")
        input_shape = (size[0], size[1], 3)
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


ViT_Ti16 = _named_builder("Ti16")
ViT_S16 = _named_builder("S16")
ViT_S32 = _named_builder("S32")
ViT_B8 = _named_builder("B8")
ViT_B16 = _named_builder("B16")
ViT_B32 = _named_builder("B32")
ViT_L16 = _named_builder("L16")
ViT_L32 = _named_builder("L32")
ViT_H14 = _named_builder("H14")


R50_ViT_B16 = _named_builder("R50_B16")
R50_ViT_L32 = _named_builder("R50_L32")
R26_ViT_S32 = _named_builder("R26_S32")
R26_ViT_B32 = _named_builder("R26_B32")
R_ViT_Ti16 = _named_builder("R_Ti16")
