"""The whole masked autoencoder as a Hugging Face ViT-MAE folder (`ViTMAEForPreTraining`): written, and read back.

`save_mae_hf` writes what `transformers.ViTMAEForPreTraining.from_pretrained` reads: config.json,
model.safetensors (the encoder under "vit." with ViT's names, from the same layer mappings the
loader reads with, and the decoder under "decoder.") and, for an encoder that scales its own
pixels, preprocessor_config.json. Such a folder is a checkpoint: `keras_vit.ViT(weights=folder)`,
`keras-vit train --weights`, `embed`, `fewshot` and `knn` read its encoder (the family record
`keras_vit.weights.huggingface.vit_mae`); `load_mae` reads encoder and decoder, to pre-train on.

Example:

>>> import os, tempfile
>>> from keras_vit.pretraining.mae import build_mae
>>> folder = os.path.join(tempfile.mkdtemp(), "mae")
>>> save_mae_hf(build_mae(image_size=16, patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
...                       decoder="test"), folder)
>>> sorted(os.listdir(folder))
['config.json', 'model.safetensors', 'preprocessor_config.json']
>>> load_mae(folder)[0].decoder_size.hidden_size
16
"""

from __future__ import annotations

import dataclasses
import os

import keras
import numpy as np

from keras_vit._atomic import atomic_directory, write_json
from keras_vit.pretraining.mae import DecoderSize, MaskedAutoencoder
from keras_vit.weights.files import CheckpointError, read_json_object, read_weights_folder, write_safetensors
from keras_vit.weights.hf_writer import preprocessor_config_of, unheld_fields
from keras_vit.weights.huggingface import LAYOUT
from keras_vit.weights.huggingface.layout import hf_block_entries
from keras_vit.weights.mapping import Entry, MappingContext, apply_entries, model_tensors
from keras_vit.weights.torch_entries import dense_entries, norm_entries

MODEL_TYPE = "vit_mae"
ENCODER_PREFIX = "vit."


def decoder_entries(model):
    """The `Entry`s of the decoder's weights under Hugging Face's `ViTMAEDecoder` names ("decoder.")."""
    entries = dense_entries(model.decoder_embed, "decoder.decoder_embed")
    entries += [Entry("decoder.mask_token", model.mask_tokens.mask_token),
                Entry("decoder.decoder_pos_embed", model.mask_tokens.position_embedding)]
    for i, block in enumerate(model.decoder_blocks):
        entries += hf_block_entries(block, f"decoder.decoder_layers.{i}.")
    return entries + norm_entries(model.decoder_norm, "decoder.decoder_norm") + dense_entries(
        model.decoder_pred, "decoder.decoder_pred")


def check_hf_holds(encoder, name="weights"):
    """Refuses (ValueError) an encoder a ViT-MAE folder cannot hold, before any training; names each field."""
    config = encoder.vit_config
    problems = [p for p in unheld_fields(config, "vit") if not p.startswith("representation_size=")]
    if config["position_embedding"] != "learned":
        problems.append(f"position_embedding={config['position_embedding']!r}")
    if problems:
        raise ValueError(f"Invalid {name}: its encoder has what a Hugging Face ViT-MAE folder (the output of "
                         f"pre-training) cannot hold: {'; '.join(problems)}. Pre-train a plain ViT (class token, a "
                         "position table, GELU MLP, no LayerScale or registers).")


def mae_hf_config(model):
    """The config.json of `ViTMAEForPreTraining` holding `model`."""
    config = model.encoder.vit_config
    size = model.decoder_size
    return {
        "model_type": MODEL_TYPE, "architectures": ["ViTMAEForPreTraining"],
        "hidden_size": config["hidden_size"], "num_hidden_layers": config["num_layers"],
        "num_attention_heads": config["num_heads"], "intermediate_size": config["mlp_dim"],
        "hidden_act": "gelu_pytorch_tanh" if config["approximate_gelu"] else "gelu",
        "layer_norm_eps": config["layer_norm_epsilon"], "image_size": model.grid_size[0] * model.patch_size,
        "patch_size": model.patch_size, "num_channels": model.channels, "qkv_bias": True,
        "decoder_hidden_size": size.hidden_size, "decoder_num_hidden_layers": size.num_layers,
        "decoder_num_attention_heads": size.num_heads, "decoder_intermediate_size": size.mlp_dim,
        "mask_ratio": model.mask_ratio, "norm_pix_loss": model.norm_pix_loss,
    }


def save_mae_hf(model, folder, *, overwrite=False):
    """Writes a `MaskedAutoencoder` as a Hugging Face `ViTMAEForPreTraining` folder, whole or not at all.

    Args:
        model: `MaskedAutoencoder`. Its encoder a plain ViT (`check_hf_holds`) on a square grid.
        folder: str. The folder to write.
        overwrite: bool. Replace an existing non-empty `folder`. Defaults to False.
    """
    check_hf_holds(model.encoder, "model")
    if model.grid_size[0] != model.grid_size[1]:
        raise ValueError(f"Invalid model: a {model.grid_size[0]}x{model.grid_size[1]} patch grid; a ViT-MAE folder "
                         "states one square image size.")
    if os.path.isfile(folder) or (os.path.isdir(folder) and os.listdir(folder) and not overwrite):
        raise FileExistsError(f"{folder!r} exists: pass overwrite=True (--overwrite) to replace it.")
    context = MappingContext("hf", {}, LAYOUT.interpolation, source_prefix_tokens=1)
    tensors = {ENCODER_PREFIX + key: np.asarray(array, "float32")
               for key, array in model_tensors(model.encoder, context).items()}
    for entry in decoder_entries(model):
        tensors[entry.key] = np.asarray(entry.from_model(keras.ops.convert_to_numpy(entry.variable)), "float32")
    processor = preprocessor_config_of(model.encoder)
    with atomic_directory(folder, overwrite=os.path.isdir(folder)) as tmp:
        write_json(os.path.join(tmp, "config.json"), mae_hf_config(model))
        write_safetensors(os.path.join(tmp, "model.safetensors"), tensors, {"format": "pt"})
        if processor is not None:
            write_json(os.path.join(tmp, "preprocessor_config.json"), processor)


def is_mae_folder(path) -> bool:
    """Whether `path` is a Hugging Face folder whose config.json says model_type "vit_mae"."""
    config = os.path.join(os.fspath(path), "config.json")
    return os.path.isfile(config) and read_json_object(config, "Hugging Face config").get("model_type") == MODEL_TYPE


def load_mae(spec, *, scaling=None, image_size=None, patch_size=None, mask_ratio=None, norm_pix_loss=None,
             decoder=None, seed=None, log=None):
    """A `MaskedAutoencoder` to pre-train from `spec`: a ViT-MAE folder (its decoder too), or any backbone.

    A Hugging Face ViT-MAE folder gives encoder and decoder, its mask ratio and `norm_pix_loss`; a
    `.keras` `MaskedAutoencoder` itself; any other checkpoint `keras_vit.transfer.load_pretrained`
    reads (a `.keras` backbone, timm, Hugging Face ViT or DeiT, a `.npz`) gives the encoder, with a
    new decoder (`decoder`, else `keras_vit.pretraining.mae.decoder_for` its width).

    Args:
        spec: str. The checkpoint.
        scaling, image_size, patch_size: as for `keras_vit.transfer.load_pretrained` (the
            checkpoint's own by default; the patch kernel resized by FlexiViT's pseudo-inverse).
        mask_ratio: float or None. None: the folder's, else 0.75. Defaults to None.
        norm_pix_loss: bool or None. None: the folder's, else True. Defaults to None.
        decoder: str, dict or None. A new decoder's size; refused for a folder that has one. Defaults to None.
        seed: int or None. Seed of the masks. Defaults to None.
        log: callable or None. Where the line on what was loaded goes. Defaults to None.

    Returns:
        (`MaskedAutoencoder`, `keras_vit.transfer.Pretrained` or None for a `.keras` MAE).
    """
    from keras_vit.pretraining.mae import MASK_RATIO, decoder_for
    from keras_vit.transfer.pretrained import load_pretrained

    spec = os.fspath(spec)
    if spec.endswith(".keras") and os.path.isfile(spec):
        loaded = keras.saving.load_model(spec, compile=False)
        if isinstance(loaded, MaskedAutoencoder):
            return loaded, None
    mae_folder = os.path.isdir(spec) and is_mae_folder(spec)
    config = read_json_object(os.path.join(spec, "config.json"), "Hugging Face config") if mae_folder else {}
    tensors = _hub_names(read_weights_folder(spec)) if mae_folder else {}
    with_decoder = any(key.startswith("decoder.") for key in tensors)
    if with_decoder and decoder is not None:
        raise ValueError(f"Contradicting decoder={decoder!r} and weights={spec!r}: the folder has its own decoder. "
                         "Leave decoder out.")
    encoder, info = load_pretrained(spec, image_size=image_size, scaling=scaling, patch_size=patch_size)
    encoder = _vit_of(encoder, spec, info)
    if mask_ratio is None:
        mask_ratio = config.get("mask_ratio", MASK_RATIO)
    if norm_pix_loss is None:
        norm_pix_loss = bool(config.get("norm_pix_loss", True))
    hidden = encoder.vit_config["hidden_size"]
    if with_decoder:
        decoder = dataclasses.asdict(DecoderSize(
            config.get("decoder_hidden_size", 512), config.get("decoder_num_hidden_layers", 8),
            config.get("decoder_num_attention_heads", 16), config.get("decoder_intermediate_size", 2048)))
    model = MaskedAutoencoder(encoder, decoder=decoder or decoder_for(hidden), mask_ratio=mask_ratio,
                              norm_pix_loss=norm_pix_loss, seed=seed)
    if with_decoder:
        entries = decoder_entries(model)
        wanted = {entry.key for entry in entries}
        try:
            apply_entries(entries, {k: v for k, v in tensors.items() if k in wanted}, log=log or print)
        except CheckpointError as error:
            raise CheckpointError(f"The decoder of {spec!r} does not fit its config.json: {error}") from None
    return model, info


# transformers 5's save_pretrained writes the decoder's blocks as "decoder.decoder_encoder.layer.{i}." (its
# ViT renaming of "encoder.layer." to "layers." run backwards over "decoder_layers."); the Hub's
# facebook/vit-mae-* folders and from_pretrained use "decoder.decoder_layers.{i}.", which this module writes.
_SAVED_BLOCKS, _HUB_BLOCKS = "decoder.decoder_encoder.layer.", "decoder.decoder_layers."


def _hub_names(tensors):
    return {(_HUB_BLOCKS + key[len(_SAVED_BLOCKS):] if key.startswith(_SAVED_BLOCKS) else key): value
            for key, value in tensors.items()}


def _vit_of(model, spec, info):
    """The `VisionTransformer` of what `load_pretrained` returned: a `.keras` classifier's features are a plain
    `keras.Model` up to its head, rebuilt here as the encoder (its own layers' weights)."""
    if getattr(model, "vit_config", None) is not None:
        return model
    from keras_vit.transfer import pretrained

    source = keras.saving.load_model(spec, compile=False)
    # load_pretrained's own rebuild (its private helper): the backbone with no head, at the size and scaling it chose.
    return pretrained._rebuild(source, source.vit_config, None, info.image_size, info.scaling, {})
