"""Hugging Face Depth Anything folders (`DepthAnythingForDepthEstimation`): their config and DPT keys.

A depth folder holds a backbone (transformers' `Dinov2Backbone`, keys under `backbone.`), read
as the Hugging Face DINOv2 checkpoint it is (`keras_vit.weights.huggingface.read_hf_family`), and
a DPT decoder: `neck.reassemble_stage.layers.{i}.{projection,resize}`, `neck.convs.{i}`,
`neck.fusion_stage.layers.{i}.{projection,residual_layer1,residual_layer2}`,
`head.conv{1,2,3}`, mapped here to keras_vit's DPT layers (`reassemble_{i}`, `fusion_{i}`,
`depth_head`). Hugging Face builds a first fusion block's residual_layer1 that it never runs;
its keys are read past.

Example:

>>> sorted(DEPTH_ANYTHING_DEFAULTS)[:3], DEPTH_BACKBONES
(['depth_estimation_type', 'fusion_hidden_size', 'head_hidden_size'], ('dinov2',))
"""

from __future__ import annotations

import dataclasses
import os
import re

from keras_vit.layers.dpt_depth_head import DEPTH_ESTIMATION_TYPES
from keras_vit.layers.dpt_reassemble import resize_stride
from keras_vit.weights import hub
from keras_vit.weights.files import CheckpointError, detect_format, read_weights_folder
from keras_vit.weights.config_json import config_value, read_hf_config
from keras_vit.weights.huggingface import DEPTH_MODEL_TYPE, read_hf_family
from keras_vit.weights.loader import Checkpoint
from keras_vit.weights.mapping import Entry, MappingContext, apply_entries, build_entries, register_layer_mapping
from keras_vit.weights.torch_entries import from_torch_conv, to_torch_conv

# The reassemble stage drops one prefix token (the class token): backbones with registers do not fit.
DEPTH_BACKBONES = ("dinov2",)
# DepthAnythingConfig's defaults: what transformers builds where a config.json leaves a key out.
DEPTH_ANYTHING_DEFAULTS = {
    "patch_size": 14, "reassemble_hidden_size": 384, "reassemble_factors": [4, 2, 1, 0.5],
    "neck_hidden_sizes": [48, 96, 192, 384], "fusion_hidden_size": 64, "head_in_index": -1,
    "head_hidden_size": 32, "depth_estimation_type": "relative", "max_depth": 1,
}
# Dinov2Config's defaults for what hf_architecture requires: a backbone_config that older transformers
# saved as a diff against the class defaults leaves them out (Depth Anything V2 Base: hidden_size).
DINOV2_BACKBONE_DEFAULTS = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12}
# Built by Hugging Face, never run: the first fusion block has no residual map.
UNUSED_KEYS = tuple(f"neck.fusion_stage.layers.0.residual_layer1.convolution{i}.{kind}"
                    for i in (1, 2) for kind in ("weight", "bias"))


@dataclasses.dataclass(frozen=True)
class DepthAnythingFolder:
    """What a Depth Anything folder states.

    Args:
        backbone: `keras_vit.weights.Checkpoint`. The backbone's tensors and architecture.
        indices: list of int. The blocks (0 the first) whose tokens feed the decoder.
        norm: bool. The backbone's final LayerNorm is applied to them (apply_layernorm).
        decoder: dict. The DPT decoder's fields (neck_hidden_sizes, reassemble_factors,
            fusion_hidden_size, head_hidden_size, depth_estimation_type, max_depth).
        tensors: dict. The decoder's tensors, keys as in the file.
        path: str. The folder.
    """

    backbone: object
    indices: list
    norm: bool
    decoder: dict
    tensors: dict
    path: str


def read_depth_anything(path, *, cache_dir=None, token=None):
    """Reads a Hugging Face Depth Anything folder (or Hub id "hf-hub:ORG/NAME"), checking its config.

    Example:

    >>> read_depth_anything("/nonexistent")
    Traceback (most recent call last):
    ...
    keras_vit.weights.files.CheckpointError: Depth Anything weights '/nonexistent': expected a Hugging Face folder (config.json and model.safetensors) or a Hub id 'hf-hub:ORG/NAME'.
    """
    spec = os.fspath(path)
    folder = hub.download(spec, token=token, cache_dir=cache_dir) if hub.is_hub_id(spec) else spec
    if not os.path.isdir(folder) or detect_format(folder) != "hf_directory":
        raise CheckpointError(f"Depth Anything weights {spec!r}: expected a Hugging Face folder (config.json and "
                              "model.safetensors) or a Hub id 'hf-hub:ORG/NAME'.")
    config_path = os.path.join(folder, "config.json")
    config = read_hf_config(config_path, folder)
    model_type = config_value(config, "model_type", config_path, "name")
    if model_type != DEPTH_MODEL_TYPE:
        raise CheckpointError(
            f"Hugging Face config {config_path!r}: model_type is {model_type!r}; a depth model reads "
            f"model_type {DEPTH_MODEL_TYPE!r} (DepthAnythingForDepthEstimation). keras_vit.ViT reads image encoders.")
    if config.get("backbone_config") is None:
        raise CheckpointError(
            f"Hugging Face config {config_path!r}: backbone_config is missing (backbone={config.get('backbone')!r}); "
            f"keras_vit reads Depth Anything folders whose backbone_config states a model_type in {list(DEPTH_BACKBONES)}.")
    backbone = {**DINOV2_BACKBONE_DEFAULTS, **config_value(config, "backbone_config", config_path, "object")}
    where = f"{config_path} (backbone_config)"
    backbone_type = config_value(backbone, "model_type", where, "name")
    if backbone_type not in DEPTH_BACKBONES:
        raise CheckpointError(
            f"Hugging Face config {config_path!r}: backbone_config.model_type is {backbone_type!r}; keras_vit reads "
            f"Depth Anything folders with a backbone of model_type {list(DEPTH_BACKBONES)}.")
    # Dinov2Backbone's default reshapes the maps itself; the decoder then slices channels, not tokens.
    config_value(backbone, "reshape_hidden_states", where, (False,), True)
    raw = read_weights_folder(folder)
    prefix = "backbone."
    read = read_hf_family({key[len(prefix):]: value for key, value in raw.items() if key.startswith(prefix)},
                          backbone, where, folder)
    read[2].update({key: prefix + name for key, name in read[2].items()})
    checkpoint = Checkpoint.of_part(folder, read)
    arch = checkpoint.architecture
    decoder = _decoder_fields(config, config_path, arch)
    indices = _block_indices(backbone, where, arch["num_layers"], len(decoder["neck_hidden_sizes"]))
    return DepthAnythingFolder(
        checkpoint, indices, config_value(backbone, "apply_layernorm", where, "flag", True), decoder,
        {key: value for key, value in raw.items() if not key.startswith(prefix)}, folder,
    )


def _decoder_fields(config, path, arch):
    value = lambda key, kind: config_value(config, key, path, kind, DEPTH_ANYTHING_DEFAULTS[key])  # noqa: E731
    patch = value("patch_size", "square")
    if patch != arch["patch_size"]:
        raise CheckpointError(f"Hugging Face config {path!r}: patch_size is {patch!r} but the backbone's is "
                              f"{arch['patch_size']}; the decoder's patch grid must be the backbone's.")
    width = value("reassemble_hidden_size", "size")
    if width != arch["hidden_size"]:
        raise CheckpointError(f"Hugging Face config {path!r}: reassemble_hidden_size is {width!r} but the backbone's "
                              f"hidden_size is {arch['hidden_size']}; expected them equal.")
    sizes = config.get("neck_hidden_sizes", DEPTH_ANYTHING_DEFAULTS["neck_hidden_sizes"])
    factors = config.get("reassemble_factors", DEPTH_ANYTHING_DEFAULTS["reassemble_factors"])
    for key, values, test in (("neck_hidden_sizes", sizes, lambda v: config_value({"v": v}, "v", path, "size")),
                              ("reassemble_factors", factors, resize_stride)):
        if not isinstance(values, list) or not values:
            raise CheckpointError(f"Hugging Face config {path!r}: {key} is {values!r}; expected a non-empty list.")
        for item in values:
            try:
                test(item)
            except ValueError as error:
                raise CheckpointError(f"Hugging Face config {path!r}: {key} is {values!r}: {error}") from None
    if len(factors) != len(sizes):
        raise CheckpointError(f"Hugging Face config {path!r}: reassemble_factors {factors} and neck_hidden_sizes "
                              f"{sizes} must have one entry per backbone map.")
    # The head reads the last fusion block's map, as every released checkpoint does.
    config_value(config, "head_in_index", path, (-1, len(sizes) - 1), -1)
    fusion = value("fusion_hidden_size", "size")
    if fusion < 2:
        raise CheckpointError(f"Hugging Face config {path!r}: fusion_hidden_size is {fusion}; expected >= 2 (the "
                              "head's first convolution halves it).")
    return {
        "neck_hidden_sizes": list(sizes), "reassemble_factors": list(factors), "fusion_hidden_size": fusion,
        "head_hidden_size": value("head_hidden_size", "size"),
        "depth_estimation_type": value("depth_estimation_type", DEPTH_ESTIMATION_TYPES),
        "max_depth": float(value("max_depth", "positive")),
    }


def _block_indices(backbone, path, depth, maps):
    """The 0-based blocks of Hugging Face's out_indices (stage i is block i's output, stage 0 the embedding)."""
    found = backbone.get("out_indices")
    features = backbone.get("out_features")
    if found is None and isinstance(features, list) and all(re.fullmatch(r"stage\d+", str(f)) for f in features):
        found = [int(f[len("stage"):]) for f in features]  # the stage names out_indices stands for
    expected = f"a list of {maps} increasing stage indices in 1 to {depth} (stage i: the output of block i)"
    if not isinstance(found, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in found):
        raise CheckpointError(f"Hugging Face config {path!r}: out_indices is {found!r}; expected {expected}.")
    if len(found) != maps or sorted(set(found)) != found or not all(1 <= i <= depth for i in found):
        beyond = [i for i in found if not 1 <= i <= depth]
        why = f" ({beyond} beyond the backbone's {depth} blocks)" if beyond else ""
        raise CheckpointError(f"Hugging Face config {path!r}: out_indices is {found!r}{why}; expected {expected}.")
    return [i - 1 for i in found]


def load_decoder(layers, folder):
    """Loads a `DepthAnythingFolder`'s decoder tensors into the DPT layers of a depth model, all or nothing."""
    context = MappingContext("hf", folder.tensors, "bicubic_hf")
    return apply_entries(build_entries(layers, context), folder.tensors, ignored=UNUSED_KEYS)


def _index(layer, stem):
    match = re.fullmatch(stem + r"_(\d+)", layer.name)
    if not match:
        raise CheckpointError(f"{type(layer).__name__} {layer.name!r} is not named {stem}_<i>.")
    return int(match.group(1))


def _conv_entries(conv, key):
    entries = [Entry(key + ".weight", conv.kernel, from_torch_conv, to_torch_conv)]
    if conv.use_bias:
        entries.append(Entry(key + ".bias", conv.bias))
    return entries


@register_layer_mapping("hf", "DPTReassemble")
def _reassemble(layer, context):
    i, stage = _index(layer, "reassemble"), "neck.reassemble_stage.layers."
    entries = _conv_entries(layer.projection, f"{stage}{i}.projection")
    if layer.resize is not None:
        entries += _conv_entries(layer.resize, f"{stage}{i}.resize")  # a transposed conv's IOHW reads the same way
    return entries + _conv_entries(layer.conv, f"neck.convs.{i}")


@register_layer_mapping("hf", "DPTFusion")
def _fusion(layer, context):
    key = f"neck.fusion_stage.layers.{_index(layer, 'fusion')}."
    entries = _conv_entries(layer.projection, key + "projection")
    for unit, name in ((layer.residual_unit_1, "residual_layer1"), (layer.residual_unit_2, "residual_layer2")):
        if unit is not None:
            entries += _conv_entries(unit.conv1, f"{key}{name}.convolution1")
            entries += _conv_entries(unit.conv2, f"{key}{name}.convolution2")
    return entries


@register_layer_mapping("hf", "DPTDepthHead")
def _depth_head(layer, context):
    return [entry for i, conv in enumerate((layer.conv1, layer.conv2, layer.conv3), 1)
            for entry in _conv_entries(conv, f"head.conv{i}")]
