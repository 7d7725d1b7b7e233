"""The functional graph of a ViT: embedding, blocks, norm, pooling and heads, from a resolved config.

`encoder_graph(config, x, layer)` applies what a config (`keras_vit.models.vit_config.resolve_config`)
describes to images (or a stem's feature map) or NaFlex inputs. `layer(name, make)` returns the
layer called `name`: `keras_vit.models.vit.build` makes each fresh (`new_layer`), while
`VisionTransformer.intermediates_model` and `feature_maps_model` take the built model's own, so
every graph comes from this one function. Layer names are the weight schema: `embedding`, `rope`,
`encoderblock_{i}`, `encoder_norm` (or `fc_norm`), `pooling`, `pre_logits`, `head`.

Example:

>>> import keras
>>> from keras_vit.models.vit_config import resolve_config
>>> outputs = encoder_graph(resolve_config("tiny", num_classes=3), keras.Input((32, 32, 3)), new_layer)
>>> tuple(outputs.shape)
(None, 3)
"""

from __future__ import annotations

import keras

from keras_vit.layers import (
    AttentionPooling, NaFlexPatchEncoder, PatchEncoder, RotaryPositionEmbedding, TokenPooling, TransformerBlock,
)
from keras_vit import configs


def new_layer(name, make):
    """The layer factory of `keras_vit.models.vit.build`: every layer is made fresh."""
    return make()


def encoder_graph(config, x, layer, collect=None):
    """Applies the embedding, blocks, norm, pooling and heads a config describes to feature map x.

    `layer(name, make)` returns the layer called `name`, made by `make()` when building; the
    intermediates model (`VisionTransformer.intermediates_model`) passes one that returns the
    built model's own layer, so both graphs come from this one function. `collect`, when given,
    is a dict that receives each block's tokens and attention weights.
    """
    encoder, x, masked, rope = _embedded(config, x, layer)
    x = _blocks(config, x, layer, rope, masked, collect)
    tokens, x = _pooled(config, x, layer, encoder, masked, collect)
    if collect is not None:
        collect["embedding"] = x
    if not config["include_top"]:
        return x
    return _heads(config, x, tokens, layer, encoder)


def _embedded(config, x, layer):
    """(patch encoder, its tokens after dropout and any pre-norm, the padding mask as call arguments, the rotation)."""
    hidden = config["hidden_size"]
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
            config["patch_size"], hidden // config["num_heads"], num_prefix_tokens=encoder.num_prefix_tokens,
            name="rope", **config["rope"]))(features)
    x = layer("embedding_dropout", lambda: keras.layers.Dropout(config["dropout_rate"], name="embedding_dropout"))(x)
    if config["pre_norm"]:
        x = layer("pre_norm", lambda: keras.layers.LayerNormalization(
            epsilon=config["layer_norm_epsilon"], name="pre_norm"))(x)
    return encoder, x, masked, rope


def _blocks(config, x, layer, rope, masked, collect):
    """The transformer blocks; `collect` receives each one's tokens (and attention, when it asks for it)."""
    for i in range(config["num_layers"]):
        block = layer(f"encoderblock_{i}", lambda i=i: _block(config, i))
        if collect is None or "attention" not in collect:
            x = block(x, rope=rope, **masked)
        else:
            x, attention = WithAttention(block)(x, rope=rope, **masked)
            collect["attention"].append(attention)
        if collect is not None:
            collect["blocks"].append(x)
    return x


def _block(config, i):
    """Block `i`, its stochastic depth rising linearly to `drop_path_rate` at the last block."""
    depth = config["num_layers"]
    return TransformerBlock(
        config["hidden_size"],
        config["num_heads"],
        config["mlp_dim"],
        dropout_rate=config["dropout_rate"],
        attention_dropout_rate=config["attention_dropout_rate"],
        drop_path_rate=config["drop_path_rate"] * i / max(depth - 1, 1),
        approximate_gelu=config["approximate_gelu"],
        layer_norm_epsilon=config["layer_norm_epsilon"],
        mlp_activation=config["mlp_activation"],
        layer_scale_init=config["layer_scale_init"],
        fused_attention=config["fused_attention"],
        qkv_bias=config.get("qkv_bias", "qkv"),
        mlp_norm=config.get("mlp_norm", False),
        name=f"encoderblock_{i}",
    )


def _pooled(config, x, layer, encoder, masked, collect):
    """(the tokens after the final norm, the embedding): pooled, normed, projected and through the pre-logits."""
    epsilon = config["layer_norm_epsilon"]
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
            config["hidden_size"], config.get("pooling_heads") or config["num_heads"],
            config.get("pooling_mlp_dim") or config["mlp_dim"], mlp_activation=config["mlp_activation"],
            approximate_gelu=config["approximate_gelu"], layer_norm_epsilon=epsilon, name="pooling",
        ))
        if collect is None:
            x = pool(tokens, **masked)
        else:
            x, collect["pooling_attention"] = WithAttention(pool)(tokens, **masked)
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
    return tokens, x


def _heads(config, x, tokens, layer, encoder):
    """The classification head on embedding x; a distilled DeiT's two heads averaged."""
    activation = config["classifier_activation"]
    if config.get("head_norm") == "l2":  # a zero-shot head scores the unit embedding (keras_vit.text.zeroshot)
        x = layer("head_norm", lambda: keras.layers.UnitNormalization(axis=-1, dtype="float32", name="head_norm"))(x)
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


class WithAttention(keras.layers.Layer):
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


# Symbolic probe size for a backbone's true stride: a multiple of every stride in common use
# (powers of two up to 64, x3, x5, x7), so ceil-rounded feature maps cannot hide a bad fit.
_STRIDE_PROBE = 2**6 * 3 * 5 * 7


def apply_backbone(backbone, x, patch_size):
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


def preprocessing_layer(preprocessing, channels):
    """The Normalization layer of a `keras_vit.configs.SCALINGS` scaling, inside the model ("preprocessing")."""
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
