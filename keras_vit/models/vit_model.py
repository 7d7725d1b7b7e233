"""`VisionTransformer`: the functional Keras model `keras_vit.ViT` returns, which keeps the config it was built from.

Its calls check the images (channels, free sides) or NaFlex grids before the graph sees them,
and it makes models sharing its layers: every block's tokens and attention
(`intermediates_model`), chosen blocks' feature maps (`feature_maps_model`).

Example:

>>> import keras_vit
>>> model = keras_vit.ViT("tiny", num_classes=3)
>>> type(model).__name__, model.vit_config["num_classes"], model.pixel_multiple
('VisionTransformer', 3, 4)
"""

from __future__ import annotations

import keras
import numpy as np

from keras_vit._validation import check_bool
from keras_vit.layers import TokenMap
from keras_vit.layers.rotary_embedding import rope_settings
from keras_vit.models.vit_config import pixel_patch
from keras_vit.models.vit_graph import encoder_graph
from keras_vit.models.vit_inputs import check_spatial_shapes, checked_image_sides, naflex_keras_inputs


@keras.saving.register_keras_serializable(package="keras_vit")
class VisionTransformer(keras.Model):
    """A functional ViT that keeps the resolved config it was built from (`vit_config`).

    `get_config()` is the functional graph plus "vit_config", so `.keras` files reload it with
    no custom_objects and `build(model.vit_config)` makes a fresh copy (a model with a custom
    backbone needs that backbone passed again). Files saved as plain functional models load as
    such, without `vit_config`.

    Args:
        *args: the arguments of a functional `keras.Model` (inputs, outputs, name, ...).
        vit_config: dict or None. The resolved config. Defaults to None.
        **kwargs: the keyword arguments of a functional `keras.Model`.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT("tiny", num_classes=3)
    >>> restored = type(model).from_config(model.get_config())
    >>> type(restored).__name__, restored.vit_config["num_classes"]
    ('VisionTransformer', 3)
    """

    def __init__(self, *args, vit_config=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._vit_config = _frozen(vit_config)

    @property
    def vit_config(self):
        """dict or None. A copy of the resolved config the model was built from."""
        return None if self._vit_config is None else dict(self._vit_config)

    def get_config(self):
        return {**super().get_config(), "vit_config": self.vit_config}

    def call(self, inputs, training=None, mask=None, **kwargs):
        if isinstance(inputs, dict) and self._vit_config is not None and self._vit_config.get("naflex"):
            check_spatial_shapes(self.name, inputs)
        # Checked here, where the model's own input is known: past this point a wrong channel
        # count surfaces as Conv2D's "depth of output is not a multiple of the number of groups".
        shape, expected = getattr(inputs, "shape", None), self.inputs[0].shape if self.inputs else None
        if shape is not None and expected is not None and len(shape) == len(expected) == 4:
            if None not in (shape[-1], expected[-1]) and shape[-1] != expected[-1]:
                raise ValueError(
                    f"Invalid images of shape {tuple(shape)} for model {self.name!r}: it takes {expected[-1]} "
                    f"channel{'s' if expected[-1] != 1 else ''}, shape (batch, {expected[1]}, {expected[2]}, "
                    f"{expected[-1]}). Convert the images (e.g. to greyscale) or build the model with "
                    f"input_shape=(..., {shape[-1]})."
                )
            inputs = checked_image_sides(inputs, expected, self.pixel_multiple, self.name)
        return super().call(inputs, training=training, mask=mask, **kwargs)

    @property
    def pixel_multiple(self):
        """int or None. What image sides must be a multiple of (the patch, through any stem); None with a custom backbone."""
        config = self._vit_config
        if config is None or config.get("backbone") is not None:
            return None
        return pixel_patch(config)

    def intermediates_model(self):
        """A model sharing this model's layers that returns every block's tokens and attention.

        Its output is a dict: "blocks" (list, one (B, T, D) tensor per block, input side
        first, before the final LayerNorm), "attention" (list, one (B, heads, T, T) per
        block), "tokens" (B, T, D) (every token after the final LayerNorm, if before pooling: class,
        distillation, register, then patch tokens; a NaFlex model's padding tokens are
        meaningless, see `padding_mask`), "padding_mask" (B, T), True for real tokens
        (NaFlex only), "embedding" (what `include_top=False`
        returns, absent with `pooling=None`), "output" (the model's output) and, with
        `pooling="map"`, "pooling_attention" (B, heads, 1, T), the probe's attention. It is
        built with public Keras APIs from `vit_config`, like timm's `forward_intermediates`
        and big_vision's `out` dict, for dense features, probing and the attention figures.

        Example:

        >>> import numpy as np, keras_vit
        >>> model = keras_vit.ViT("tiny", num_classes=3)
        >>> out = model.intermediates_model()(np.zeros((1, 32, 32, 3), "float32"))
        >>> len(out["blocks"]), tuple(out["attention"][0].shape), tuple(out["tokens"].shape)
        (2, (1, 2, 65, 65), (1, 65, 32))
        """
        config = self._config_for("intermediates_model")
        inputs, x = self._encoder_inputs(config)
        collect = {"blocks": [], "attention": []}
        output = encoder_graph(config, x, lambda name, make: self.get_layer(name), collect)
        collect["output"] = output
        if config["pooling"] is None:
            del collect["embedding"]
        return keras.Model(inputs, collect, name=f"{self.name}_intermediates")

    def feature_maps_model(self, indices=1, norm=True, prefix_tokens=False):
        """A model sharing this model's layers that returns chosen blocks' patch tokens as feature maps.

        What dense-task code (segmentation and depth decoders, timm's `forward_intermediates`
        with `output_fmt="NHWC"`) is written against: each chosen block's patch tokens laid out on
        the patch grid of the image, channels last, (B, H / p, W / p, D) where p is the pixels a
        token covers (through any stem). Class, distillation and register tokens are left out of
        the maps. Blocks after the last chosen one are not run. Use it inside any Keras model;
        for a frozen backbone wrap it in `keras_vit.layers.InferenceMode(..., trainable=False)`
        (no dropout or stochastic depth inside `fit` either, as `keras_vit.LinearSegmenter` does).

        Args:
            indices: int or list of int. An int n takes the last n blocks; a list names blocks
                by index, 0 the first, negative from the end (-1 the last), in the order given.
                Defaults to 1 (the last block).
            norm: bool. Apply the model's final LayerNorm to each chosen block's tokens, as
                DINOv2's and Depth Anything's backbones do (a model with `fc_norm` has none
                before its pooling, as in timm). Defaults to True.
            prefix_tokens: bool. Also return each chosen block's prefix tokens (B, P, D) (P is
                0 for models without a class token). Defaults to False.

        Returns:
            A `keras.Model` from images to a list of maps (one per chosen block), or with
            `prefix_tokens=True` a tuple (maps, prefix tokens), two lists.

        Example:

        >>> import numpy as np, keras_vit
        >>> model = keras_vit.ViT("tiny_dinov2", image_size=None, include_top=False)
        >>> maps = model.feature_maps_model(indices=[0, -1])(np.zeros((1, 16, 24, 3), "float32"))
        >>> [tuple(m.shape) for m in maps]
        [(1, 4, 6, 24), (1, 4, 6, 24)]
        """
        config = self._config_for("feature_maps_model")
        if config.get("naflex"):
            raise ValueError(
                f"feature_maps_model needs images on a patch grid; model {self.name!r} takes NaFlex patch sequences. "
                "Build or load it with naflex=False for feature maps of one image size."
            )
        check_bool("norm", norm)
        check_bool("prefix_tokens", prefix_tokens)
        chosen = block_indices(indices, config["num_layers"])
        inputs, x = self._encoder_inputs(config)
        collect = {"blocks": []}
        encoder_graph(config, x, lambda name, make: self.get_layer(name), collect)
        to_map = TokenMap(config["patch_size"], self.get_layer("embedding").num_prefix_tokens, name="token_map")
        # A model whose final LayerNorm follows the pooling (fc_norm: EVA-02) has none for tokens, as in timm.
        final_norm = None if config.get("fc_norm") or not norm else self.get_layer("encoder_norm")
        maps, prefixes = [], []
        for i in chosen:
            tokens = collect["blocks"][i]
            grid, prefix = to_map(final_norm(tokens) if final_norm is not None else tokens, x)
            maps.append(grid)
            prefixes.append(prefix)
        return keras.Model(inputs, (maps, prefixes) if prefix_tokens else maps, name=f"{self.name}_feature_maps")

    def resized_model(self, image_size):
        """A model sharing this model's layers and weights that takes images of another size.

        Its learned position embedding is resampled to the new patch grid at call time (the patch
        encoder's `interpolation`), as timm's `dynamic_img_size` does; a stem takes any size. What
        DINO's small local views run through while the model keeps its own input size.

        Args:
            image_size: int or (int, int). Height and width of the images, multiples of the
                pixels a token covers (`pixel_multiple`).

        Example:

        >>> import numpy as np, keras_vit
        >>> model = keras_vit.ViT("tiny", image_size=32, include_top=False)
        >>> small = model.resized_model(16)
        >>> small.input_shape, small.count_params() == model.count_params()
        ((None, 16, 16, 3), True)
        """
        config = self._config_for("resized_model")
        if config.get("naflex"):
            raise ValueError(f"Model {self.name!r} takes NaFlex patch sequences of any size already; resized_model "
                             "is for models of one image size.")
        given = image_size
        if isinstance(image_size, (int, np.integer)) and not isinstance(image_size, bool):
            image_size = (int(image_size), int(image_size))
        if (not isinstance(image_size, (tuple, list)) or len(image_size) != 2
                or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s > 0 for s in image_size)):
            raise ValueError(f"Invalid image_size={given!r}. Expected an int or (height, width), positive ints.")
        multiple = self.pixel_multiple
        if multiple and any(int(s) % multiple for s in image_size):
            raise ValueError(f"Invalid image_size={tuple(image_size)!r} for model {self.name!r}: expected sides that "
                             f"are multiples of {multiple} (the pixels a token covers).")
        shape = (None, int(image_size[0]), int(image_size[1]), self.inputs[0].shape[-1])
        inputs, x = self._encoder_inputs(config, batch_shape=shape)
        output = encoder_graph(config, x, lambda name, make: self.get_layer(name))
        return keras.Model(inputs, output, name=f"{self.name}_{shape[1]}x{shape[2]}")

    def _config_for(self, method):
        config = self.vit_config
        if config is None:
            raise ValueError(
                f"Model {self.name!r} has no vit_config (it was loaded from a file saved as a plain functional "
                f"model): rebuild it with keras_vit.ViT to call {method}, or use keras_vit.inspect.attention_model."
            )
        return config

    def _encoder_inputs(self, config, batch_shape=None):
        """New inputs like the model's (or of `batch_shape`), and what its patch encoder takes from them (after
        preprocessing and stem)."""
        if config.get("naflex"):
            inputs = naflex_keras_inputs(config)
            return inputs, inputs
        inputs = x = keras.Input(batch_shape=batch_shape or self.inputs[0].shape, dtype=self.inputs[0].dtype,
                                 name="images")
        if config["preprocessing"] is not None:
            x = self.get_layer("preprocessing")(x)
        stem = "resnet" if config["backbone"] is None and config["stem"] is not None else config["backbone"]
        if stem is not None:
            x = self.get_layer(stem)(x)
        return inputs, x


def block_indices(indices, depth):
    """The blocks `indices` chooses, as non-negative indices in the order given.

    Args:
        indices: int or list of int. An int n chooses the last n blocks; a list names blocks, negative
            from the end.
        depth: int. The number of blocks.

    Example:

    >>> block_indices(2, 12), block_indices([2, 5, -1], 12)
    ([10, 11], [2, 5, 11])
    """
    if isinstance(indices, (int, np.integer)) and not isinstance(indices, bool):
        if not 1 <= indices <= depth:
            raise ValueError(f"Invalid indices={indices!r}: an int chooses the last n blocks, 1 to {depth} "
                             f"for a model of {depth} blocks.")
        return list(range(depth - int(indices), depth))
    if not isinstance(indices, (list, tuple)) or not indices or not all(
            isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in indices):
        raise ValueError(f"Invalid indices={indices!r}: expected an int (the last n blocks) or a non-empty list "
                         "of block indices.")
    beyond = [i for i in indices if not -depth <= i < depth]
    if beyond:
        raise ValueError(f"Invalid indices={list(indices)!r}: block(s) {beyond} beyond the depth; a model of {depth} "
                         f"blocks has indices 0 to {depth - 1} (or -{depth} to -1 from the end).")
    return [int(i) % depth for i in indices]


def _frozen(config):
    """A copy with the tuples JSON turned into lists made tuples again (a rotary reference grid's too)."""
    if config is None:
        return None
    config = dict(config)
    for key in ("image_size", "grid_size", "stem"):
        if isinstance(config.get(key), list):
            config[key] = tuple(config[key])
    if config.get("rope") is not None:  # its reference_grid too (EVA-02, PE-Core)
        config["rope"] = rope_settings(config["rope"])
    return config
