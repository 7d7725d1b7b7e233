"""Explicit key mappings: checkpoint key -> model variable, with the transform between them.

A mapping is a list of `Entry`s built by walking the model's named layers. For each layer that
holds weights, the function registered for (layout, layer) returns the entries of that layer;
`register_layer_mapping` is how new layers (a hybrid ResNet stem, ...) join every reader
without touching it. Applying a mapping checks every key and shape first and assigns only when
all of them fit (shape, a numeric dtype the variable can hold, finite values), so a failed
load never leaves a half-loaded model.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import keras
import numpy as np

from keras_vit.weights.files import CheckpointError

MAX_LISTED = 20


def _identity(array, shape):
    return array


@dataclasses.dataclass
class Entry:
    """One checkpoint tensor (or a slice of one) feeding one model variable.

    Args:
        key: str. The checkpoint key in the format's canonical naming.
        variable: keras.Variable. The model variable it fills.
        to_model: callable (array, variable_shape) -> array. Checkpoint layout to model layout.
            Defaults to the identity.
        from_model: callable (array) -> array. Model layout back to the checkpoint layout, for
            writers. Defaults to the identity.

    Example:

    >>> variable = keras.Variable(np.zeros((2, 3)))  # a kernel stored transposed in the file
    >>> entry = Entry("fc.weight", variable, to_model=lambda a, shape: a.T, from_model=lambda a: a.T)
    >>> entry.to_model(np.ones((3, 2)), (2, 3)).shape, entry.from_model(np.ones((2, 3))).shape
    ((2, 3), (3, 2))
    """

    key: str
    variable: object
    to_model: Callable = _identity
    from_model: Callable = lambda array: array


# (layout, layer class name or layer name) -> fn(layer, context) -> list[Entry]
_LAYER_MAPPINGS: dict[tuple[str, str], Callable] = {}


def register_layer_mapping(layout, layer_key, fn=None):
    """Registers how the layers matched by `layer_key` map to keys of checkpoint layout `layout`.

    Args:
        layout: str. "vit_jax", "hf" or "timm" (see `keras_vit.weights.formats.LAYOUTS`).
        layer_key: str. A layer name (matched first, e.g. "head") or a layer class name (e.g.
            "TransformerBlock").
        fn: callable (layer, context) -> list of `Entry`. `context` is a `MappingContext`. When
            omitted, returns a decorator.

    Example:

    >>> @register_layer_mapping("vit_jax", "my_extra_layer")
    ... def _extra(layer, context):
    ...     return [Entry("extra/kernel", layer.kernel)]
    """
    if fn is None:
        return lambda f: register_layer_mapping(layout, layer_key, f)
    _LAYER_MAPPINGS[(layout, layer_key)] = fn
    return fn


@dataclasses.dataclass
class MappingContext:
    """What a layer mapping may need besides the layer: the checkpoint and loading options.

    Args:
        layout: str. Checkpoint layout: "vit_jax", "hf" or "timm".
        tensors: dict. Canonical key -> array of the checkpoint; {} when writing one.
        interpolation: str. How the position embedding is resampled: "bilinear", "bicubic"
            or "bicubic_hf".
        source_grid: (int, int) or None. Patch grid of the checkpoint's position embedding.
            Defaults to None.
        source_prefix_tokens: int. Class/extra tokens before the patch tokens in the
            checkpoint. Defaults to 1.
        log: callable. Where one-line notes go. Defaults to print.

    Example:

    >>> import keras_vit
    >>> from keras_vit.weights.mapping import build_entries
    >>> context = MappingContext("timm", tensors={}, interpolation="bicubic")
    >>> entries = build_entries(keras_vit.ViT("tiny", num_classes=10), context)
    >>> len(entries), [entry.key for entry in entries[:3]]
    (40, ['patch_embed.proj.weight', 'patch_embed.proj.bias', 'cls_token'])
    >>> entries[0].from_model(entries[0].variable.numpy()).shape  # HWIO kernel back to PyTorch's OIHW
    (32, 3, 4, 4)
    """

    layout: str
    tensors: dict
    interpolation: str
    source_grid: tuple | None = None
    source_prefix_tokens: int = 1
    log: Callable = print


def build_entries(model, context):
    """Walks the model's layers (outermost first), or a list of layers, and collects every layer's entries."""
    entries = []
    for layer in _layers_with_weights(model) if isinstance(model, keras.Model) else model:
        fn = _mapping_of(layer, context.layout)
        if fn is None:
            raise CheckpointError(
                f"No {context.layout!r} key mapping for layer {layer.name!r} ({type(layer).__name__}); "
                "add one with keras_vit.weights.register_layer_mapping."
            )
        entries.extend(fn(layer, context))
    return entries


def model_tensors(model, context, hint=""):
    """Checkpoint key -> array of a model's weights in layout `context.layout`, for writers.

    Every weight of the model must have a key: a layout with no place for one (LayerScale in a
    vit_jax `.npz`) is refused, naming the weights, rather than written without them. Entries
    sharing a key (query, key and value fused in one PyTorch Linear) are concatenated along
    axis 0 in their order.

    Args:
        model: keras.Model. A keras_vit model.
        context: `MappingContext`. Its `tensors` are unused ({}).
        hint: str. Appended to the refusal (what to use instead). Defaults to "".

    Example:

    >>> import keras_vit
    >>> context = MappingContext("vit_jax", tensors={}, interpolation="bilinear")
    >>> tensors = model_tensors(keras_vit.ViT("tiny", num_classes=10), context)
    >>> tensors["embedding/kernel"].shape, len(tensors)
    ((4, 4, 3, 32), 40)
    """
    entries, left_out = [], []
    for layer in _layers_with_weights(model):
        fn = _mapping_of(layer, context.layout)
        layer_entries = fn(layer, context) if fn is not None else []
        covered = {id(entry.variable) for entry in layer_entries}
        left_out += [weight.path for weight in layer.weights if id(weight) not in covered]
        entries += layer_entries
    if left_out:
        raise CheckpointError(
            f"The {context.layout!r} layout has no key for {len(left_out)} weights of model {model.name!r}: "
            + ", ".join(left_out[:MAX_LISTED]) + (" ..." if len(left_out) > MAX_LISTED else "")
            + f"; writing it without them would change the model.{hint}"
        )
    grouped = {}
    for entry in entries:
        value = np.asarray(keras.ops.convert_to_numpy(entry.variable))
        grouped.setdefault(entry.key, []).append(np.asarray(entry.from_model(value)))
    return {key: parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0) for key, parts in grouped.items()}


def _mapping_of(layer, layout):
    return _LAYER_MAPPINGS.get((layout, layer.name)) or _LAYER_MAPPINGS.get((layout, type(layer).__name__))


def _layers_with_weights(model):
    for layer in model.layers:
        if not layer.weights:
            continue
        if isinstance(layer, keras.Model):
            # A nested model (e.g. a stem passed in through input_tensor) is walked through.
            yield from _layers_with_weights(layer)
        else:
            yield layer


def apply_entries(entries, tensors, *, names=None, ignored=(), skip_mismatch=False, log=print, hint=""):
    """Checks every entry against `tensors`, then assigns them all; returns the loaded keys.

    Each tensor must be present, of the variable's shape once brought to the model's layout,
    of a real numeric dtype (strings, objects and complex numbers are refused) and finite (no
    NaN or Inf). Nothing is assigned until every entry has passed.

    Args:
        entries: list of `Entry`.
        tensors: dict key -> array, in the canonical naming of the entries.
        names: dict canonical key -> key as written in the file, for messages. Defaults to None.
        ignored: iterable of str. Checkpoint keys deliberately left out (e.g. a head of another
            size). Defaults to ().
        skip_mismatch: bool. Load what fits and log what does not instead of raising.
            Defaults to False.
        log: callable. Where the one-line notes go. Defaults to print.
        hint: str. What to pass instead, when the caller knows why the checkpoint does not fit
            (`headless_hint`); put before the skip_mismatch advice. Defaults to "".

    Example:

    >>> variable = keras.Variable(np.zeros(2, "float32"))
    >>> apply_entries([Entry("b", variable)], {"b": np.array([1.0, np.nan])})
    Traceback (most recent call last):
    ...
    keras_vit.weights.files.CheckpointError: The checkpoint does not fit the model:
    1 tensors with NaN or Inf values:
      b: 1 of 2 values
    Pass skip_mismatch=True to load only the tensors that fit.
    """
    names = names or {}
    shown = lambda key: names.get(key, key)  # noqa: E731
    ignored = set(ignored)
    used = {entry.key for entry in entries}
    missing = sorted({entry.key for entry in entries if entry.key not in tensors})
    unexpected = sorted(key for key in tensors if key not in used and key not in ignored)
    mismatched, bad_dtype, not_finite, ready = [], [], [], []
    for entry in entries:
        if entry.key not in tensors:
            continue
        shape = tuple(entry.variable.shape)
        found = np.asarray(tensors[entry.key])
        if found.dtype.kind not in "biuf":  # bool, int, uint, float: what a float variable can hold
            kind = "complex" if found.dtype.kind == "c" else "not numeric"
            bad_dtype.append(f"{shown(entry.key)}: {found.dtype} ({kind}), variable {entry.variable.dtype}")
            continue
        try:
            value = np.asarray(entry.to_model(found, shape))
        except (ValueError, IndexError, CheckpointError) as error:
            value, detail = None, f" ({error})"
        else:
            detail = ""
        if value is None or tuple(value.shape) != shape:
            expected = _checkpoint_shape(entry, shape)
            mismatched.append(f"{shown(entry.key)}: expected {expected}, found {tuple(found.shape)}{detail}")
            continue
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow shows as Inf just below
            value = value.astype(keras.backend.standardize_dtype(entry.variable.dtype), copy=False)
        finite = np.isfinite(value) if value.dtype.kind == "f" else True
        if not np.all(finite):
            not_finite.append(f"{shown(entry.key)}: {int(np.size(finite) - np.count_nonzero(finite))} of {value.size} values")
            continue
        ready.append((entry, value))
    problems = []
    if missing:
        problems.append(_listing("missing keys", [shown(k) for k in missing]))
    if unexpected:
        problems.append(_listing("unexpected keys", [shown(k) for k in unexpected]))
    if mismatched:
        problems.append(_listing("shape mismatches (key: expected, found)", mismatched))
    if bad_dtype:
        problems.append(_listing("tensors of a dtype that cannot load into a float variable", bad_dtype))
    if not_finite:
        problems.append(_listing("tensors with NaN or Inf values", not_finite))
    if problems and not skip_mismatch:
        raise CheckpointError(
            "The checkpoint does not fit the model:\n" + "\n".join(problems) + (f"\n{hint}" if hint else "")
            + "\nPass skip_mismatch=True to load only the tensors that fit."
        )
    if problems:
        log("Skipped what does not fit: " + "; ".join(p.replace("\n", " ") for p in problems))
    for entry, value in ready:
        entry.variable.assign(value)
    return [entry.key for entry, _ in ready]


def headless_hint(head_keys, tensors, model) -> str:
    """What to pass when a checkpoint without a classifier head meets a model with one; "" otherwise.

    A backbone checkpoint (a Hugging Face `ViTModel` or `Dinov2Model` folder, a timm model saved
    with `num_classes=0`) holds none of its layout's head keys: the model wants either no head
    or a new one, and the builder cannot tell which from its arguments.

    Args:
        head_keys: sequence of str. The layout's head keys (canonical naming).
        tensors: dict. The checkpoint's tensors, by canonical key.
        model: keras.Model. The model being loaded.

    Example:

    >>> import keras_vit
    >>> hint = headless_hint(["head/kernel", "head/bias"], {}, keras_vit.ViT("tiny", num_classes=10))
    >>> hint.split(":")[0]
    'The checkpoint has no classifier head (it holds a backbone) and the model has one of 10 classes'
    >>> headless_hint(["head/kernel", "head/bias"], {}, keras_vit.ViT("tiny", include_top=False))
    ''
    """
    head = next((layer for layer in model.layers if layer.name == "head"), None)
    if head is None or not head_keys or any(key in tensors for key in head_keys):
        return ""
    return (
        f"The checkpoint has no classifier head (it holds a backbone) and the model has one of {head.units} classes: "
        "build it with include_top=False for the checkpoint's features (keras_vit.ViT(weights=..., "
        "include_top=False)); for a new head of N classes on them, keras_vit.transfer.load_pretrained(weights, "
        "num_classes=N), or keras_vit.load_weights(model, weights, skip_mismatch=True) into a model built with "
        "num_classes=N (the head keeps its zero initial weights, to train)."
    )


def _checkpoint_shape(entry, shape):
    try:
        return tuple(np.asarray(entry.from_model(np.zeros(shape, "float32"))).shape)
    except ValueError:
        return shape


def _listing(title, items):
    more = f"\n  ... and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else ""
    return f"{len(items)} {title}:\n  " + "\n  ".join(items[:MAX_LISTED]) + more
