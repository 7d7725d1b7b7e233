"""A checkpoint's config.json, read and checked: `config_value` refuses a bad value naming the file and the key.

Hugging Face folders, timm Hub folders and the notes `save_npz` writes beside the weights state
what the tensors do not (heads, activations, epsilon); every reader takes its values through
`config_value`.

Example:

>>> config_value({"num_channels": 3}, "num_channels", "config.json", "size")
3
"""

from __future__ import annotations

import math
import os

from keras_vit.weights.files import CheckpointError, read_json_object


_REQUIRED = object()


def _is_integer(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# A config.json value's kinds: (test, what is expected).
CONFIG_KINDS = {
    "size": (lambda v: _is_integer(v) and v >= 1, "an integer >= 1"),
    "count": (lambda v: _is_integer(v) and v >= 0, "an integer >= 0"),
    "positive": (lambda v: _is_number(v) and v > 0, "a number > 0"),
    "flag": (lambda v: isinstance(v, bool), "true or false"),
    "name": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "object": (lambda v: isinstance(v, dict), "a JSON object"),
    # Hugging Face allows [n, n] for a square patch, and [height, width] for an image.
    "square": (lambda v: CONFIG_KINDS["size"][0](v), "an integer >= 1 (or [n, n])"),
    "sides": (lambda v: all(CONFIG_KINDS["size"][0](side) for side in v), "an integer >= 1 or [height, width]"),
}


def config_value(config, key, path, kind, default=_REQUIRED):
    """One value of a checkpoint's config.json, checked: CheckpointError naming the file, the key and what was expected.

    Args:
        config: dict. The parsed config.json.
        key: str. The key to read.
        path: str. The config.json file, for the message.
        kind: str or tuple. A key of `CONFIG_KINDS` ("sides" reads as a (height, width) tuple,
            "square" [n, n] as n), or a tuple of the accepted values.
        default: the value when the key is absent (None: returned as it is). Defaults to none:
            the key must be there.

    Example:

    >>> config_value({"patch_size": [14, 14]}, "patch_size", "config.json", "square")
    14
    >>> config_value({"layerscale_value": "x"}, "layerscale_value", "dinov2/config.json", "positive", 1.0)
    Traceback (most recent call last):
    ...
    keras_vit.weights.files.CheckpointError: Hugging Face config 'dinov2/config.json': layerscale_value is 'x'; expected a number > 0.
    """
    test, expected = (lambda v: v in kind, f"one of {list(kind)}") if isinstance(kind, tuple) else CONFIG_KINDS[kind]
    if key not in config:
        if default is _REQUIRED:
            raise CheckpointError(f"Hugging Face config {path!r}: {key} is missing; expected {expected}.")
        if default is None:
            return None
        value = default
    else:
        value = config[key]
    read = value
    if kind == "square" and isinstance(value, (list, tuple)) and len(value) == 2 and value[0] == value[1]:
        read = value[0]
    elif kind == "sides":
        read = tuple(value) if isinstance(value, (list, tuple)) and len(value) == 2 else (value, value)
    if not test(read):
        raise CheckpointError(f"Hugging Face config {path!r}: {key} is {value!r}; expected {expected}.")
    return read


def read_hf_config(config_path, weights_path):
    """The config.json of a Hugging Face or timm checkpoint as a dict; CheckpointError naming the file otherwise."""
    if not os.path.isfile(config_path):
        raise CheckpointError(
            f"Hugging Face checkpoint {weights_path!r} needs its config.json next to it (for LayerNorm "
            f"epsilon, heads and activation); {config_path!r} does not exist."
        )
    return read_json_object(config_path, "Config")
