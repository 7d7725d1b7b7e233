"""Which reader reads a checkpoint file: the three layouts (`LAYOUTS`) and `read_checkpoint`, which picks one.

A *format* is the kind of file (`.npz`, safetensors, a Hugging Face folder: see
`keras_vit.weights.files.detect_format`); a *layout* is the key naming inside it, one
`keras_vit.weights.layout.Layout` record per checkpoint ecosystem, kept with its layer mappings
and reader in the ecosystem's module: `keras_vit.weights.vit_jax_layout` (Google `.npz`:
vit_jax, AugReg, big_vision), `keras_vit.weights.huggingface` (one module per family) and
`keras_vit.weights.timm_layout`. Importing this module registers every layout's layer mappings.

Example:

>>> LAYOUTS["timm"].head_keys, LAYOUTS["vit_jax"].interpolation
(('head.weight', 'head.bias'), 'bilinear')
"""

from __future__ import annotations

import os

from keras_vit.weights import huggingface, timm_layout, vit_jax_layout
from keras_vit.weights.config_json import read_hf_config
from keras_vit.weights.files import WEIGHTS_FILE, CheckpointError, read_npz, read_safetensors, read_weights_folder

LAYOUTS = {layout.name: layout for layout in (vit_jax_layout.LAYOUT, huggingface.LAYOUT, timm_layout.LAYOUT)}


def read_checkpoint(path, fmt):
    """Reads a file of format `fmt` ("npz", "safetensors", "hf_directory").

    A safetensors file whose config.json (beside it, or in the folder) names a `model_type` is
    read as that Hugging Face family (`keras_vit.weights.huggingface.HF_FAMILIES`; another
    model_type is refused, naming it); else as timm when it has timm's keys (with the config.json
    of a timm Hub folder, one that names an `architecture`, when there is one), else as a Hugging
    Face ViT.

    Returns (layout, tensors, names, source_prefix_tokens, architecture), `layout` a `Layout`.
    """
    if fmt == "npz":
        return vit_jax_layout.read_arrays(read_npz(path), path)
    if fmt == "hf_directory":
        config_path = os.path.join(path, "config.json")
        raw = read_weights_folder(path)
        if os.path.isfile(os.path.join(path, WEIGHTS_FILE)):
            path = os.path.join(path, WEIGHTS_FILE)
    else:
        config_path = os.path.join(os.path.dirname(os.path.abspath(path)), "config.json")
        raw = read_safetensors(path)
    config = read_hf_config(config_path, path) if os.path.isfile(config_path) else None
    if config is not None and "model_type" in config:
        return huggingface.read_hf_family(raw, config, config_path, path)
    if timm_layout.LAYOUT.marker in raw:
        timm_config = config if config is not None and "architecture" in config else None  # a timm Hub folder's
        return timm_layout.read_arrays(raw, timm_config, config_path, path)
    hf = huggingface.LAYOUT
    tensors, names, source_prefix = hf.normalize(raw)
    if hf.marker in tensors:
        return hf.read(tensors, names, source_prefix, read_hf_config(config_path, path), config_path)
    sample = ", ".join(sorted(raw)[:3])
    raise CheckpointError(
        f"Safetensors file {path!r} holds neither Hugging Face ViT keys (embeddings.patch_embeddings...) "
        f"nor timm ViT keys (patch_embed.proj.weight), and no config.json with a model_type is beside it "
        f"(its first keys: {sample}). Supported: timm ViT state dicts and Hugging Face model_type "
        f"{sorted(huggingface.HF_FAMILIES)}."
    )
