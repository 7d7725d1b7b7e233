"""`HFFamily`: the record of one Hugging Face `model_type`, each kept by the module of its family.

Example:

>>> from keras_vit.weights.huggingface.families import HF_FAMILIES
>>> HF_FAMILIES["dinov2"].prefixes, HF_FAMILIES["clip"].vision_key
(('dinov2.',), 'vision_config')
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from keras_vit.weights.config_json import config_value

# Hugging Face hidden_act -> (mlp_activation, approximate_gelu).
HF_ACTIVATIONS = {
    "gelu": ("gelu", False), "gelu_new": ("gelu", True), "gelu_pytorch_tanh": ("gelu", True),
    "gelu_fast": ("gelu", True), "quick_gelu": ("quick_gelu", False),
}


@dataclasses.dataclass(frozen=True)
class HFFamily:
    """How one Hugging Face `model_type` names a ViT's tensors and states its architecture.

    Every family's keys are renamed to the canonical Hugging Face ViT names (plus the names of
    the parts ViT lacks: `embeddings.distillation_token`, `embeddings.register_tokens`,
    `encoder.layer.{i}.layer_scale{1,2}.lambda1`, `encoder.layer.{i}.mlp.weights_{in,out}`
    (SwiGLU), `pre_layernorm`, `head.*` (attention pooling), `visual_projection`,
    `classifier_dist`), so one set of layer mappings reads them all, and `save_hf` writes them
    back through the same table.

    Args:
        prefixes: tuple of str. Leading parts dropped from every key (e.g. "vision_model."); a
            writer puts the first back on the backbone's keys.
        renames: tuple of (file name, canonical name) or (file name, canonical name, file
            rank). Two-way: "{i}" stands for a block index, a name ending in "." for every key
            it starts, else one key; the rank, when given, is the number of axes the family
            stores the tensor with (CLIP's class embedding (D,), not (1, 1, D)).
        ignored: tuple of regex. Keys of other towers or of training only (CLIP's text
            model, DINOv2's mask token) that are not read.
        source_prefix: int. Position-embedding rows before the patch rows.
        defaults: dict. The family config class's defaults for keys a config.json may omit.
        architecture: callable (tensors, config, path) -> dict of the fields it states.
        refused: tuple of (key, why). Tensors of a head keras_vit does not build.
        vision_key: str or None. Where a two-tower config nests the vision config.
        interpolation: str or None. How its own code resamples the position embedding, when
            not as Hugging Face's ViT ("bicubic_hf"). Defaults to None.
        nested: bool. The vision model always sits under `prefixes[0]` (CLIP's and SigLIP's
            `vision_model.`), not only below a task head. Defaults to False.
        regroup: callable (tensors, names) -> None or None. Reader only: joins, in place, the
            canonical tensors the family keeps apart (DINOv3's gated MLP: gate and up
            projections into one packed SwiGLU kernel). Defaults to None.
        activations: dict or None. The config's hidden_act values the family takes ->
            (mlp_activation, approximate_gelu); None takes those of Hugging Face's ViT
            (`HF_ACTIVATIONS`). Defaults to None.
        ungroup: callable (tensors) -> None or None. Writer only: `regroup` undone, and the
            family's own file layouts restored, in place on the canonical tensors (DINOv3's
            gate and up projections apart, SigLIP 2's patch embedding as a Linear). Defaults
            to None.
    """

    prefixes: tuple
    renames: tuple
    ignored: tuple
    source_prefix: int
    defaults: dict
    architecture: Callable
    refused: tuple = ()
    vision_key: str | None = None
    interpolation: str | None = None
    nested: bool = False
    regroup: Callable | None = None
    activations: dict | None = None
    ungroup: Callable | None = None

    def vision_config(self, config, path):
        """The config a two-tower file's vision tower reads: its `vision_key` object over the top level."""
        nested = config_value(config, self.vision_key, path, "object", None) if self.vision_key else None
        return {**config, **nested} if nested is not None else config
