"""`save_timm`: a keras_vit model as a timm Hub folder (config.json + model.safetensors), for tests and benchmarks.

The tensors come from the timm layer mappings the loader reads with, run backwards; the
config.json names a timm architecture of `keras_vit.weights.timm_names.TIMM_ARCHITECTURES` and
the `model_args` that make timm build this model from it (written in full, so the folder does
not depend on a name's defaults), and is read back through the same table before anything is
written: a model the name and arguments would not rebuild is refused, naming each field.

Example:

>>> import os, tempfile, keras_vit
>>> folder = os.path.join(tempfile.mkdtemp(), "tiny")
>>> save_timm(keras_vit.ViT("tiny", num_classes=3, preprocessing="imagenet"), folder)
>>> sorted(os.listdir(folder)), keras_vit.ViT(weights=folder).vit_config["num_heads"]
(['config.json', 'model.safetensors'], 2)
"""

from __future__ import annotations

import math
import os

import numpy as np

from keras_vit._atomic import atomic_directory, write_json
from keras_vit.configs import CORE_FIELDS, FAMILY_FIELDS, SCALINGS, stated_pooling_fields
from keras_vit.weights.files import CheckpointError, writable_checkpoint_folder, write_safetensors
from keras_vit.weights.timm_layout import LAYOUT
from keras_vit.weights.mapping import MappingContext, model_tensors
from keras_vit.weights.preprocessing import timm_preprocessing
from keras_vit.weights.timm_names import (
    ACTIVATIONS, GLOBAL_POOLS, TIMM_ARCHITECTURES, architecture_fields, config_architecture, eva_architecture,
    supported_patterns,
)

# timm's own `_cfg` defaults for what a model does not state (its resize filter and crop).
TIMM_DEFAULT_CFG = {"interpolation": "bicubic", "crop_pct": 0.9, "crop_mode": "center"}
_COMPARED = CORE_FIELDS + (
    "channels", "class_token", "pooling", "distillation_token", "num_register_tokens", "prefix_position_embedding",
    "layer_scale_init", "mlp_activation", "approximate_gelu", "layer_norm_epsilon", "pre_norm", "patch_bias",
    "position_embedding", "num_classes", "qkv_bias")


def save_timm(model, folder, *, architecture=None, pretrained_cfg=None, overwrite=False):
    """Writes a keras_vit model as a timm Hub folder: config.json + model.safetensors in timm's key layout.

    The folder is what `timm.models.push_to_hf_hub` uploads (and `timm.create_model(
    "local-dir:FOLDER", pretrained=True)` reads): config.json holds `architecture`,
    `num_classes`, `num_features`, `global_pool`, `model_args` and `pretrained_cfg` (mean, std,
    input_size, interpolation, crop_pct). The model's own `preprocessing` becomes
    `pretrained_cfg`'s mean and std (timm normalises in its data pipeline, not in the model).
    It is written whole into a temporary sibling and renamed: a failure leaves nothing behind.

    Args:
        model: keras.Model. A model built by `keras_vit.ViT`.
        folder: str. The folder to write.
        architecture: str or None. The timm model name to write (a key of
            `keras_vit.weights.timm_names.TIMM_ARCHITECTURES`); its model_args are written to
            fit the model. None picks the first name that can hold it (a name fixes DeiT's
            distillation token, DINOv2-giant's SwiGLU and the LayerNorm epsilon). Defaults to None.
        pretrained_cfg: dict or None. timm pretrained_cfg entries written over the defaults:
            mean and std from the model's `preprocessing` (required here when it has none),
            input_size from its image size, interpolation "bicubic" and crop_pct 0.9 (timm's
            own defaults). Defaults to None.
        overwrite: bool. Replace an existing non-empty `folder`. Defaults to False.

    Example:

    >>> import json, os, tempfile, keras_vit
    >>> folder = os.path.join(tempfile.mkdtemp(), "deit")
    >>> save_timm(keras_vit.ViT("tiny_deit", num_classes=3), folder, pretrained_cfg={"mean": [0.5] * 3, "std": [0.5] * 3})
    >>> config = json.load(open(os.path.join(folder, "config.json")))
    >>> config["architecture"], config["model_args"]["embed_dim"], config["pretrained_cfg"]["input_size"]
    ('deit_tiny_distilled_patch16_224', 24, [3, 16, 16])
    """
    config, folder = writable_checkpoint_folder(model, folder, overwrite, "save_timm")
    timm_config = timm_config_of(model, architecture, pretrained_cfg)
    prefix = (config["class_token"] + config["distillation_token"]) if config["prefix_position_embedding"] else 0
    context = MappingContext("timm", {}, LAYOUT.interpolation, source_prefix_tokens=prefix)
    tensors = {key: np.asarray(array, "float32") for key, array in model_tensors(model, context).items()}
    with atomic_directory(folder, overwrite=os.path.isdir(folder)) as tmp:
        write_json(os.path.join(tmp, "config.json"), timm_config)
        write_safetensors(os.path.join(tmp, "model.safetensors"), tensors, {"format": "pt"})


def timm_config_of(model, architecture=None, pretrained_cfg=None):
    """The timm config.json dict of `model` (see `save_timm`); refused naming what timm cannot hold."""
    config = model.vit_config
    problems = []
    if config["backbone"] is not None or config["stem"] is not None:
        problems.append("a ResNet stem or backbone (hybrid)")
    if config["position_embedding"] == "sincos2d":
        problems.append("position_embedding='sincos2d' (timm stores a learned one or none)")
    if config.get("naflex"):
        problems.append("naflex=True (timm's VisionTransformer takes images; build the same weights with naflex=False)")
    if config["representation_size"] is not None:
        problems.append(f"representation_size={config['representation_size']} (timm's ViT has no pre-logits layer)")
    if config["projection_size"] is not None:
        problems.append(f"projection_size={config['projection_size']} (timm keeps CLIP's projection as its head: "
                        "build with projection_size=None)")
    if config["pooling"] not in GLOBAL_POOLS.values():
        problems.append(f"pooling={config['pooling']!r} (timm pools with {sorted(GLOBAL_POOLS)})")
    if config["num_register_tokens"] and config["class_token"] and config["prefix_position_embedding"]:
        problems.append("register tokens with prefix_position_embedding=True (timm gives the class token a position "
                        "row only when it gives the registers one too; keras_vit never does)")
    pool_fields = stated_pooling_fields(config)
    if pool_fields:
        problems.append(f"{' and '.join(pool_fields)} (timm's VisionTransformer pools with its blocks' heads and MLP "
                        "width)")
    if config["rope"] is not None:
        problems.append("rotary position (rope=...: timm builds it with its Eva class, which save_timm does not write)")
    if config["qkv_bias"] == "qv":
        problems.append("qkv_bias='qv' (query and value biases without a key bias: timm's Eva, not its "
                        "VisionTransformer)")
    if config["patch_bias"] == config["pre_norm"]:
        problems.append(f"patch_bias={config['patch_bias']} with pre_norm={config['pre_norm']} (timm drops the patch "
                        "bias exactly when it adds the LayerNorm before the encoder)")
    if problems:
        raise CheckpointError(f"Model {model.name!r} has what a timm VisionTransformer cannot hold: "
                              + "; ".join(problems) + ". save_hf and save_npz write other layouts.")
    args = _model_args(model, config)
    name = _architecture(model, config, architecture, args)
    classes = config["num_classes"] if config["include_top"] else 0
    timm = {"architecture": name, "num_classes": classes, "num_features": config["hidden_size"],
            "global_pool": args["global_pool"], "model_args": args}
    cfg = dict(TIMM_DEFAULT_CFG, input_size=[config["channels"], *_image_size(model, config)], num_classes=classes)
    if config["preprocessing"] is not None:
        mean, std = SCALINGS[config["preprocessing"]]
        cfg.update(mean=[round(mean[i % len(mean)] / 255.0, 8) for i in range(config["channels"])],
                   std=[round(std[i % len(std)] / 255.0, 8) for i in range(config["channels"])])
    if pretrained_cfg is not None:
        if not isinstance(pretrained_cfg, dict):
            raise ValueError(f"Invalid pretrained_cfg={pretrained_cfg!r}. Expected a dict of timm pretrained_cfg entries.")
        cfg.update(pretrained_cfg)
    if "mean" not in cfg or "std" not in cfg:
        raise ValueError(
            f"Model {model.name!r} scales no pixels (preprocessing=None), so its pixel mean and std are not known: "
            "pass pretrained_cfg=dict(mean=[...], std=[...]) (per channel, [0, 1] units)."
        )
    timm["pretrained_cfg"] = cfg
    timm_preprocessing(timm, "the pretrained_cfg argument")  # refuses a malformed mean, size or crop
    return timm


def _model_args(model, config):
    """timm VisionTransformer arguments that rebuild `model` on top of any name's defaults."""
    hidden, mlp = config["hidden_size"], config["mlp_dim"]
    width = 2 * mlp if config["mlp_activation"] == "swiglu" else mlp
    ratio = width / hidden
    if int(hidden * ratio) != width:  # timm truncates hidden * mlp_ratio: aim inside the integer
        ratio = (width + 0.5) / hidden
    height, side = _image_size(model, config)
    pool = {value: key for key, value in GLOBAL_POOLS.items()}[config["pooling"]]
    args = {
        "img_size": height if height == side else [height, side], "patch_size": config["patch_size"],
        "in_chans": config["channels"], "num_classes": config["num_classes"] if config["include_top"] else 0,
        "global_pool": pool, "embed_dim": hidden, "depth": config["num_layers"], "num_heads": config["num_heads"],
        "mlp_ratio": ratio, "class_token": config["class_token"], "reg_tokens": config["num_register_tokens"],
        "no_embed_class": not config["prefix_position_embedding"], "init_values": config["layer_scale_init"],
        "pre_norm": config["pre_norm"], "qkv_bias": config["qkv_bias"] == "qkv",
        # Explicit: timm adds a LayerNorm after avg and max pools unless told, and none otherwise.
        "fc_norm": config.get("fc_norm", False),
    }
    if config["mlp_activation"] != "swiglu":  # a DINOv2-giant name brings SiLU with its packed SwiGLU
        args["act_layer"] = {value: key for key, value in ACTIVATIONS.items()}[
            (config["mlp_activation"], config["approximate_gelu"] and config["mlp_activation"] == "gelu")]
    if config.get("mlp_norm"):
        args["scale_mlp_norm"] = True
    if config["position_embedding"] == "none":
        args["pos_embed"] = "none"
    return args


def _image_size(model, config):
    size = config["image_size"]
    if size is not None and None not in size:
        return tuple(size)
    grid = model.get_layer("embedding").grid_size
    return (grid[0] * config["patch_size"], grid[1] * config["patch_size"])


def _distance(fields, config):
    family = sum(fields[key] != config[key] for key in FAMILY_FIELDS)
    return family, sum(fields[key] != config[key] for key in ("patch_size", "hidden_size", "num_layers", "num_heads"))


def _architecture(model, config, architecture, args):
    """The timm name to write: `architecture`, or the first of the table whose build fits the model."""
    def mismatches(name):
        stated = config_architecture({"architecture": name, "model_args": args}, f"architecture {name!r}")
        found = []
        for field in _COMPARED:
            want, got = config[field], stated.get(field)
            if field == "num_classes":
                want = want if config["include_top"] else None
            if field == "prefix_position_embedding" and not (config["class_token"] or config["distillation_token"]):
                continue
            if field == "layer_norm_epsilon" and got is not None and math.isclose(want, got, rel_tol=1e-6):
                continue
            if want != got:
                found.append(f"{field}={want!r} (timm builds {got!r})")
        return found

    if architecture is not None:
        if architecture not in TIMM_ARCHITECTURES:
            raise CheckpointError(f"architecture={architecture!r} is not a timm name keras_vit has a row for. "
                                  f"Supported: {', '.join(supported_patterns())}.")
        if eva_architecture(architecture):
            raise CheckpointError(f"architecture={architecture!r} is built by timm's Eva class; save_timm writes its "
                                  "VisionTransformer.")
        problems = mismatches(architecture)
        if problems:
            raise CheckpointError(f"timm's {architecture!r} cannot hold model {model.name!r} whatever its model_args: "
                                  + "; ".join(problems) + ". Pass another architecture= or None.")
        return architecture
    fitting = [name for name in TIMM_ARCHITECTURES if not eva_architecture(name) and not mismatches(name)]
    if fitting:
        # The name whose own build is closest (its family first, then its sizes): the least model_args rewrite.
        return min(fitting, key=lambda name: _distance(architecture_fields(name, ""), config))
    raise CheckpointError(
        f"No timm architecture of keras_vit.weights.timm_names.TIMM_ARCHITECTURES holds model {model.name!r} "
        f"(distillation_token={config['distillation_token']}, mlp_activation={config['mlp_activation']!r}, "
        f"layer_norm_epsilon={config['layer_norm_epsilon']:g}): timm's names fix these three."
    )
