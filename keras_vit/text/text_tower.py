"""Text towers of image-text models (CLIP, SigLIP, SigLIP 2) as Keras models, from a Hugging Face text config.

One table row per family (`TEXT_FAMILIES`): what its text config class defaults to and how its
tower reads a text. CLIP: a causal mask, the end-of-text token's state after the final LayerNorm,
a projection without bias (`text_projection`). SigLIP and SigLIP 2: no causal mask, the last
position's state (padding or not, as the reference), a Dense head (`head`). Both keep padding
tokens out of the attention through `attention_mask`, as transformers does when the tokenizer
gives one. Layer names are the weight schema (`keras_vit.weights.huggingface.text_tower`):
`token_embedding`, `encoderblock_{i}`, `final_norm`, `text_pooling`, `text_projection` or `head`.

Example:

>>> config = text_tower_config({"model_type": "siglip", "text_config": {"hidden_size": 16,
...     "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 50}},
...     "config.json", projection_size=8)
>>> model = build_text_tower(config)
>>> import numpy as np
>>> ids = np.zeros((2, 64), "int32")
>>> tuple(model({"input_ids": ids, "attention_mask": np.ones_like(ids)}).shape)
(2, 8)
"""

from __future__ import annotations

import dataclasses

import keras

from keras_vit.layers.text_embedding import TextEmbedding
from keras_vit.layers.text_pooling import TextPooling
from keras_vit.layers.transformer_block import TransformerBlock
from keras_vit.weights.config_json import config_value
from keras_vit.weights.huggingface.family import HF_ACTIVATIONS


@dataclasses.dataclass(frozen=True)
class TextFamily:
    """One family's text tower: its text config class's defaults and how the tower reads a text.

    Args:
        defaults: dict. The text config class's values for keys a config.json may omit.
        causal: bool. Each token attends only to the tokens up to it.
        projection: str. The projection layer's name: "text_projection" (no bias) or "head".
        scale_shape: tuple. The shape `logit_scale` (and `logit_bias`) are stored with.
    """

    defaults: dict
    causal: bool
    projection: str
    scale_shape: tuple


_SIGLIP = TextFamily({"hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6, "max_position_embeddings": 64,
                      "vocab_size": 32000}, False, "head", (1,))
TEXT_FAMILIES = {
    "clip": TextFamily({"hidden_act": "quick_gelu", "layer_norm_eps": 1e-5, "max_position_embeddings": 77,
                        "vocab_size": 49408, "eos_token_id": 49407}, True, "text_projection", ()),
    "siglip": _SIGLIP,
    "siglip2": _SIGLIP,
}


def text_tower_config(config, path, projection_size):
    """The text tower's fields from a two-tower config.json (`config`); CheckpointError naming a bad key.

    Args:
        config: dict. The two-tower config.json.
        path: str. Its path, for messages.
        projection_size: int. The embedding width (the projection's output, from its weight).
    """
    kind = config["model_type"]
    family = TEXT_FAMILIES[kind]
    text = config_value(config, "text_config", path, "object", None) or {}
    value = lambda key, what: config_value(text, key, path, what, family.defaults.get(key))  # noqa: E731
    act = config_value(text, "hidden_act", path, tuple(sorted(HF_ACTIVATIONS)), family.defaults["hidden_act"])
    fields = {
        "kind": kind,
        "vocab_size": value("vocab_size", "size"),
        "hidden_size": config_value(text, "hidden_size", path, "size"),
        "num_layers": config_value(text, "num_hidden_layers", path, "size"),
        "num_heads": config_value(text, "num_attention_heads", path, "size"),
        "mlp_dim": config_value(text, "intermediate_size", path, "size"),
        "max_length": value("max_position_embeddings", "size"),
        "layer_norm_epsilon": float(value("layer_norm_eps", "positive")),
        "mlp_activation": HF_ACTIVATIONS[act][0],
        "approximate_gelu": HF_ACTIVATIONS[act][1],
        "projection_size": int(projection_size),
        "pooling": "last", "eos_token_id": None,
    }
    if kind == "clip":
        eos = value("eos_token_id", "count")
        # transformers reads the largest id where a config states the id 2 its early conversions wrote.
        fields.update(pooling="argmax" if eos == 2 else "eos", eos_token_id=None if eos == 2 else eos)
    return fields


def build_text_tower(config, name=None):
    """The text tower of `text_tower_config`'s fields: {"input_ids", "attention_mask"} (B, T) -> embedding (B, P)."""
    family = TEXT_FAMILIES[config["kind"]]
    ids = keras.Input((None,), dtype="int32", name="input_ids")
    mask = keras.Input((None,), dtype="int32", name="attention_mask")
    x = TextEmbedding(config["vocab_size"], config["hidden_size"], config["max_length"], name="token_embedding")(ids)
    for i in range(config["num_layers"]):
        block = TransformerBlock(
            config["hidden_size"], config["num_heads"], config["mlp_dim"], approximate_gelu=config["approximate_gelu"],
            layer_norm_epsilon=config["layer_norm_epsilon"], mlp_activation=config["mlp_activation"],
            name=f"encoderblock_{i}")
        x = block(x, padding_mask=mask, causal=family.causal)
    x = keras.layers.LayerNormalization(epsilon=config["layer_norm_epsilon"], name="final_norm")(x)
    x = TextPooling(config["pooling"], config["eos_token_id"], name="text_pooling")([x, ids])
    x = keras.layers.Dense(config["projection_size"], use_bias=family.projection == "head", name=family.projection)(x)
    return keras.Model({"input_ids": ids, "attention_mask": mask}, x, name=name or f"{config['kind']}_text_tower")
