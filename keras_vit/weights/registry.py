"""Named public checkpoints (name -> where, sha256, architecture): Hub ids and bucket URLs.

The families on the Hugging Face Hub (timm's repositories, `save_pretrained` folders) are Hub ids
fetched through huggingface_hub (`keras_vit.weights.hub`: its cache, `HF_HUB_OFFLINE`,
`HF_TOKEN`); the original ViT, AugReg and FlexiViT files are URLs of the
google-research/vision_transformer and big_vision buckets, fetched with keras.utils.get_file.
A sha256 is listed only where it was read from a published source; entries whose hash is not
known here hold None (huggingface_hub's cache still refuses a blob that does not hash to its
name). None of the family presets has a hash yet: they were added on a machine without access
to the files, and a hash is never made up.
"""

from __future__ import annotations

import dataclasses
import os
import urllib.parse

import keras

from keras_vit.configs import normalize_variant_name
from keras_vit.weights import hub
from keras_vit.weights.files import CheckpointError

_BUCKET = "https://storage.googleapis.com/vit_models"


@dataclasses.dataclass(frozen=True)
class CheckpointSpec:
    """One downloadable checkpoint; its architecture is read from the file itself.

    Args:
        url: str. Where it is downloaded from: https:// or file:// (keras.utils.get_file), or a
            Hub id "hf-hub:ORG/NAME[@REVISION]" (huggingface_hub, see `keras_vit.weights.hub`).
        sha256: str or None. Hex digest of the file (a Hub id's model.safetensors) checked
            after download; None skips the check.
        variant: str. Row of `keras_vit.configs.VARIANTS` it was trained with (timm files do
            not store the head count: the row gives it).
        config_url: str or None. The config.json of a Hugging Face checkpoint given by URL; the
            two files are fetched into one folder (a Hub id fetches its own). Defaults to None.
        source: str. Who published it and where. Defaults to "".
        resolution: int or None. Image side it was trained at. Defaults to None.
        pooling: str or None. What `include_top=False` returns ("token", "map", "gap").
            Defaults to None.
        preprocessing: str or None. The pixel scaling it expects, a key of
            `keras_vit.configs.SCALINGS` (pass it as `preprocessing=` to `keras_vit.ViT`).
            Defaults to None.
        licence: str. The weights' licence. Defaults to "".

    Example:

    >>> spec = CHECKPOINTS["ViT-B_16-i21k"]
    >>> spec.variant, spec.url.startswith("https://storage.googleapis.com/vit_models/")
    ('B16', True)
    """

    url: str
    sha256: str | None
    variant: str
    config_url: str | None = None
    source: str = ""
    resolution: int | None = None
    pooling: str | None = None
    preprocessing: str | None = None
    licence: str = ""


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

def _timm(variant, repo, resolution, pooling, preprocessing, licence):
    return CheckpointSpec(f"{hub.PREFIX}timm/{repo}", None, variant, source=f"timm: {repo}",
                          resolution=resolution, pooling=pooling, preprocessing=preprocessing, licence=licence)


def _hf(variant, repo, resolution, pooling, preprocessing, licence):
    return CheckpointSpec(f"{hub.PREFIX}{repo}", None, variant, source=f"Hugging Face: {repo}", resolution=resolution,
                          pooling=pooling, preprocessing=preprocessing, licence=licence)


# The families in use today. The architecture is always read from the file; `variant` names the
# table row of the same shape.
CHECKPOINTS.update({
    "deit_tiny_distilled_patch16_224": _timm("DeiT_Ti16_distilled", "deit_tiny_distilled_patch16_224.fb_in1k", 224,
                                             "token", "imagenet", "Apache-2.0"),
    "deit_small_distilled_patch16_224": _timm("DeiT_S16_distilled", "deit_small_distilled_patch16_224.fb_in1k", 224,
                                              "token", "imagenet", "Apache-2.0"),
    "deit_base_distilled_patch16_224": _timm("DeiT_B16_distilled", "deit_base_distilled_patch16_224.fb_in1k", 224,
                                             "token", "imagenet", "Apache-2.0"),
    "deit3_small_patch16_224": _timm("DeiT3_S16", "deit3_small_patch16_224.fb_in1k", 224, "token", "imagenet",
                                     "Apache-2.0"),
    "deit3_base_patch16_224": _timm("DeiT3_B16", "deit3_base_patch16_224.fb_in1k", 224, "token", "imagenet",
                                    "Apache-2.0"),
    "deit3_large_patch16_224": _timm("DeiT3_L16", "deit3_large_patch16_224.fb_in1k", 224, "token", "imagenet",
                                     "Apache-2.0"),
    "dinov2-small": _hf("DINOv2_S14", "facebook/dinov2-small", 518, "token", "imagenet", "Apache-2.0"),
    "dinov2-base": _hf("DINOv2_B14", "facebook/dinov2-base", 518, "token", "imagenet", "Apache-2.0"),
    "dinov2-large": _hf("DINOv2_L14", "facebook/dinov2-large", 518, "token", "imagenet", "Apache-2.0"),
    "dinov2-giant": _hf("DINOv2_g14", "facebook/dinov2-giant", 518, "token", "imagenet", "Apache-2.0"),
    "dinov2-with-registers-small": _hf("DINOv2_S14_reg4", "facebook/dinov2-with-registers-small", 518, "token",
                                       "imagenet", "Apache-2.0"),
    "dinov2-with-registers-base": _hf("DINOv2_B14_reg4", "facebook/dinov2-with-registers-base", 518, "token",
                                      "imagenet", "Apache-2.0"),
    "dinov2-with-registers-large": _hf("DINOv2_L14_reg4", "facebook/dinov2-with-registers-large", 518, "token",
                                       "imagenet", "Apache-2.0"),
    "dinov2-with-registers-giant": _hf("DINOv2_g14_reg4", "facebook/dinov2-with-registers-giant", 518, "token",
                                       "imagenet", "Apache-2.0"),
    "siglip-base-patch16-224": _hf("SigLIP_B16", "google/siglip-base-patch16-224", 224, "map", "symmetric",
                                   "Apache-2.0"),
    "siglip-so400m-patch14-224": _hf("SigLIP_So400m14", "google/siglip-so400m-patch14-224", 224, "map", "symmetric",
                                     "Apache-2.0"),
    "siglip2-base-patch16-224": _hf("SigLIP_B16", "google/siglip2-base-patch16-224", 224, "map", "symmetric",
                                    "Apache-2.0"),
    "clip-vit-base-patch32": _hf("CLIP_B32", "openai/clip-vit-base-patch32", 224, "token", "clip", "MIT"),
    "clip-vit-base-patch16": _hf("CLIP_B16", "openai/clip-vit-base-patch16", 224, "token", "clip", "MIT"),
    "clip-vit-large-patch14": _hf("CLIP_L14", "openai/clip-vit-large-patch14", 224, "token", "clip", "MIT"),
    "openclip-vit-b-32-laion2b": _hf("CLIP_B32", "laion/CLIP-ViT-B-32-laion2B-s34B-b79K", 224, "token", "clip", "MIT"),
    "augreg-B_16-i21k-i1k-224": CheckpointSpec(
        f"{_BUCKET}/augreg/B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01-res_224.npz",
        None, "B16", source="google-research/vision_transformer AugReg", resolution=224, pooling="token",
        preprocessing="symmetric", licence="Apache-2.0",
    ),
    "flexivit-b-i1k": CheckpointSpec(
        "https://storage.googleapis.com/big_vision/flexivit/flexivit_b_i1k.npz", None, "B16",
        source="google-research/big_vision FlexiViT (pass patch_size= for any patch size)", resolution=240,
        pooling="token", preprocessing="symmetric", licence="Apache-2.0",
    ),
})

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


def fetch_checkpoint(name, cache_dir=None, *, token=None):
    """Downloads checkpoint `name` (once) and returns its local path: a file, or a folder for Hub ids.

    Args:
        name: str. A key of `CHECKPOINTS`.
        cache_dir: str or None. Cache root: huggingface_hub's for a Hub id (None: `HF_HUB_CACHE`),
            keras' for a URL (None: ~/.keras). Defaults to None.
        token: str or None. Hugging Face token for a gated Hub repository; None uses
            `HF_TOKEN`. Defaults to None.

    Example:

    >>> sorted(CHECKPOINTS)[0]
    'ViT-B_16-i21k'
    """
    if name not in CHECKPOINTS:
        raise ValueError(f"Unknown checkpoint name={name!r}. Expected one of {sorted(CHECKPOINTS)} or a file path.")
    spec = CHECKPOINTS[name]
    if hub.is_hub_id(spec.url):
        folder = hub.download(spec.url, token=token, cache_dir=cache_dir)
        weights = os.path.join(folder, "model.safetensors")
        if spec.sha256 is not None and hub.file_sha256(weights) != spec.sha256:
            raise CheckpointError(
                f"{weights!r} of checkpoint {name!r} does not have the published sha256 {spec.sha256}: delete it "
                "from the Hugging Face cache and fetch it again."
            )
        return folder
    if cache_dir is not None:
        # keras.utils.get_file falls back to /tmp/.keras when the folder does not exist yet.
        os.makedirs(cache_dir, exist_ok=True)
    suffix = os.path.splitext(urllib.parse.urlparse(spec.url).path)[1] or ".npz"
    try:
        if spec.config_url is not None:
            # A Hugging Face checkpoint: config.json and model.safetensors side by side in one folder.
            folder = f"keras_vit/{name}"
            keras.utils.get_file(fname="config.json", origin=spec.config_url, cache_dir=cache_dir, cache_subdir=folder)
            weights = keras.utils.get_file(
                fname="model.safetensors", origin=spec.url, file_hash=spec.sha256, hash_algorithm="sha256",
                cache_dir=cache_dir, cache_subdir=folder,
            )
            return os.path.dirname(weights)
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
