"""`save_hf`: a keras_vit model as a Hugging Face `save_pretrained` folder, for the families it has.

A model that scales its own pixels (`preprocessing=`) also gets the `preprocessor_config.json` that
states that scaling and its input size, so the folder says how to feed it.

The tensors come from the Hugging Face layer mappings the loader reads with, run backwards
(`Entry.from_model`), and their names from the same family tables (`HF_FAMILIES`: prefixes and
two-way renames), so reading and writing share one list of key names. What is decided here is
only which Hugging Face class holds the model (its `model_type` and `architectures`) and the
config.json that states it.

Example:

>>> import os, tempfile, keras_vit
>>> folder = os.path.join(tempfile.mkdtemp(), "deit")
>>> save_hf(keras_vit.ViT("tiny_deit", num_classes=3), folder)
>>> sorted(os.listdir(folder)), keras_vit.ViT(weights=folder).vit_config["distillation_token"]
(['config.json', 'model.safetensors'], True)
>>> save_hf(keras_vit.ViT("tiny_deit", num_classes=3, preprocessing="imagenet"), folder, overwrite=True)
>>> sorted(os.listdir(folder)), keras_vit.weights.Checkpoint(folder).preprocessing.scaling
(['config.json', 'model.safetensors', 'preprocessor_config.json'], 'imagenet')
"""

from __future__ import annotations

import os

import numpy as np

from keras_vit._atomic import atomic_directory, write_json
from keras_vit.configs import SCALINGS
from keras_vit.weights.files import CheckpointError, writable_checkpoint_folder, write_safetensors
from keras_vit.layers.rotary_embedding import rope_settings
from keras_vit.weights.huggingface import HF_FAMILIES, LAYOUT, hf_file_rank, rename_hf_key
from keras_vit.weights.huggingface.dinov3 import DINOV3_QKV_BIASES
from keras_vit.weights.mapping import MappingContext, model_tensors

# What each model_type can hold: field -> the values it allows (_SET: any value but None).
_SET = object()
_PLAIN = dict(distillation_token=(False,), num_register_tokens=(0,), layer_scale_init=(None,), pre_norm=(False,),
              patch_bias=(True,), projection_size=(None,), mlp_activation=("gelu", "quick_gelu"), rope=(None,),
              qkv_bias=("qkv",), naflex=(False,), pooling_heads=(None,), pooling_mlp_dim=(None,), mlp_norm=(False,),
              fc_norm=(False,))
_HOLDS = {
    "vit": dict(_PLAIN, class_token=(True,), prefix_position_embedding=(True,)),
    "deit": dict(_PLAIN, class_token=(True,), prefix_position_embedding=(True,), distillation_token=(True,)),
    "dinov2": dict(_PLAIN, class_token=(True,), layer_scale_init=(_SET,), representation_size=(None,),
                   mlp_activation=("gelu", "quick_gelu", "swiglu")),
    "siglip_vision_model": dict(_PLAIN, class_token=(False,), representation_size=(None,)),
    "clip_vision_model": dict(_PLAIN, class_token=(True,), prefix_position_embedding=(True,), pre_norm=(True,),
                              patch_bias=(False,), projection_size=(_SET,), representation_size=(None,)),
}
_HOLDS["dinov2_with_registers"] = dict(_HOLDS["dinov2"], num_register_tokens=(_SET,))
_HOLDS["siglip2_vision_model"] = dict(_HOLDS["siglip_vision_model"], naflex=(True,))
_HOLDS["dinov3_vit"] = dict(_PLAIN, class_token=(True,), prefix_position_embedding=(False,), layer_scale_init=(_SET,),
                            num_register_tokens=(_SET,), mlp_activation=("gelu", "swiglu"), approximate_gelu=(False,),
                            rope=(_SET,), qkv_bias=("qkv", "qv", "none"), representation_size=(None,))
_HOLDS["clip_vision_model"]["projection_size"] = (_SET, None)
# model_type -> (class with the head, class without it, the head's pooling, the backbone's pooling).
_CLASSES = {
    "vit": ("ViTForImageClassification", "ViTModel", "token", "token"),
    "deit": ("DeiTForImageClassificationWithTeacher", "DeiTModel", "token", "token"),
    "dinov2": ("Dinov2ForImageClassification", "Dinov2Model", "token_and_mean", "token"),
    "dinov2_with_registers": ("Dinov2WithRegistersForImageClassification", "Dinov2WithRegistersModel",
                              "token_and_mean", "token"),
    "siglip_vision_model": (None, "SiglipVisionModel", None, "map"),
    "clip_vision_model": (None, "CLIPVisionModel", None, "token"),
    "siglip2_vision_model": (None, "Siglip2VisionModel", None, "map"),
    "dinov3_vit": (None, "DINOv3ViTModel", None, "token"),
}
# Canonical keys of the task heads, which sit beside the backbone's prefix ("vit.", "deit.").
_TOP_LEVEL = ("classifier.", "classifier_dist.", "visual_projection.")
# Parameters of Hugging Face classes that only training uses (the loader ignores them), written
# as the class initialises them so that its from_pretrained finds every key: file key -> shape.
_TRAINING_ONLY = {
    "dinov2": lambda hidden: {"embeddings.mask_token": (1, hidden)},
    "dinov2_with_registers": lambda hidden: {"embeddings.mask_token": (1, hidden)},
    "dinov3_vit": lambda hidden: {"embeddings.mask_token": (1, 1, hidden)},
}
# DINOv3's query_bias, key_bias, value_bias of keras_vit's qkv_bias: the reader's table, inverted.
_DINOV3_BIASES = {value: key for key, value in DINOV3_QKV_BIASES.items()}


def save_hf(model, folder, *, overwrite=False):
    """Writes a keras_vit model as a Hugging Face `save_pretrained` folder: config.json + model.safetensors.

    The family follows from the model's architecture: a NaFlex model is SigLIP 2
    (`siglip2_vision_model`, `Siglip2VisionModel`: its patch kernel as a Linear, its position grid
    as num_patches), rotary position DINOv3 (`dinov3_vit`, `DINOv3ViTModel`; DINOv3's rotary
    variant alone, its gated MLP split into gate and up projections), a pre-encoder LayerNorm
    (or a projection) is CLIP (`clip_vision_model`, `CLIPVisionModelWithProjection` with the projection), no class
    token or attention pooling SigLIP (`siglip_vision_model`), a distillation token DeiT
    (`DeiTForImageClassificationWithTeacher` with the two heads, else `DeiTModel`), LayerScale
    or registers DINOv2 (`dinov2`, `dinov2_with_registers`, with a head on
    `pooling="token_and_mean"` its `...ForImageClassification`), else ViT
    (`ViTForImageClassification` or `ViTModel`, whose pooler is the pre-logits layer). A model
    whose architecture the family cannot hold is refused, naming each field. The folder is
    written whole into a temporary sibling and renamed: a failure leaves nothing behind.

    Args:
        model: keras.Model. A model built by `keras_vit.ViT`.
        folder: str. The folder to write.
        overwrite: bool. Replace an existing non-empty `folder`. Defaults to False.

    Example:

    >>> import os, tempfile, keras_vit
    >>> folder = os.path.join(tempfile.mkdtemp(), "dinov2")
    >>> model = keras_vit.ViT(patch_size=4, hidden_size=24, num_layers=2, num_heads=2, mlp_dim=48,
    ...                       image_size=16, num_register_tokens=2, layer_scale_init=0.1, include_top=False)
    >>> save_hf(model, folder)
    >>> import json; json.load(open(os.path.join(folder, "config.json")))["model_type"]
    'dinov2_with_registers'
    """
    config, folder = writable_checkpoint_folder(model, folder, overwrite, "save_hf")
    hf_config, family = hf_config_of(model)
    context = MappingContext("hf", {}, LAYOUT.interpolation, source_prefix_tokens=family.source_prefix)
    prefix = family.prefixes[0] if family.nested or config["include_top"] else ""
    tensors = model_tensors(model, context)
    if family.ungroup is not None:
        family.ungroup(tensors)
    tensors, canonical = {}, tensors
    for key, array in canonical.items():
        rank = hf_file_rank(key, family)
        if rank is not None:
            array = array.reshape(array.shape[-rank:])
        name = rename_hf_key(key, family, to_canonical=False)
        tensors[name if key.startswith(_TOP_LEVEL) else prefix + name] = np.asarray(array, "float32")
    for name, shape in _TRAINING_ONLY.get(hf_config["model_type"], lambda hidden: {})(config["hidden_size"]).items():
        tensors[prefix + name] = np.zeros(shape, "float32")
    processor = preprocessor_config_of(model)
    with atomic_directory(folder, overwrite=os.path.isdir(folder)) as tmp:
        write_json(os.path.join(tmp, "config.json"), hf_config)
        write_safetensors(os.path.join(tmp, "model.safetensors"), tensors, {"format": "pt"})
        if processor is not None:
            write_json(os.path.join(tmp, "preprocessor_config.json"), processor)


def preprocessor_config_of(model):
    """The `preprocessor_config.json` of a model that scales its own pixels (`preprocessing=`), else None.

    transformers' ViTImageProcessor then feeds its PyTorch class what the Keras model computes
    inside: pixels rescaled to [0, 1], normalised by the model's mean and std, at its input size.

    Example:

    >>> import keras_vit
    >>> config = preprocessor_config_of(keras_vit.ViT("tiny", num_classes=3, preprocessing="symmetric"))
    >>> config["image_mean"], config["size"]
    ([0.5, 0.5, 0.5], {'height': 32, 'width': 32})
    >>> preprocessor_config_of(keras_vit.ViT("tiny", num_classes=3)) is None
    True
    """
    config = model.vit_config
    if config["preprocessing"] is None:
        return None
    mean, std = SCALINGS[config["preprocessing"]]
    channels = config["channels"]
    height, width = model.input_shape[1:3]
    if height is None or width is None:  # a model of any size: the size of its position grid
        grid = model.get_layer("embedding").grid_size
        height, width = grid[0] * config["patch_size"], grid[1] * config["patch_size"]
    return {
        "image_processor_type": "ViTImageProcessor", "do_resize": True, "size": {"height": int(height), "width": int(width)},
        "resample": 2, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
        "image_mean": [round(mean[i % len(mean)] / 255.0, 8) for i in range(channels)],
        "image_std": [round(std[i % len(std)] / 255.0, 8) for i in range(channels)],
    }


def hf_config_of(model):
    """(config.json dict, `HFFamily`) of the Hugging Face class that holds `model`; refused naming what does not fit."""
    # A config saved before these fields existed does not state them.
    config = {"naflex": False, "pooling_heads": None, "pooling_mlp_dim": None, **model.vit_config}
    model_type = _model_type(config)
    problems = unheld_fields(config, model_type)
    if config["backbone"] is not None or config["stem"] is not None:
        problems.append("a ResNet stem (hybrid)")
    position = "none" if model_type == "dinov3_vit" else "learned"
    if config["position_embedding"] != position:
        problems.append(f"position_embedding={config['position_embedding']!r}")
    rope = config["rope"] and rope_settings(config["rope"])
    if model_type == "dinov3_vit" and rope != rope_settings({"variant": "dinov3", "theta": rope["theta"]}):
        problems.append(f"rope={config['rope']!r} (it computes DINOv3's rotary position, differing only in theta)")
    with_head, without_head, head_pooling, backbone_pooling = _CLASSES[model_type]
    top = config["include_top"]
    if top and with_head is None:
        problems.append("a classification head (include_top=True)")
    expected_pooling = head_pooling if top else backbone_pooling
    if config["pooling"] not in (expected_pooling, None) or (top and config["pooling"] is None):
        problems.append(f"pooling={config['pooling']!r} (it pools with {expected_pooling!r})")
    if top and config["representation_size"] is not None:
        problems.append(f"representation_size={config['representation_size']!r} below a head")
    patch, grid = config["patch_size"], model.get_layer("embedding").grid_size or (1, 1)  # the learned embedding's
    image = grid[0] * patch if grid[0] == grid[1] else [grid[0] * patch, grid[1] * patch]
    if model_type in ("siglip_vision_model", "clip_vision_model") and grid[0] != grid[1]:
        problems.append(f"a {grid[0]}x{grid[1]} patch grid (it takes square images)")
    if model_type == "siglip2_vision_model" and grid[0] != grid[1]:
        problems.append(f"a {grid[0]}x{grid[1]} position grid (it states num_patches, a square grid)")
    mlp_ratio = _dinov2_mlp_ratio(config) if model_type.startswith("dinov2") else None
    if model_type.startswith("dinov2") and mlp_ratio is None:
        problems.append(f"mlp_dim={config['mlp_dim']!r} (it derives the MLP width from an integer mlp_ratio "
                        f"times hidden_size={config['hidden_size']})")
    if problems:
        raise CheckpointError(
            f"Model {model.name!r} has what Hugging Face {model_type!r} cannot hold: " + "; ".join(problems)
            + f". save_hf writes model_type {sorted(_CLASSES)}; save_npz writes the paper's ViT and SigLIP."
        )
    activation = config["mlp_activation"]
    hf = {
        "model_type": model_type,
        "architectures": [with_head if top else without_head],
        "hidden_size": config["hidden_size"], "num_hidden_layers": config["num_layers"],
        "num_attention_heads": config["num_heads"], "num_channels": config["channels"],
        "image_size": image, "patch_size": patch, "layer_norm_eps": config["layer_norm_epsilon"],
        "hidden_act": ("quick_gelu" if activation == "quick_gelu"
                       else "gelu_pytorch_tanh" if config["approximate_gelu"] else "gelu"),
    }
    if mlp_ratio is not None:
        hf.update(mlp_ratio=mlp_ratio, use_swiglu_ffn=activation == "swiglu", qkv_bias=True,
                  layerscale_value=config["layer_scale_init"])
        if config["num_register_tokens"]:
            hf["num_register_tokens"] = config["num_register_tokens"]
    else:
        hf["intermediate_size"] = config["mlp_dim"]
    if model_type in ("vit", "deit"):
        hf["qkv_bias"] = True
        if config["representation_size"] is not None:  # the pooler: Dense + tanh on the class token
            hf.update(pooler_output_size=config["representation_size"], pooler_act="tanh")
    if model_type in ("siglip_vision_model", "siglip2_vision_model"):
        hf["vision_use_head"] = config["pooling"] == "map"
    if model_type == "siglip2_vision_model":  # patch sequences of any grid: no image size
        hf["num_patches"] = grid[0] * grid[1]
        del hf["image_size"]
    if model_type == "dinov3_vit":
        size, family_defaults = model.input_shape[1:3], HF_FAMILIES[model_type].defaults
        query, key, value = _DINOV3_BIASES[config["qkv_bias"]]
        # Rotary position needs no image size; a model of any size states the family's default.
        square = None not in size and size[0] == size[1]
        hf.update(image_size=size[0] if square else family_defaults["image_size"], rope_theta=rope["theta"],
                  query_bias=query, key_bias=key, value_bias=value, proj_bias=True, mlp_bias=True,
                  layerscale_value=config["layer_scale_init"], use_gated_mlp=activation == "swiglu",
                  hidden_act="silu" if activation == "swiglu" else "gelu",
                  num_register_tokens=config["num_register_tokens"])
    if model_type == "clip_vision_model" and config["projection_size"] is not None and config["pooling"] is not None:
        hf.update(projection_dim=config["projection_size"], architectures=["CLIPVisionModelWithProjection"])
    if top:
        hf["id2label"] = {str(i): f"LABEL_{i}" for i in range(config["num_classes"])}
        hf["label2id"] = {f"LABEL_{i}": i for i in range(config["num_classes"])}
    return hf, HF_FAMILIES[model_type]


def unheld_fields(config, model_type):
    """"field=value" of each architecture field of a model's `vit_config` that Hugging Face `model_type` cannot hold.

    Example:

    >>> import keras_vit
    >>> unheld_fields(keras_vit.ViT("tiny_dinov2", include_top=False).vit_config, "vit")
    ['num_register_tokens=3', 'layer_scale_init=0.1']
    """
    config = {"naflex": False, "pooling_heads": None, "pooling_mlp_dim": None, **config}
    return [f"{field}={config[field]!r}" for field, allowed in _HOLDS[model_type].items()
            if not any(config[field] is not None if value is _SET else config[field] == value for value in allowed)]


def _model_type(config):
    if config["naflex"]:
        return "siglip2_vision_model"
    if config["rope"] is not None:
        return "dinov3_vit"
    if config["pre_norm"] or config["projection_size"] is not None:
        return "clip_vision_model"
    if not config["class_token"] or config["pooling"] == "map":
        return "siglip_vision_model"
    if config["distillation_token"]:
        return "deit"
    if config["num_register_tokens"]:
        return "dinov2_with_registers"
    if config["layer_scale_init"] is not None or config["mlp_activation"] == "swiglu":
        return "dinov2"
    return "vit"


def _dinov2_mlp_ratio(config):
    """The integer mlp_ratio from which Hugging Face's DINOv2 derives `mlp_dim`, or None."""
    hidden, mlp = config["hidden_size"], config["mlp_dim"]
    for ratio in range(1, 65):
        width = hidden * ratio
        if config["mlp_activation"] == "swiglu":
            width = (int(width * 2 / 3) + 7) // 8 * 8  # SwiGLU keeps two thirds, rounded up to 8
        if width == mlp:
            return ratio
    return None
