"""Per-layer attention weights of any keras_vit model, plain or hybrid, from its own weights."""

from __future__ import annotations

import math
import weakref

import keras
import numpy as np

from keras_vit.layers import PatchEncoder, TransformerBlock
from keras_vit.models.vit_graph import WithAttention  # one wrapper for this probe and intermediates_model


def _check_graph_model(model, argument="model"):
    """Raises ValueError unless `model` is a functional or Sequential keras model (a graph to re-run)."""
    if not isinstance(model, keras.Model) or not _is_graph_model(model):
        raise ValueError(
            f"Invalid {argument}={_describe(model)}: expected a built functional or Sequential keras "
            "model (subclassed models have no graph to walk)."
        )


def _is_graph_model(model):
    if isinstance(model, keras.Sequential):
        return True
    try:
        return bool(model.inputs) and bool(model.outputs)
    except (AttributeError, ValueError):  # a subclassed model has no symbolic inputs
        return False


def _describe(model):
    name = getattr(model, "name", None)
    return f"<{type(model).__name__} {name!r}>" if name else repr(model)


def iter_layers(model):
    """Yields every layer of `model`, descending into nested models, in graph order."""
    for layer in model.layers:
        yield layer
        if isinstance(layer, keras.Model):
            yield from iter_layers(layer)


def transformer_blocks(model):
    """Returns the TransformerBlock layers of `model` (nested models included), input side first.

    Args:
        model: keras.Model. A keras_vit model, plain or hybrid.

    Returns:
        A list of `TransformerBlock` layers.

    Example:

    >>> import keras_vit
    >>> [block.name for block in transformer_blocks(keras_vit.ViT("tiny", num_classes=3))]
    ['encoderblock_0', 'encoderblock_1']
    """
    return [layer for layer in iter_layers(model) if isinstance(layer, TransformerBlock)]


def patch_encoder(model):
    """Returns the model's PatchEncoder (the layer named `embedding` in keras_vit models).

    Nested models (a hybrid's stem, a model wrapped in another) are searched too.

    Args:
        model: keras.Model. A Vision Transformer.

    Raises:
        ValueError: the model has no PatchEncoder, or more than one.

    Example:

    >>> import keras_vit
    >>> encoder = patch_encoder(keras_vit.ViT("tiny", num_classes=3))
    >>> encoder.name, encoder.grid_size, encoder.hidden_size
    ('embedding', (8, 8), 32)
    """
    encoders = [layer for layer in iter_layers(model) if isinstance(layer, PatchEncoder)]
    if len(encoders) != 1:
        raise ValueError(
            f"Invalid model={_describe(model)}: expected a Vision Transformer with exactly one "
            f"PatchEncoder ('embedding') layer, found {len(encoders)}."
        )
    return encoders[0]


def attention_model(model):
    """Returns a model sharing `model`'s weights whose outputs are the attention of every block.

    The graph of `model` is re-run on a fresh input with public Keras APIs
    (`keras.models.clone_model` sharing every layer, `call_function` calling each
    TransformerBlock with `return_attention_scores=True`, nested models probed the same way);
    whatever comes before the blocks (preprocessing, a CNN stem, the patch embedding) runs
    unchanged. Outputs are a list, one (B, heads, T, T) tensor per block, input side first. A
    keras_vit model also offers `model.intermediates_model()` (every block's tokens too).

    Args:
        model: keras.Model. A functional or Sequential model containing TransformerBlock layers,
            possibly inside nested models.

    Returns:
        A `keras.Model` with the same inputs as `model`.

    Raises:
        ValueError: `model` has no graph to walk or contains no TransformerBlock.

    Example:

    >>> import keras_vit
    >>> probe = attention_model(keras_vit.ViT("tiny", num_classes=3))
    >>> [tuple(output.shape) for output in probe.outputs]
    [(None, 2, 65, 65), (None, 2, 65, 65)]
    """
    _check_graph_model(model)
    if not transformer_blocks(model):
        raise ValueError(
            f"Invalid model={_describe(model)}: it has no TransformerBlock layers, so there are no "
            "attention weights to read. Expected a keras_vit Vision Transformer."
        )
    clone, scores = _clone_collecting(model)
    probe = keras.Model(clone.inputs, scores, name=f"{model.name}_attention")
    _MADE_PROBES.add(probe)
    return probe


def _clone_collecting(model):
    """Re-runs `model`'s graph sharing its layers; returns (clone, attention of each block)."""
    scores = []

    def call_function(layer, *args, **kwargs):
        if isinstance(layer, TransformerBlock):
            tokens, attention = WithAttention(layer)(*args, **kwargs)
            scores.append(attention)
            return tokens
        if isinstance(layer, keras.Model) and transformer_blocks(layer):
            _check_graph_model(layer, "nested model")
            inner, inner_scores = _clone_collecting(layer)
            outputs = keras.Model(inner.inputs, [inner.outputs, inner_scores])(*args)
            scores.extend(outputs[1])
            return outputs[0][0] if len(outputs[0]) == 1 else outputs[0]
        return layer(*args, **kwargs)

    clone = keras.models.clone_model(model, clone_function=lambda layer: layer, call_function=call_function)
    return clone, scores


# Building the probe costs a graph trace; keep one per live model.
_PROBES = weakref.WeakKeyDictionary()
_MADE_PROBES = weakref.WeakSet()


def attention_maps(model, images, batch_size=32):
    """Returns the attention weights of every block for `images`, shape (L, B, heads, T, T).

    Args:
        model: keras.Model or the result of `attention_model`. A model with TransformerBlocks.
        images: array (B, H, W, C). Inputs exactly as `model` expects them.
        batch_size: int. Images per forward pass. Defaults to 32.

    Returns:
        A float32 NumPy array; rows (last axis) sum to 1.

    Example:

    >>> import numpy as np, keras_vit
    >>> maps = attention_maps(keras_vit.ViT("tiny", num_classes=3), np.zeros((1, 32, 32, 3)))
    >>> maps.shape
    (2, 1, 2, 65, 65)
    """
    probe = model if model in _MADE_PROBES else _PROBES.get(model)
    if probe is None:
        probe = _PROBES[model] = attention_model(model)
    outputs = probe.predict(np.asarray(images), batch_size=batch_size, verbose=0)
    if not isinstance(outputs, (list, tuple)):
        outputs = [outputs]
    return np.stack([np.asarray(output, dtype="float32") for output in outputs])


def has_probe(model):
    """Whether `model` pools with an attention probe (keras_vit's pooling="map", SigLIP).

    Example:

    >>> import keras_vit
    >>> has_probe(keras_vit.ViT("tiny_siglip", include_top=False)), has_probe(keras_vit.ViT("tiny", num_classes=3))
    (True, False)
    """
    return (getattr(model, "vit_config", None) or {}).get("pooling") == "map"


def probe_attention(model, images, batch_size=32):
    """The attention of a MAP-pooled model's probe over every final token, shape (B, heads, T).

    Read from `model.intermediates_model()` ("pooling_attention"): what the attention pooling of
    SigLIP-shaped models reads, as the class token's attention is for the others.

    `model` is a keras_vit model built with pooling="map"; `images` and `batch_size` as in
    `attention_maps`. Returns a float32 NumPy array whose rows (last axis) sum to 1.

    Example:

    >>> import numpy as np, keras_vit
    >>> probe_attention(keras_vit.ViT("tiny_siglip", include_top=False), np.zeros((1, 16, 16, 3))).shape
    (1, 2, 16)
    """
    if not has_probe(model):
        pooling = (getattr(model, "vit_config", None) or {}).get("pooling")
        raise ValueError(
            f"Invalid model={_describe(model)}: it has no attention-pooling probe (pooling={pooling!r}); "
            "expected a keras_vit model built with pooling='map' (SigLIP)."
        )
    reader = _PROBE_READERS.get(model)
    if reader is None:
        intermediates = model.intermediates_model()
        reader = _PROBE_READERS[model] = keras.Model(intermediates.inputs, intermediates.output["pooling_attention"])
    weights = reader.predict(np.asarray(images), batch_size=batch_size, verbose=0)
    return np.asarray(weights, dtype="float32")[:, :, 0]


_PROBE_READERS = weakref.WeakKeyDictionary()


def token_layout(model, num_tokens, image_size):
    """Where the tokens of `model` sit on the image: (num_prefix_tokens, grid, pixels per token).

    The grid is the PatchEncoder's when it has as many cells as patch tokens; otherwise (dynamic
    image sizes, hybrid stems) it is the factorisation of the patch-token count closest to the
    image's aspect ratio.

    Args:
        model: keras.Model. The keras_vit model.
        num_tokens: int. Tokens T per image, as in the attention maps.
        image_size: (int, int). Height and width of the input images in pixels.

    Returns:
        (num_prefix_tokens, (rows, cols), (pixel_height, pixel_width) of one token).

    Example:

    >>> import keras_vit
    >>> token_layout(keras_vit.ViT("tiny", num_classes=3), 65, (32, 32))
    (1, (8, 8), (4.0, 4.0))
    """
    encoder = patch_encoder(model)
    prefix = encoder.num_prefix_tokens
    patches = num_tokens - prefix
    if patches < 1:
        raise ValueError(f"Invalid num_tokens={num_tokens}: the model has {prefix} prefix token(s).")
    height, width = image_size
    grid = getattr(encoder, "grid_size", None)
    if grid is None or grid[0] * grid[1] != patches:
        grid = _closest_grid(patches, height / width)
    return prefix, tuple(int(g) for g in grid), (height / grid[0], width / grid[1])


def _closest_grid(count, aspect):
    pairs = [(rows, count // rows) for rows in range(1, count + 1) if count % rows == 0]
    return min(pairs, key=lambda pair: abs(math.log(pair[0] / pair[1]) - math.log(aspect)))
