"""The one table that declares every ViT variant keras_vit can build.

A variant is a row of `VARIANTS`. Builders, tests and the command line read this table, so a
new variant is one new row: the named builder, the generic tests and `keras-vit --help` pick it
up from here.

Example:

>>> from keras_vit.configs import get_variant
>>> get_variant("B16").hidden_size
768
"""

from __future__ import annotations

import dataclasses
import re


# The input side of a ViT that no row, argument or checkpoint sizes (the paper's and ImageNet's).
DEFAULT_IMAGE_SIZE = 224


@dataclasses.dataclass(frozen=True)
class ViTConfig:
    """Architecture of one ViT variant (paper Table 1).

    Args:
        patch_size: int. Side of the square patches, in pixels of the stem's output.
        hidden_size: int. Token width D.
        mlp_dim: int. Width of the hidden layer of each block's MLP.
        num_heads: int. Attention heads per block; must divide `hidden_size`.
        num_layers: int. Number of transformer blocks.
        image_size: int. Default input side in pixels. Defaults to 224.
        description: str. One line for listings. Defaults to "".
        stem: tuple of int or None. Hybrids only: units per stage of the BiT ResNet stem that
            feeds the transformer (`keras_vit.models.resnet.BiTResNet`); () is the root alone.
            None (plain ViT) patches the pixels. Defaults to None.
        stem_width: int. Root width of the ResNet stem. Defaults to 64.
        family: str. The model family the row belongs to ("vit" for the paper's variants,
            "deit", "deit3", "dinov2", "dinov3", "eva02", "siglip", "siglip2", "clip", "pe"). Defaults to "vit".
        class_token, pooling, distillation_token, num_register_tokens, position_embedding,
        prefix_position_embedding, layer_scale_init, mlp_activation, approximate_gelu,
        layer_norm_epsilon, pre_norm, patch_bias, projection_size, rope, qkv_bias, naflex,
        pooling_heads, pooling_mlp_dim, mlp_norm, fc_norm: the architecture fields of `keras_vit.ViT`
        with the same names; a row states those that differ from the paper's ViT (the defaults here:
        class token, "auto" pooling, no distillation or register tokens, a learned position
        embedding with rows for the prefix tokens, no LayerScale, exact GELU, LayerNorm epsilon
        1e-6, no LayerNorm before the encoder, patch bias, no projection, no rotary position,
        biases on query, key and value, image input, an attention pooling with the blocks'
        heads and MLP width, no LayerNorm inside the MLP, the final LayerNorm before pooling).
        `rope` is a name of `keras_vit.layers.rotary_embedding.ROPE_VARIANTS`
        or a dict of its settings. A NaFlex row's `image_size` is that of its position grid
        (`image_size / patch_size` a side).

    Example:

    >>> config = ViTConfig(8, hidden_size=64, mlp_dim=128, num_heads=4, num_layers=2, image_size=32)
    >>> config.pixel_patch_size, (config.image_size // config.pixel_patch_size) ** 2
    (8, 16)
    >>> hybrid = VARIANTS["R50_B16"]  # 1x1 patches of the stride-16 ResNet feature map
    >>> hybrid.patch_size, hybrid.stem_stride, hybrid.pixel_patch_size
    (1, 16, 16)
    """

    patch_size: int
    hidden_size: int
    mlp_dim: int
    num_heads: int
    num_layers: int
    image_size: int = DEFAULT_IMAGE_SIZE
    description: str = ""
    stem: tuple[int, ...] | None = None
    stem_width: int = 64
    family: str = "vit"
    class_token: bool = True
    pooling: str = "auto"
    distillation_token: bool = False
    num_register_tokens: int = 0
    prefix_position_embedding: bool = True
    layer_scale_init: float | None = None
    mlp_activation: str = "gelu"
    approximate_gelu: bool = False
    layer_norm_epsilon: float = 1e-6
    pre_norm: bool = False
    patch_bias: bool = True
    projection_size: int | None = None
    position_embedding: str = "learned"
    rope: str | dict | None = None
    qkv_bias: str = "qkv"
    naflex: bool = False
    pooling_heads: int | None = None
    pooling_mlp_dim: int | None = None
    mlp_norm: bool = False
    fc_norm: bool = False

    @property
    def stem_stride(self) -> int:
        """Pixels per feature-map cell of the stem (see `stem_stride`)."""
        return stem_stride(self.stem)

    @property
    def pixel_patch_size(self) -> int:
        """Side in pixels of the image area behind one token."""
        return self.patch_size * self.stem_stride


VARIANTS: dict[str, ViTConfig] = {
    "Ti16": ViTConfig(16, 192, 768, 3, 12, description="ViT-Ti/16 (DeiT-Tiny size)"),
    "S16": ViTConfig(16, 384, 1536, 6, 12, description="ViT-S/16"),
    "S32": ViTConfig(32, 384, 1536, 6, 12, description="ViT-S/32"),
    "B8": ViTConfig(8, 768, 3072, 12, 12, description="ViT-B/8"),
    "B16": ViTConfig(16, 768, 3072, 12, 12, description="ViT-B/16"),
    "B32": ViTConfig(32, 768, 3072, 12, 12, description="ViT-B/32"),
    "L16": ViTConfig(16, 1024, 4096, 16, 24, description="ViT-L/16"),
    "L32": ViTConfig(32, 1024, 4096, 16, 24, description="ViT-L/32"),
    "H14": ViTConfig(14, 1280, 5120, 16, 32, description="ViT-H/14"),
    # The giant ones of "Scaling Vision Transformers" (Zhai et al. 2022, Table 2) and PaLI, as
    # big_vision's decode_variant writes them; they need model parallel training
    # (keras_vit.distribution). ViT-g and ViT-G differ only by the case of their letter.
    "g14": ViTConfig(14, 1408, 6144, 16, 40, description="ViT-g/14 (giant, 1.0B)"),
    "G14": ViTConfig(14, 1664, 8192, 16, 48, description="ViT-G/14 (Giant, 1.8B)"),
    "e14": ViTConfig(14, 1792, 15360, 16, 56, description="ViT-e/14 (enormous, 3.8B)"),
    # A few-thousand-parameter model for tests and smoke runs; not a paper variant.
    "tiny": ViTConfig(4, 32, 64, 2, 2, image_size=32, description="tiny test model"),
    # Hybrids (paper section 3.1): the patch size counts cells of the ResNet feature map.
    # R+Ti/16 keeps its published name although root stride 4 x patch 8 puts a token on 32x32
    # pixels (vit_jax, timm vit_tiny_r_s16_p8).
    "R50_B16": ViTConfig(1, 768, 3072, 12, 12, stem=(3, 4, 9), description="R50+ViT-B/16 hybrid"),
    "R50_L32": ViTConfig(1, 1024, 4096, 16, 24, stem=(3, 4, 6, 3), description="R50+ViT-L/32 hybrid"),
    "R26_S32": ViTConfig(1, 384, 1536, 6, 12, stem=(2, 2, 2, 2), description="R26+ViT-S/32 hybrid"),
    "R26_B32": ViTConfig(1, 768, 3072, 12, 12, stem=(2, 2, 2, 2), description="R26+ViT-B/32 hybrid"),
    "R_Ti16": ViTConfig(8, 192, 768, 3, 12, stem=(), description="R+ViT-Ti/16 hybrid (ResNet root only)"),
    # A tiny hybrid for tests: one 32-wide stage, stride 4, 1x1 patches.
    "R_tiny": ViTConfig(
        1, 32, 64, 2, 2, image_size=32, stem=(1,), stem_width=32, description="tiny hybrid test model"
    ),
}


def _family(family, patch, hidden, mlp, heads, layers, image_size, description, **fields):
    return ViTConfig(patch, hidden, mlp, heads, layers, image_size=image_size, description=description, family=family,
                     **fields)


# The families in use today (timm's and Hugging Face's configs for the published checkpoints).
_DEIT_DISTILLED = dict(distillation_token=True, layer_norm_epsilon=1e-6)
_DEIT3 = dict(prefix_position_embedding=False, layer_scale_init=1e-6)
_DINOV2 = dict(layer_scale_init=1e-5)
_DINOV2_REG = dict(layer_scale_init=1e-5, num_register_tokens=4, prefix_position_embedding=False)
_SIGLIP = dict(class_token=False, pooling="map", approximate_gelu=True)
_CLIP = dict(pre_norm=True, patch_bias=False, mlp_activation="quick_gelu", layer_norm_epsilon=1e-5)
# DINOv3 (Hugging Face DINOv3ViTConfig, timm vit_*_patch16_dinov3_qkvb): rotary position on the patch
# tokens instead of a learned table, 4 registers, no key bias; the "plus" sizes have a SwiGLU MLP.
_DINOV3 = dict(position_embedding="none", rope="dinov3", qkv_bias="qv", num_register_tokens=4,
               prefix_position_embedding=False, layer_scale_init=1e-5, layer_norm_epsilon=1e-5)
# SigLIP 2 NaFlex: SigLIP's tower on patch sequences of any aspect, its position grid resampled per image. The
# published B/16 is ViT("SigLIP_B16", naflex=True, image_size=256) (a 16x16 grid); the checkpoints state their
# whole architecture (ViT(weights="hf-hub:google/siglip2-so400m-patch16-naflex")).
_SIGLIP2_NAFLEX = dict(_SIGLIP, naflex=True)
# Perception Encoder core (timm vit_pe_core_*, built by its Eva class): CLIP's LayerNorm before the encoder and
# unbiased patches, a learned position table and rotary position (class token unrotated, each row's pre-training grid
# as reference), an attention pool of 8 heads. Its projection to the image-text embedding (512, 1024 or 1280 wide,
# with a bias) is timm's head: ViT(weights=...) of a timm folder builds it as the head, classifier_activation=None.
_PE = dict(pooling="map", pooling_heads=8, pre_norm=True, patch_bias=False, layer_norm_epsilon=1e-5)


def _pe_rope(rows, offset=1.0):
    return {"variant": "pe", "reference_grid": (rows, rows), "offset": offset}


# EVA-02 (timm eva02_*_patch14, the MIM-pretrained sizes; the 336 and 448 px fine-tunes are the same rows at
# another image size): rotary position (on the 16x16 grid of 224 px) on top of a learned table, no key bias,
# SwiGLU (its width 8/3 of the token width), the mean patch token pooled and then normalised (timm's fc_norm);
# B and L have a LayerNorm inside the MLP (timm's scale_mlp, sub-LN).
_EVA02 = dict(rope="eva02", qkv_bias="qv", mlp_activation="swiglu", pooling="gap", fc_norm=True)
VARIANTS.update({
    "DeiT_Ti16_distilled": _family("deit", 16, 192, 768, 3, 12, 224, "DeiT-Ti/16 distilled", **_DEIT_DISTILLED),
    "DeiT_S16_distilled": _family("deit", 16, 384, 1536, 6, 12, 224, "DeiT-S/16 distilled", **_DEIT_DISTILLED),
    "DeiT_B16_distilled": _family("deit", 16, 768, 3072, 12, 12, 224, "DeiT-B/16 distilled", **_DEIT_DISTILLED),
    "DeiT3_S16": _family("deit3", 16, 384, 1536, 6, 12, 224, "DeiT-III S/16", **_DEIT3),
    "DeiT3_B16": _family("deit3", 16, 768, 3072, 12, 12, 224, "DeiT-III B/16", **_DEIT3),
    "DeiT3_L16": _family("deit3", 16, 1024, 4096, 16, 24, 224, "DeiT-III L/16", **_DEIT3),
    "DINOv2_S14": _family("dinov2", 14, 384, 1536, 6, 12, 518, "DINOv2 ViT-S/14", **_DINOV2),
    "DINOv2_B14": _family("dinov2", 14, 768, 3072, 12, 12, 518, "DINOv2 ViT-B/14", **_DINOV2),
    "DINOv2_L14": _family("dinov2", 14, 1024, 4096, 16, 24, 518, "DINOv2 ViT-L/14", **_DINOV2),
    "DINOv2_S14_reg4": _family("dinov2", 14, 384, 1536, 6, 12, 518, "DINOv2 ViT-S/14, 4 registers", **_DINOV2_REG),
    "DINOv2_B14_reg4": _family("dinov2", 14, 768, 3072, 12, 12, 518, "DINOv2 ViT-B/14, 4 registers", **_DINOV2_REG),
    "DINOv2_L14_reg4": _family("dinov2", 14, 1024, 4096, 16, 24, 518, "DINOv2 ViT-L/14, 4 registers", **_DINOV2_REG),
    # DINOv2's giant: SwiGLU, its width two thirds of 4 x 1536 rounded up to 8 (timm vit_giant_patch14_dinov2).
    "DINOv2_g14": _family("dinov2", 14, 1536, 4096, 24, 40, 518, "DINOv2 ViT-g/14 (SwiGLU, 1.1B)",
                          mlp_activation="swiglu", **_DINOV2),
    "DINOv2_g14_reg4": _family("dinov2", 14, 1536, 4096, 24, 40, 518, "DINOv2 ViT-g/14 (SwiGLU, 1.1B), 4 registers",
                               mlp_activation="swiglu", **_DINOV2_REG),
    "DINOv3_S16": _family("dinov3", 16, 384, 1536, 6, 12, 224, "DINOv3 ViT-S/16 (RoPE)", **_DINOV3),
    "DINOv3_S16_plus": _family("dinov3", 16, 384, 1536, 6, 12, 224, "DINOv3 ViT-S+/16 (RoPE, SwiGLU)",
                               mlp_activation="swiglu", **_DINOV3),
    "DINOv3_B16": _family("dinov3", 16, 768, 3072, 12, 12, 224, "DINOv3 ViT-B/16 (RoPE)", **_DINOV3),
    "DINOv3_L16": _family("dinov3", 16, 1024, 4096, 16, 24, 224, "DINOv3 ViT-L/16 (RoPE)", **_DINOV3),
    "DINOv3_H16_plus": _family("dinov3", 16, 1280, 5120, 20, 32, 224, "DINOv3 ViT-H+/16 (RoPE, SwiGLU, 0.84B)",
                               mlp_activation="swiglu", **_DINOV3),
    "EVA02_Ti14": _family("eva02", 14, 192, 512, 3, 12, 224, "EVA-02 Ti/14 (RoPE, SwiGLU)", **_EVA02),
    "EVA02_S14": _family("eva02", 14, 384, 1024, 6, 12, 224, "EVA-02 S/14 (RoPE, SwiGLU)", **_EVA02),
    "EVA02_B14": _family("eva02", 14, 768, 2048, 12, 12, 224, "EVA-02 B/14 (RoPE, SwiGLU, sub-LN)",
                         mlp_norm=True, **_EVA02),
    "EVA02_L14": _family("eva02", 14, 1024, 2730, 16, 24, 224, "EVA-02 L/14 (RoPE, SwiGLU, sub-LN)",
                         mlp_norm=True, **_EVA02),
    "SigLIP_B16": _family("siglip", 16, 768, 3072, 12, 12, 224, "SigLIP ViT-B/16 image tower", **_SIGLIP),
    "SigLIP_L16": _family("siglip", 16, 1024, 4096, 16, 24, 256, "SigLIP ViT-L/16 image tower", **_SIGLIP),
    "SigLIP_So400m14": _family("siglip", 14, 1152, 4304, 16, 27, 224, "SigLIP So400m/14 image tower", **_SIGLIP),
    "CLIP_B32": _family("clip", 32, 768, 3072, 12, 12, 224, "CLIP ViT-B/32 image tower", projection_size=512, **_CLIP),
    "CLIP_B16": _family("clip", 16, 768, 3072, 12, 12, 224, "CLIP ViT-B/16 image tower", projection_size=512, **_CLIP),
    "CLIP_L14": _family("clip", 14, 1024, 4096, 16, 24, 224, "CLIP ViT-L/14 image tower", projection_size=768, **_CLIP),
    "PE_Core_T16": _family("pe", 16, 192, 768, 3, 12, 384, "PE-Core T/16 image tower (RoPE, attention pool)",
                           rope=_pe_rope(24), **_PE),
    "PE_Core_S16": _family("pe", 16, 384, 1536, 6, 12, 384, "PE-Core S/16 image tower (RoPE, attention pool)",
                           rope=_pe_rope(24), **_PE),
    "PE_Core_B16": _family("pe", 16, 768, 3072, 12, 12, 224, "PE-Core B/16 image tower (RoPE, attention pool)",
                           rope=_pe_rope(14), **_PE),
    "PE_Core_L14": _family("pe", 14, 1024, 4096, 16, 24, 336, "PE-Core L/14 image tower (RoPE, attention pool)",
                           rope=_pe_rope(24), **_PE),
    # The gigantic one has no class token (so no offset: nothing sits at 0) and an MLP wider than its pool's.
    "PE_Core_G14": _family("pe", 14, 1536, 8960, 16, 50, 448, "PE-Core G/14 image tower (RoPE, attention pool, 1.9B)",
                           rope=_pe_rope(32, offset=0.0), class_token=False, pooling_mlp_dim=6144, **_PE),
    # Tiny rows of each family for tests and smoke runs: odd widths, 2 blocks.
    "tiny_deit": _family("deit", 4, 24, 40, 2, 2, 16, "tiny distilled DeiT test model", **_DEIT_DISTILLED),
    "tiny_dinov2": _family("dinov2", 4, 24, 40, 2, 2, 16, "tiny DINOv2 (3 registers) test model",
                           layer_scale_init=0.1, num_register_tokens=3),
    "tiny_dinov3": _family("dinov3", 4, 24, 40, 2, 2, 16, "tiny DINOv3 (RoPE, 4 registers) test model",
                           **dict(_DINOV3, layer_scale_init=0.1)),
    "tiny_eva02": _family("eva02", 4, 24, 40, 2, 2, 16, "tiny EVA-02 (RoPE, SwiGLU, sub-LN) test model",
                          mlp_norm=True, **_EVA02),
    "tiny_siglip": _family("siglip", 4, 24, 40, 2, 2, 16, "tiny SigLIP test model", **_SIGLIP),
    "tiny_clip": _family("clip", 4, 24, 40, 2, 2, 16, "tiny CLIP test model", projection_size=20, **_CLIP),
    "tiny_pe": _family("pe", 4, 24, 40, 2, 2, 16, "tiny PE-Core (RoPE, 3-head attention pool) test model",
                       rope={"variant": "pe", "reference_grid": (3, 5)},
                       **dict(_PE, pooling_heads=3, pooling_mlp_dim=36)),
    "tiny_siglip2": _family("siglip2", 4, 24, 40, 2, 2, 16, "tiny SigLIP 2 NaFlex test model", **_SIGLIP2_NAFLEX),
})

# The fields that describe a ViT's architecture, in the order messages list them. A checkpoint
# (`keras_vit.weights.Checkpoint.architecture`) states each of them, None where its layout does
# not store it; the builder resolves every one into the model's config (`model.vit_config`).
# The five every row states (ViTConfig's positional fields), first of them.
CORE_FIELDS = ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim")
ARCHITECTURE_FIELDS = CORE_FIELDS + (
    "class_token", "pooling",
    "representation_size", "position_embedding", "grid_size", "channels", "approximate_gelu",
    "layer_norm_epsilon", "stem", "stem_width", "num_classes", "distillation_token", "num_register_tokens",
    "prefix_position_embedding", "layer_scale_init", "mlp_activation", "pre_norm", "patch_bias",
    "projection_size", "rope", "qkv_bias", "naflex", "pooling_heads", "pooling_mlp_dim", "mlp_norm", "fc_norm",
)
# The family fields of `ViTConfig` a variant row passes on when they differ from the paper ViT's.
FAMILY_FIELDS = (
    "class_token", "pooling", "distillation_token", "num_register_tokens", "prefix_position_embedding",
    "layer_scale_init", "mlp_activation", "approximate_gelu", "layer_norm_epsilon", "pre_norm", "patch_bias",
    "projection_size", "position_embedding", "rope", "qkv_bias", "naflex", "pooling_heads", "pooling_mlp_dim",
    "mlp_norm", "fc_norm",
)
# The attention pool's own fields and the blocks' field each defaults to: None states the blocks' value.
POOLING_OWN_FIELDS = {"pooling_heads": "num_heads", "pooling_mlp_dim": "mlp_dim"}


def fold_pooling_fields(fields):
    """Sets the fields of `POOLING_OWN_FIELDS` that equal the blocks' value to None (how rows state them), in place.

    Example:

    >>> fold_pooling_fields({"num_heads": 8, "mlp_dim": 64, "pooling_heads": 8, "pooling_mlp_dim": 32})
    {'num_heads': 8, 'mlp_dim': 64, 'pooling_heads': None, 'pooling_mlp_dim': 32}
    """
    for field, blocks in POOLING_OWN_FIELDS.items():
        if fields[field] is not None and fields[field] == fields[blocks]:
            fields[field] = None
    return fields


def stated_pooling_fields(config):
    """The fields of `POOLING_OWN_FIELDS` a config sets (not the blocks' value), as "field=value" for messages.

    Example:

    >>> stated_pooling_fields({"pooling_heads": 8}), stated_pooling_fields({"pooling_heads": None})
    (['pooling_heads=8'], [])
    """
    return [f"{field}={config[field]}" for field in POOLING_OWN_FIELDS if config.get(field) is not None]


# The paper ViT's value of each family field (ViTConfig's defaults): what a layout states and a
# model gets unless an argument, a row or the file says otherwise.
FAMILY_DEFAULTS = {field.name: field.default for field in dataclasses.fields(ViTConfig) if field.name in FAMILY_FIELDS}
# Of those, the ones a caller may set to another value than the checkpoint's: the patch size
# given as patch_size= (FlexiViT's pseudo-inverse kernel resize, the image size kept; a
# variant's other patch size stays a contradiction), the head (a new
# task or feature extraction, the projection left out), the GELU form, LayerNorm epsilon and the
# LayerScale init (numerics; a loaded scale replaces it), and the grid (the position embedding is
# resampled), and NaFlex (the same weights take images of one size or patch sequences of any
# aspect). Any other difference is a contradiction and is refused.
ADJUSTABLE_FIELDS = (
    "patch_size", "pooling", "representation_size", "grid_size", "approximate_gelu", "layer_norm_epsilon", "num_classes",
    "projection_size", "layer_scale_init",
    "naflex",
)

# How pixel values in [0, 255] are mapped to what a model was trained on: (mean, std) per
# channel, applied as (x - mean) / std. The original Google checkpoints use "symmetric",
# DeiT/timm ImageNet checkpoints "imagenet".
SCALINGS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "unit": ((0.0,), (255.0,)),
    "symmetric": ((127.5,), (127.5,)),
    "imagenet": ((0.485 * 255, 0.456 * 255, 0.406 * 255), (0.229 * 255, 0.224 * 255, 0.225 * 255)),
    # OpenAI CLIP's mean and std (OpenCLIP's too); SigLIP uses "symmetric", DINOv2 "imagenet".
    "clip": ((0.48145466 * 255, 0.4578275 * 255, 0.40821073 * 255), (0.26862954 * 255, 0.26130258 * 255, 0.27577711 * 255)),
}


def stem_stride(stem) -> int:
    """Pixels per feature-map cell of a BiT stem: 4 for the ResNet root, x2 per stage after the first.

    Args:
        stem: tuple of int or None. Units per stage; () is the root alone, None no stem (1).

    Example:

    >>> stem_stride(None), stem_stride(()), stem_stride((3, 4, 9))
    (1, 4, 16)
    """
    if stem is None:
        return 1
    return 4 * 2 ** max(len(stem) - 1, 0)


def get_variant(name: str) -> ViTConfig:
    """Returns the table row of variant `name`.

    Args:
        name: str. A key of `VARIANTS`, e.g. "B16". "ViT-B/16", "vit_b16" and "B/16" are
            accepted too.

    Example:

    >>> get_variant("ViT-B/16").patch_size
    16
    """
    key = normalize_variant_name(name)
    if key not in VARIANTS:
        raise ValueError(
            f"Unknown variant: variant={name!r}. Expected one of {sorted(VARIANTS)}."
        )
    return VARIANTS[key]


def normalize_variant_name(name: str) -> str:
    """Maps spellings like "ViT-B/16" or "vit_b16" to the table key "B16".

    Args:
        name: str. A variant name in any common spelling; unknown names come back unchanged.

    Example:

    >>> [normalize_variant_name(name) for name in ("ViT-B/16", "vit_b16", "R50+ViT-B/16", "mine")]
    ['B16', 'B16', 'R50_B16', 'mine']
    >>> normalize_variant_name("ViT-g/14"), normalize_variant_name("ViT-G/14")  # the case decides here
    ('g14', 'G14')
    """
    if not isinstance(name, str):
        raise ValueError(f"variant must be a string, got variant={name!r}.")
    matches = [known for known in VARIANTS if _canonical(known) == _canonical(name)]
    if len(matches) > 1:
        matches = [known for known in matches if _canonical(known, keep_case=True) == _canonical(name, keep_case=True)]
    return matches[0] if len(matches) == 1 else name


def _canonical(name, keep_case=False):
    # "ViT-B/16", "vit_b16", "R50+ViT-B/16" and "R50_ViT_B16" all reduce to "b16" / "r50b16".
    key = re.sub("vit", "", name.strip(), flags=re.IGNORECASE)
    for char in "/-_+ ":
        key = key.replace(char, "")
    return key if keep_case else key.lower()


def builder_name(variant: str) -> str:
    """Name of the named builder of `variant`: "ViT_B16", or "R50_ViT_B16" for a hybrid.

    Example:

    >>> builder_name("R50+ViT-B/16")
    'R50_ViT_B16'
    """
    key = normalize_variant_name(variant)
    get_variant(key)
    if VARIANTS[key].stem is None:
        return f"ViT_{key}"
    stem, _, encoder = key.partition("_")
    return f"{stem}_ViT_{encoder}"


# The rows with a named builder (`keras_vit.ViT_B16`, `keras_vit.R50_ViT_B16`, ...): the paper's
# variants and hybrids, by builder name.
NAMED_BUILDERS: dict[str, str] = {
    builder_name(name): name for name, row in VARIANTS.items() if row.family == "vit" and "tiny" not in name
}
