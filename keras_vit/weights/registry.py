"""Named public checkpoints (name -> URL, sha256, architecture) fetched with keras.utils.get_file.

A sha256 is listed only where it was read from a published source; entries whose hash is not
known here hold None and are downloaded unverified (keras.utils.get_file checks the hash when
there is one). The URLs are the google-research/vision_transformer bucket.
"""

from __future__ import annotations

import dataclasses
import os
import urllib.parse

import keras

_BUCKET = "https://storage.googleapis.com/vit_models"


@dataclasses.dataclass(frozen=True)
class CheckpointSpec:
    """One downloadable checkpoint.

    Args:
        url: str. Where it is downloaded from (https:// or file://).
        sha256: str or None. Hex digest checked after download; None skips the check.
        variant: str. Row of `keras_vit.configs.VARIANTS` it was trained with.
        image_size: int. Resolution it was trained or fine-tuned at.
        num_classes: int. Size of its head.
        representation_size: int or None. Width of its pre-logits layer, if any.
        description: str. One line for listings. Defaults to "".

    Example:

    >>> spec = CHECKPOINTS["ViT-B_16-i21k"]
    >>> spec.variant, spec.image_size, spec.num_classes, spec.representation_size
    ('B16', 224, 21843, 768)
    >>> spec.url.startswith("https://storage.googleapis.com/vit_models/")
    True
    """

    url: str
    sha256: str | None
    variant: str
    image_size: int
    num_classes: int
    representation_size: int | None = None
    description: str = ""


def _i21k(variant, name, width):
    return CheckpointSpec(f"{_BUCKET}/imagenet21k/{name}.npz", None, variant, 224, 21843, width,
                          f"{name}, ImageNet-21k pre-training (vit_jax)")


def _i1k(variant, name, size):
    return CheckpointSpec(f"{_BUCKET}/imagenet21k+imagenet2012/{name}.npz", None, variant, size, 1000, None,
                          f"{name}, ImageNet-21k pre-training, ImageNet-1k fine-tuning at {size} (vit_jax)")


CHECKPOINTS: dict[str, CheckpointSpec] = {
    "ViT-B_16-i21k": _i21k("B16", "ViT-B_16", 768),
    "ViT-B_32-i21k": _i21k("B32", "ViT-B_32", 768),
    "ViT-L_16-i21k": _i21k("L16", "ViT-L_16", 1024),
    "ViT-L_32-i21k": _i21k("L32", "ViT-L_32", 1024),
    "ViT-H_14-i21k": _i21k("H14", "ViT-H_14", 1280),
    "ViT-B_16-i21k-i1k-384": _i1k("B16", "ViT-B_16", 384),
    "ViT-B_16-i21k-i1k-224": _i1k("B16", "ViT-B_16-224", 224),
    "ViT-B_32-i21k-i1k-384": _i1k("B32", "ViT-B_32", 384),
    "ViT-L_16-i21k-i1k-384": _i1k("L16", "ViT-L_16", 384),
    "ViT-L_16-i21k-i1k-224": _i1k("L16", "ViT-L_16-224", 224),
    "ViT-L_32-i21k-i1k-384": _i1k("L32", "ViT-L_32", 384),
}


def fetch_checkpoint(name, cache_dir=None):
    """Downloads checkpoint `name` into the Keras cache (once) and returns its local path.

    Args:
        name: str. A key of `CHECKPOINTS`.
        cache_dir: str or None. Cache root; None is keras' default (~/.keras). Defaults to None.

    Example:

    >>> sorted(CHECKPOINTS)[0]
    'ViT-B_16-i21k'
    """
    if name not in CHECKPOINTS:
        raise ValueError(f"Unknown checkpoint name={name!r}. Expected one of {sorted(CHECKPOINTS)} or a file path.")
    spec = CHECKPOINTS[name]
    if cache_dir is not None:
        # keras.utils.get_file falls back to /tmp/.keras when the folder does not exist yet.
        os.makedirs(cache_dir, exist_ok=True)
    suffix = os.path.splitext(urllib.parse.urlparse(spec.url).path)[1] or ".npz"
    return keras.utils.get_file(
        fname=f"{name}{suffix}",
        origin=spec.url,
        file_hash=spec.sha256,
        hash_algorithm="sha256",
        cache_dir=cache_dir,
        cache_subdir="keras_vit",
    )
