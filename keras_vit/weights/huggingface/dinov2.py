"""Hugging Face DINOv2 (`Dinov2Model`, with registers `Dinov2WithRegistersModel`): LayerScale, SwiGLU, registers."""

import dataclasses

from keras_vit.weights.config_json import config_value
from keras_vit.weights.huggingface.family import HFFamily
from keras_vit.weights.layout import require


def _architecture(tensors, config, path):
    swiglu = config_value(config, "use_swiglu_ffn", path, "flag", False)
    fc1 = require(tensors, f"encoder.layer.0.{'mlp.weights_in' if swiglu else 'intermediate.dense'}.weight", path)
    scale = config_value(config, "layerscale_value", path, "positive", 1.0)
    fields = {
        # Dinov2ForImageClassification's head reads the class token and the mean patch token.
        "pooling": "token_and_mean" if "classifier.weight" in tensors else "token",
        "mlp_dim": int(fc1.shape[0]) // (2 if swiglu else 1),
        "layer_scale_init": float(scale) if "encoder.layer.0.layer_scale1.lambda1" in tensors else None,
        "num_register_tokens": config_value(config, "num_register_tokens", path, "count", 0),
    }
    if swiglu:
        fields["mlp_activation"] = "swiglu"
    return fields


_RENAMES = (
    ("encoder.layer.{i}.norm1.", "encoder.layer.{i}.layernorm_before."),
    ("encoder.layer.{i}.norm2.", "encoder.layer.{i}.layernorm_after."),
    ("encoder.layer.{i}.mlp.fc1.", "encoder.layer.{i}.intermediate.dense."),
    ("encoder.layer.{i}.mlp.fc2.", "encoder.layer.{i}.output.dense."),
)


_DINOV2 = HFFamily(
    ("dinov2.",), _RENAMES, (r"^embeddings\.mask_token$",), 1,
    {"hidden_act": "gelu", "layer_norm_eps": 1e-6, "image_size": 224, "patch_size": 14}, _architecture,
)
FAMILIES = {
    "dinov2": _DINOV2,
    # Its interpolate_pos_encoding antialiases (torch bicubic, antialias=True): timm's resampling.
    "dinov2_with_registers": dataclasses.replace(_DINOV2, prefixes=("dinov2_with_registers.",), interpolation="bicubic"),
}
