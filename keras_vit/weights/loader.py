"""`load_weights` (any supported checkpoint into a keras_vit model) and `save_npz` (back out)."""

from __future__ import annotations

import functools
import io
import logging
import os

import numpy as np

from keras_vit._validation import check_choice
from keras_vit.layers.grid_resampling import INTERPOLATIONS
from keras_vit._atomic import write_bytes
from keras_vit.configs import stated_pooling_fields
from keras_vit.weights import hub
from keras_vit.weights.files import CheckpointError, detect_format
from keras_vit.weights.formats import LAYOUTS, read_checkpoint  # importing it registers the layer mappings
from keras_vit.weights.mapping import MappingContext, apply_entries, build_entries, headless_hint, model_tensors
from keras_vit.weights.preprocessing import preprocessing_from_scaling, read_preprocessing
from keras_vit.weights.registry import CHECKPOINTS, fetch_checkpoint
from keras_vit.weights.vit_jax_layout import NPZ_NOTES

logger = logging.getLogger("keras_vit.weights")



class Checkpoint:
    """A checkpoint read into memory: its format, layout, tensors and the architecture they state.

    Args:
        path: str. A `.npz` or safetensors file (format from content), a Hugging Face
            `save_pretrained` folder or a timm Hub folder, a Hub id "hf-hub:ORG/NAME[@REVISION]"
            (see `keras_vit.weights.hub`), or a name of `keras_vit.weights.CHECKPOINTS`.
        cache_dir: str or None. Cache root for Hub ids and named checkpoints (huggingface_hub's
            for the Hub, keras' for URLs). Defaults to None.
        token: str or None. Hugging Face token for a gated or private repository; None uses
            `HF_TOKEN`. Defaults to None.

    Attributes:
        format: the file kind, "npz", "safetensors" or "hf_directory". layout: the key naming,
        "vit_jax", "hf" or "timm" (`record` is its `keras_vit.weights.layout.Layout`).
        tensors: canonical key -> array. names: canonical key -> key as in the file.
        architecture: dict with every field of `keras_vit.configs.ARCHITECTURE_FIELDS`, None
        where the layout does not store it (timm's fused qkv hides num_heads unless a timm Hub
        folder's config.json states it; a file without a position embedding cannot say "none"
        from "sincos2d"). path: the local file or folder. source: what it is, for messages and
        training headers ("hf-hub:ORG/NAME (revision <commit>)", a preset's name and origin, or
        the path). preprocessing: the `keras_vit.weights.Preprocessing` its files (or its
        preset) state, or None.

    Example:

    >>> import tempfile, keras_vit
    >>> path = os.path.join(tempfile.mkdtemp(), "tiny.npz")
    >>> save_npz(keras_vit.ViT("tiny", num_classes=10), path)
    >>> checkpoint = Checkpoint(path)
    >>> checkpoint.format, checkpoint.layout, len(checkpoint.tensors), checkpoint.architecture["grid_size"]
    ('npz', 'vit_jax', 40, (8, 8))
    >>> {k: checkpoint.architecture[k] for k in ("patch_size", "hidden_size", "num_classes")}
    {'patch_size': 4, 'hidden_size': 32, 'num_classes': 10}
    >>> checkpoint.source == path, checkpoint.preprocessing
    (True, None)
    """

    def __init__(self, path, cache_dir=None, *, token=None):
        spec = os.fspath(path)
        self.name = None
        if hub.is_hub_id(spec):
            path = hub.download(spec, token=token, cache_dir=cache_dir)
            self.source = hub.describe(spec, path)
        elif not os.path.exists(spec) and spec in CHECKPOINTS:
            self.name = spec
            path = fetch_checkpoint(spec, cache_dir=cache_dir, token=token)
            url = CHECKPOINTS[spec].url
            self.source = f"{spec} = " + (hub.describe(url, path) if hub.is_hub_id(url) else path)
        else:
            path = self.source = spec
        fmt = detect_format(path)
        self._set(path, fmt, read_checkpoint(path, fmt))

    def _set(self, path, fmt, read):
        self.path = path
        self.format = fmt
        self.record, self.tensors, self.names, self.source_prefix_tokens, self.architecture = read
        self.layout = self.record.name

    @classmethod
    def of_part(cls, path, read, preprocessing=None):
        """The checkpoint of one part of a larger model's folder (a depth model's backbone, an open_clip image tower).

        Args:
            path: str. The folder (or file), also the checkpoint's `source`.
            read: tuple. What `keras_vit.weights.huggingface.read_hf_family` returns for the part.
            preprocessing: `keras_vit.weights.Preprocessing` or None. What the part's own files
                state where they are not a Hugging Face or timm one's (an open_clip folder's
                preprocess_cfg); None reads them as `preprocessing` does. Defaults to None.
        """
        checkpoint = cls.__new__(cls)
        checkpoint.name = None
        checkpoint.source = path
        checkpoint._set(path, detect_format(path), read)
        if preprocessing is not None:
            checkpoint.__dict__["preprocessing"] = preprocessing  # the cached_property's value
        return checkpoint

    @functools.cached_property
    def preprocessing(self):
        """The pixel scaling, input size and resize its own files state; a named preset's fields where none do."""
        found = read_preprocessing(self.path, self.layout)
        spec = CHECKPOINTS.get(self.name)
        if found is None and spec is not None and spec.preprocessing is not None:
            found = preprocessing_from_scaling(
                spec.preprocessing, spec.resolution,
                f"keras_vit.weights.CHECKPOINTS[{self.name!r}] (preprocessing, resolution)",
                self.architecture["channels"] or 3,
            )
        return found

    def __repr__(self):
        return f"Checkpoint({self.source!r}, format={self.format!r}, layout={self.layout!r}, {len(self.tensors)} tensors)"


def load_weights(model, weights, *, skip_mismatch=False, interpolation=None, cache_dir=None, token=None):
    """Loads a checkpoint into an existing keras_vit model, checking every key and shape.

    The head is loaded only when its size matches the model's; otherwise everything else is
    loaded, the model's (zero-initialised) head is kept and one log line says so. The
    checkpoint's pre-logits layer is loaded only into a model built with
    `representation_size`; a model without a head (`include_top=False`) gets the backbone. The
    learned position embedding is resampled when the grids differ. Nothing is assigned unless
    everything fits (or `skip_mismatch=True`).

    Args:
        model: keras.Model. A keras_vit model (layer names are the weight schema).
        weights: str or Checkpoint. File path (`.npz`, safetensors, Hugging Face or timm Hub
            folder; format read from the content), a Hub id "hf-hub:ORG/NAME[@REVISION]", a
            name of `keras_vit.weights.CHECKPOINTS`, or a `Checkpoint`.
        skip_mismatch: bool. Load what fits and log the rest instead of raising. Defaults to
            False.
        interpolation: str or None. Position-embedding resampling: "bilinear", "bicubic" or
            "bicubic_hf"; None uses the checkpoint ecosystem's own (npz bilinear, timm bicubic,
            HF bicubic_hf). Defaults to None.
        cache_dir: str or None. Cache root for Hub ids and named checkpoints. Defaults to None.
        token: str or None. Hugging Face token for a gated Hub repository; None uses `HF_TOKEN`.
            Defaults to None.

    Returns:
        The list of checkpoint keys that were loaded.

    Example:

    >>> import os, tempfile, keras_vit
    >>> model = keras_vit.ViT("tiny", num_classes=10)
    >>> path = os.path.join(tempfile.mkdtemp(), "tiny.npz")
    >>> save_npz(model, path)
    >>> len(load_weights(keras_vit.ViT("tiny", num_classes=10, approximate_gelu=True), path))
    40
    """
    checkpoint = weights if isinstance(weights, Checkpoint) else Checkpoint(weights, cache_dir, token=token)
    record = checkpoint.record
    if interpolation is None:
        interpolation = record.interpolation
    check_choice("interpolation", interpolation, INTERPOLATIONS)
    arch = checkpoint.architecture
    context = MappingContext(
        record.name, checkpoint.tensors, interpolation, arch.get("grid_size"),
        source_prefix_tokens=checkpoint.source_prefix_tokens, log=logger.info,
    )
    entries = build_entries(model, context)
    layer_names = {layer.name for layer in model.layers}
    head_keys, pre_logits_keys = record.head_keys + record.head_dist_keys, record.pre_logits_keys
    ignored = []
    if "head" not in layer_names:
        ignored += head_keys
    elif arch["num_classes"] is not None and model.get_layer("head").units != arch["num_classes"]:
        ignored += head_keys
        entries = [entry for entry in entries if entry.key not in head_keys]
        logger.warning(
            f"The checkpoint's head has {arch['num_classes']} classes and the model's "
            f"{model.get_layer('head').units}: loaded everything but the head, which keeps its "
            "initial (zero) weights."
        )
    if "pre_logits" not in layer_names:
        ignored += pre_logits_keys
        if arch["representation_size"] is not None and "head" in layer_names:
            logger.info(
                "Leaving out the checkpoint's pre_logits layer (the model was built without it; "
                f"representation_size={arch['representation_size']} keeps it)."
            )
    if arch.get("fc_norm") and "fc_norm" not in layer_names:
        # Built without pooling (pooling=None): the tokens come before timm's fc_norm, which goes unused.
        ignored += [key for key in checkpoint.tensors if key.startswith("fc_norm.")]
    _check_activation_and_epsilon(model, arch)
    return apply_entries(
        entries, checkpoint.tensors, names=checkpoint.names, ignored=ignored,
        skip_mismatch=skip_mismatch, log=logger.warning, hint=headless_hint(head_keys, checkpoint.tensors, model),
    )


def _check_activation_and_epsilon(model, arch):
    blocks = [layer for layer in model.layers if type(layer).__name__ == "TransformerBlock"]
    if not blocks:
        return
    block = blocks[0]
    if block.approximate_gelu != arch["approximate_gelu"]:
        logger.warning(
            f"The checkpoint was trained with {'tanh-approximate' if arch['approximate_gelu'] else 'exact'} "
            f"GELU but the model uses approximate_gelu={block.approximate_gelu}: outputs will differ slightly."
        )
    if not np.isclose(block.layer_norm_epsilon, arch["layer_norm_epsilon"], rtol=1e-3, atol=0):
        logger.warning(
            f"The checkpoint's LayerNorm epsilon is {arch['layer_norm_epsilon']:g} but the model's is "
            f"{block.layer_norm_epsilon:g}."
        )


def save_npz(model, path):
    """Writes a keras_vit model's weights as an original ViT `.npz` (pre-Linen names).

    The file is written to a temporary name and renamed, so a failure leaves nothing behind.
    Beside the weights it records the model's GELU form and LayerNorm epsilon (`keras_vit/...`
    arrays, which `ViT(weights=path)` reads back; other vit_jax readers skip them as extra keys).
    Layers with a registered "vit_jax" mapping (see `register_layer_mapping`) are included; a
    model with weights the layout has no key for (LayerScale, register or distillation tokens,
    a LayerNorm before the encoder, CLIP's projection) is refused: `save_hf` writes those. So is
    a model with rotary position (DINOv3), which the layout cannot say.

    Args:
        model: keras.Model. A keras_vit model.
        path: str. Destination file.

    Example:

    >>> import os, tempfile, keras_vit
    >>> path = os.path.join(tempfile.mkdtemp(), "tiny.npz")
    >>> save_npz(keras_vit.ViT("tiny", num_classes=10), path)
    >>> os.path.getsize(path) > 0
    True
    """
    config = getattr(model, "vit_config", None) or {}
    if config.get("rope") is not None:
        raise CheckpointError(
            f"Model {model.name!r} has rotary position (rope={model.vit_config['rope']!r}), which the vit_jax layout "
            "does not record: its file would load as a model without it. Save it with model.save (.keras)."
        )
    pool_fields = stated_pooling_fields(config)
    if pool_fields:
        raise CheckpointError(
            f"Model {model.name!r} has an attention pool of its own width ({', '.join(pool_fields)}), which the "
            "vit_jax layout does not record (big_vision's MAPHead has the blocks' heads and MLP width). Save it with "
            "model.save (.keras)."
        )
    # A vit_jax file stores the position rows the model has: none for a model without class token.
    encoder = next((layer for layer in model.layers if layer.name == "embedding"), None)
    prefix = encoder.num_position_prefix_tokens if encoder is not None else 1
    context = MappingContext("vit_jax", {}, LAYOUTS["vit_jax"].interpolation, source_prefix_tokens=prefix)
    arrays = model_tensors(model, context, hint=(
        " keras_vit.weights.save_hf writes the families Hugging Face has (DeiT, DINOv2, SigLIP, CLIP)."))
    blocks = [layer for layer in model.layers if type(layer).__name__ == "TransformerBlock"]
    if blocks:
        arrays[NPZ_NOTES + "approximate_gelu"] = np.array(bool(blocks[0].approximate_gelu))
        arrays[NPZ_NOTES + "layer_norm_epsilon"] = np.array(float(blocks[0].layer_norm_epsilon))
    if type(encoder).__name__ == "NaFlexPatchEncoder":  # the same weights also take images: say which
        arrays[NPZ_NOTES + "naflex"] = np.array(True)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    write_bytes(os.fspath(path), [buffer.getbuffer()])

