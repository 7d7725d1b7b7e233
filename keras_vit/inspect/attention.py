"""Per-layer attention weights of any keras_vit model, plain or hybrid, from its own weights."""

from __future__ import annotations

import math
import weakref

import keras
import numpy as np

from keras_vit.layers import PatchEncoder, TransformerBlock


def _functional(model, argument="model"):
    """Returns the functional graph behind `model` (Sequential models keep one inside)."""
    graph = getattr(model, "_functional", None) if isinstance(model, keras.Sequential) else model
    if not isinstance(model, keras.Model) or graph is None or not hasattr(graph, "_run_through_graph"):
        raise ValueError(
            f"Invalid {argument}={_describe(model)}: expected a built functional or Sequential keras "
            "model (subclassed models have no graph to walk)."
        )
    return graph


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

    The graph of `model` is re-run on a fresh input, each TransformerBlock called with
    `return_attention_scores=True`; whatever comes before the blocks (preprocessing, a CNN
    stem, the patch embedding) runs unchanged. Outputs are a list, one (B, heads, T, T) tensor
    per block, input side first.

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
    graph = _functional(model)
    if not transformer_blocks(model):
        raise ValueError(
            f"Invalid model={_describe(model)}: it has no TransformerBlock layers, so there are no "
            "attention weights to read. Expected a keras_vit Vision Transformer."
        )
    inputs = [
        keras.Input(batch_shape=tensor.shape, dtype=tensor.dtype, name=tensor.name)
        for tensor in graph.inputs
    ]
    scores = []
    _run_collecting(graph, inputs, scores)
    probe = keras.Model(inputs[0] if len(inputs) == 1 else inputs, scores, name=f"{model.name}_attention")
    _MADE_PROBES.add(probe)
    return probe


def _run_collecting(graph, inputs, scores):
    """Runs `graph` symbolically on `inputs`, appending each block's attention to `scores`."""

    def operation_fn(operation):
        if isinstance(operation, TransformerBlock):

            def call_block(*args, **kwargs):
                tokens, attention = _BlockWithAttention(operation)(*args, **kwargs)
                scores.append(attention)
                return tokens

            return call_block
        if isinstance(operation, keras.Model) and transformer_blocks(operation):
            nested = _functional(operation, "nested model")

            def call_nested(*args, **kwargs):
                if kwargs:
                    # Only `training` reaches a nested model here; the symbolic graph has no use for it.
                    kwargs.pop("training", None)
                return _run_collecting(nested, keras.tree.flatten(args), scores)

            return call_nested
        return operation

    return graph._run_through_graph(inputs, operation_fn=operation_fn)


class _BlockWithAttention(keras.layers.Layer):
    """Calls a TransformerBlock (shared, not copied) with return_attention_scores=True.

    Calling the block itself would add a node whose outputs Keras does not track (a layer's
    outputs are taken from its first call, which returned tokens only), so the probe model
    could not output the scores. This transient wrapper is never saved.
    """

    def __init__(self, block, **kwargs):
        super().__init__(name=f"{block.name}_attention", dtype=block.dtype_policy, **kwargs)
        self.block = block
        self.built = True

    def call(self, inputs, training=None):
        return self.block(inputs, training=training, return_attention_scores=True)

    def compute_output_spec(self, inputs, training=None):
        return self.block.compute_output_spec(inputs, return_attention_scores=True)


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
