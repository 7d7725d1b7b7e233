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

from keras_vit.configs import normalize_variant_name
from keras_vit.weights.files import CheckpointError

_BUCKET = "https://storage.googleapis.com/vit_models"


@dataclasses.dataclass(frozen=True)
class CheckpointSpec:
    """One downloadable checkpoint; its architecture is read from the file itself.

    Args:
        url: str. Where it is downloaded from (https:// or file://).
        sha256: str or None. Hex digest checked after download; None skips the check.
        variant: str. Row of `keras_vit.configs.VARIANTS` it was trained with.

    Example:

    >>> spec = CHECKPOINTS["ViT-B_16-i21k"]
    >>> spec.variant, spec.url.startswith("https://storage.googleapis.com/vit_models/")
    ('B16', True)
    """

    url: str
    sha256: str | None
    variant: str


def _i21k(variant, name):
    return CheckpointSpec(f"{_BUCKET}/imagenet21k/{name}.npz", None, variant)


def _i1k(variant, name):
    return CheckpointSpec(f"{_BUCKET}/imagenet21k+imagenet2012/{name}.npz", None, variant)


# ImageNet-21k pre-training (with pre-logits, 21843 classes), and ImageNet-21k pre-training
# fine-tuned on ImageNet-1k at 384 px (or 224 where the name says so), as vit_jax publishes them.
CHECKPOINTS: dict[str, CheckpointSpec] = {
    "ViT-B_16-i21k": _i21k("B16", "ViT-B_16"),
    "ViT-B_32-i21k": _i21k("B32", "ViT-B_32"),
    "ViT-L_16-i21k": _i21k("L16", "ViT-L_16"),
    "ViT-L_32-i21k": _i21k("L32", "ViT-L_32"),
    "ViT-H_14-i21k": _i21k("H14", "ViT-H_14"),
    "ViT-B_16-i21k-i1k-384": _i1k("B16", "ViT-B_16"),
    "ViT-B_16-i21k-i1k-224": _i1k("B16", "ViT-B_16-224"),
    "ViT-B_32-i21k-i1k-384": _i1k("B32", "ViT-B_32"),
    "ViT-L_16-i21k-i1k-384": _i1k("L16", "ViT-L_16"),
    "ViT-L_16-i21k-i1k-224": _i1k("L16", "ViT-L_16-224"),
    "ViT-L_32-i21k-i1k-384": _i1k("L32", "ViT-L_32"),
}

# weights="imagenet": the ImageNet-1k fine-tuned checkpoint of each variant, at 224 px where
# vit_jax publishes one (as keras.applications' default input size), else at 384 px.
IMAGENET: dict[str, str] = {
    "B16": "ViT-B_16-i21k-i1k-224",
    "B32": "ViT-B_32-i21k-i1k-384",
    "L16": "ViT-L_16-i21k-i1k-224",
    "L32": "ViT-L_32-i21k-i1k-384",
}


def imagenet_checkpoint(variant):
    """The name in `CHECKPOINTS` that weights="imagenet" means for `variant`.

    Args:
        variant: str or None. A variant name in any spelling of `keras_vit.configs`.

    Example:

    >>> imagenet_checkpoint("ViT-B/16")
    'ViT-B_16-i21k-i1k-224'
    """
    if variant is None:
        raise ValueError(
            "weights='imagenet' needs variant= (or a named builder such as keras_vit.ViT_B16): "
            f"the ImageNet-1k checkpoints are per variant, one of {sorted(IMAGENET)}."
        )
    key = normalize_variant_name(variant)
    if key not in IMAGENET:
        raise ValueError(
            f"There is no ImageNet-1k checkpoint for variant={key!r} in keras_vit.weights.CHECKPOINTS; "
            f"weights='imagenet' exists for {sorted(IMAGENET)}. Pass a checkpoint file or name instead."
        )
    return IMAGENET[key]


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
    try:
        return keras.utils.get_file(
            fname=f"{name}{suffix}",
            origin=spec.url,
            file_hash=spec.sha256,
            hash_algorithm="sha256",
            cache_dir=cache_dir,
            cache_subdir="keras_vit",
        )
    except ValueError:
        raise  # a hash mismatch: keras' own message says so
    except Exception as error:  # keras wraps URL, HTTP and socket errors in a bare Exception
        reason = " ".join(str(error).split())
        raise CheckpointError(
            f"Could not download checkpoint {name!r} from {spec.url} ({reason}); check the network, or "
            "download the file yourself and pass its path as weights=."
        ) from error
