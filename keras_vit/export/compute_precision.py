"""The precision an export computes in: a float32 copy of a mixed-precision model, or a bfloat16 copy on request.

Every export computes in float32, whatever dtype policy the model was trained or built under
(`float32_model`): a mixed-precision model keeps its variables in float32 already, so nothing is
lost, and its bfloat16/float16 compute would put ops into the graph that TFLite's builtin kernels
and onnxruntime's CPU kernels lack, and outputs that differ between runtimes. A low-precision file
is written only where the user asks for one: TFLite `quantization="float16"` (float16 weights),
`"dynamic"` and `"int8"`, and a SavedModel or `keras-vit predict` in bfloat16 (`bfloat16_model`),
whose matrix products run faster on CPUs with native bfloat16.

Example:

>>> import keras_vit
>>> compute_model(keras_vit.ViT("tiny", num_classes=3)).get_layer("encoderblock_0").compute_dtype
'float32'
"""

from __future__ import annotations

import keras

from keras_vit import choices

# Dtype policies and dtypes that compute below float32; an export copy replaces them.
_LOW_PRECISION = ("mixed_bfloat16", "mixed_float16", "bfloat16", "float16")


def float32_model(model):
    """Returns `model` when every layer computes in float32, else a float32 copy with the same weights.

    The copy is rebuilt from `model.get_config()` with each low-precision dtype policy replaced by
    "float32", then given `model.get_weights()` (float32 variables under mixed precision).

    Args:
        model: keras.Model. A functional model (any keras_vit builder, or one loaded from `.keras`).

    Example:

    >>> import keras_vit
    >>> keras.config.set_dtype_policy("mixed_bfloat16")
    >>> mixed = keras_vit.ViT("tiny", num_classes=3)
    >>> keras.config.set_dtype_policy("float32")
    >>> copy = float32_model(mixed)
    >>> copy is mixed, {layer.compute_dtype for layer in copy.layers}
    (False, {'float32'})
    >>> float32_model(copy) is copy
    True
    """
    if not any(_computes_below_float32(layer) for layer in _all_layers(model)):
        return model
    return _rebuilt(model, "float32", _float32_config)


def _rebuilt(model, policy, config_of):
    """A copy of `model` from `config_of(model.get_config())` under the global `policy`, with its weights."""
    previous = keras.config.dtype_policy()
    # Layers without a dtype of their own take the global policy when they are created.
    keras.config.set_dtype_policy(policy)
    try:
        copy = model.__class__.from_config(config_of(model.get_config()))
    finally:
        keras.config.set_dtype_policy(previous)
    copy.set_weights(model.get_weights())
    return copy


EXPORT_PRECISIONS = choices.EXPORT_PRECISIONS
# In a SavedModel's assets.extra/: the precision it computes in, written when it is not float32.
PRECISION_FILENAME = "precision.txt"
# Layers a bfloat16 copy keeps in float32: the pixel scaling, and the head with its average and activation.
FLOAT32_LAYERS = ("preprocessing", "head")


def check_precision(precision):
    """Raises ValueError unless `precision` is one of `EXPORT_PRECISIONS`."""
    if precision not in EXPORT_PRECISIONS:
        raise ValueError(f"Invalid precision={precision!r}. Expected one of {list(EXPORT_PRECISIONS)}.")


def compute_model(model, precision="float32"):
    """`model` as an artefact computes it: `float32_model` for "float32", `bfloat16_model` for "bfloat16".

    Example:

    >>> import keras_vit
    >>> compute_model(keras_vit.ViT("tiny", num_classes=3), "bfloat16").get_layer("encoderblock_0").compute_dtype
    'bfloat16'
    """
    check_precision(precision)
    return bfloat16_model(model) if precision == "bfloat16" else float32_model(model)


def bfloat16_model(model):
    """A copy of `model` that computes in mixed_bfloat16 with its float32 weights, except `FLOAT32_LAYERS`.

    On a CPU with AMX, oneDNN runs the bfloat16 matrix products several times faster than float32
    ones; XLA does not, so the copy is compiled without it (`jit_compile=False`).

    Args:
        model: keras.Model. A functional model (any keras_vit builder, or one loaded from `.keras`).

    Example:

    >>> import keras_vit
    >>> copy = bfloat16_model(keras_vit.ViT("tiny", num_classes=3))
    >>> copy.get_layer("encoderblock_0").dtype_policy.name, copy.get_layer("head").compute_dtype
    ('mixed_bfloat16', 'float32')
    """
    copy = _rebuilt(model, "mixed_bfloat16", _bfloat16_config)
    copy.compile(jit_compile=False)
    return copy


def _bfloat16_config(config):
    """`config` with each layer's dtype policy made "mixed_bfloat16", `FLOAT32_LAYERS` "float32"; inputs untouched."""
    if isinstance(config, list):
        return [_bfloat16_config(item) for item in config]
    if not isinstance(config, dict):
        return config
    result = {key: _bfloat16_config(value) for key, value in config.items()}
    inner = result.get("config")
    # Inputs keep their dtype, and so do the symbolic tensors a graph passes as call arguments (a layer called
    # with two tensors, such as the feature maps and the image whose size they are resized to).
    if isinstance(inner, dict) and "dtype" in inner and result.get("class_name") not in ("InputLayer", "__keras_tensor__"):
        float32 = str(inner.get("name", "")).startswith(FLOAT32_LAYERS)
        inner["dtype"] = "float32" if float32 else "mixed_bfloat16"
    return result


def token_width(model):
    """The token width (hidden size) of a keras_vit model's first layer that has one; None if none has.

    Example:

    >>> import keras_vit
    >>> token_width(keras_vit.ViT("tiny", num_classes=3)), token_width(keras.Sequential([keras.layers.Dense(2)]))
    (32, None)
    """
    for layer in _all_layers(model):
        width = getattr(layer, "hidden_size", None)
        if isinstance(width, int):
            return width
    return None


def _all_layers(model):
    for layer in getattr(model, "layers", ()):
        yield layer
        yield from _all_layers(layer)


def _computes_below_float32(layer):
    return layer.dtype_policy.name in _LOW_PRECISION or layer.compute_dtype in _LOW_PRECISION


def _float32_config(config):
    """`config` with every low-precision "dtype" entry (policy name, policy dict or dtype) made "float32"."""
    if isinstance(config, list):
        return [_float32_config(item) for item in config]
    if not isinstance(config, dict):
        return config
    result = {}
    for key, value in config.items():
        if key == "dtype" and _names_low_precision(value):
            result[key] = "float32"
        else:
            result[key] = _float32_config(value)
    return result


def _names_low_precision(dtype):
    if isinstance(dtype, dict) and dtype.get("class_name") == "DTypePolicy":
        dtype = dtype.get("config", {}).get("name")
    return isinstance(dtype, str) and dtype in _LOW_PRECISION
