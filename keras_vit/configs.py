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
    """

    patch_size: int
    hidden_size: int
    mlp_dim: int
    num_heads: int
    num_layers: int
    image_size: int = 224
    description: str = ""


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
    # A few-thousand-parameter model for tests and smoke runs; not a paper variant.
    "tiny": ViTConfig(4, 32, 64, 2, 2, image_size=32, description="tiny test model"),
}

# How pixel values in [0, 255] are mapped to what a model was trained on: (mean, std) per
# channel, applied as (x - mean) / std. The original Google checkpoints use "symmetric",
# DeiT/timm ImageNet checkpoints "imagenet".
SCALINGS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "unit": ((0.0,), (255.0,)),
    "symmetric": ((127.5,), (127.5,)),
    "imagenet": ((0.485 * 255, 0.456 * 255, 0.406 * 255), (0.229 * 255, 0.224 * 255, 0.225 * 255)),
}


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
    """Maps spellings like "ViT-B/16" or "vit_b16" to the table key "B16"."""
    if not isinstance(name, str):
        raise ValueError(f"variant must be a string, got variant={name!r}.")
    key = name.strip()
    lowered = key.lower()
    for prefix in ("vit-", "vit_", "vit"):
        if lowered.startswith(prefix):
            key = key[len(prefix):]
            break
    key = key.replace("/", "").replace("-", "").replace("_", "")
    for known in VARIANTS:
        if known.lower() == key.lower():
            return known
    return name
