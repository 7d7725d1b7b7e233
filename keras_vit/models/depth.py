"""Depth estimation: a ViT's feature maps decoded by DPT (Depth Anything V2), image to depth per pixel."""

from __future__ import annotations

import os

import keras

from keras_vit._validation import check_positive_int
from keras_vit.layers import DPTDepthHead, DPTFusion, DPTReassemble
from keras_vit.models.vit import ViT
from keras_vit.models.vit_inputs import checked_image_sides
from keras_vit.models.vit_model import VisionTransformer, block_indices
from keras_vit.weights.depth_anything import DEPTH_ANYTHING_DEFAULTS, load_decoder, read_depth_anything

# The decoder of Depth Anything V2 Small (Hugging Face's DepthAnythingConfig defaults): what a
# depth model on another backbone starts from.
DECODER_DEFAULTS = {key: DEPTH_ANYTHING_DEFAULTS[key] for key in (
    "neck_hidden_sizes", "reassemble_factors", "fusion_hidden_size", "head_hidden_size", "depth_estimation_type",
    "max_depth")}


@keras.saving.register_keras_serializable(package="keras_vit")
class DepthModel(keras.Model):
    """A functional depth model, images (B, H, W, C) to depth (B, H, W), that refuses sizes off its patch grid.

    Args:
        pixel_multiple: int or None. What the image sides must be a multiple of (the
            backbone's patch, through any stem). Defaults to None.
        **kwargs: the keyword arguments of a functional `keras.Model`.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.DepthEstimator(backbone="tiny_dinov2")
    >>> type(model.from_config(model.get_config())).__name__, model.pixel_multiple
    ('DepthModel', 4)
    """

    def __init__(self, *args, pixel_multiple=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.pixel_multiple = pixel_multiple

    def get_config(self):
        return {**super().get_config(), "pixel_multiple": self.pixel_multiple}

    def call(self, inputs, training=None, mask=None, **kwargs):
        if len(getattr(inputs, "shape", ())) == 4:
            inputs = checked_image_sides(inputs, self.inputs[0].shape, self.pixel_multiple, self.name)
        return super().call(inputs, training=training, mask=mask, **kwargs)


def DepthEstimator(
    weights=None,
    *,
    backbone=None,
    indices=None,
    image_size=None,
    preprocessing=None,
    neck_hidden_sizes=None,
    reassemble_factors=None,
    fusion_hidden_size=None,
    head_hidden_size=None,
    depth_estimation_type=None,
    max_depth=None,
    name="depth_anything",
):
    """Builds a depth model: a ViT backbone's feature maps decoded by DPT, as Depth Anything V2.

    The backbone's chosen blocks give patch-token maps (`VisionTransformer.feature_maps_model`,
    after the final LayerNorm, class and register tokens left out); each map is projected and
    resized by its reassemble factor (`DPTReassemble`), fused coarsest first (`DPTFusion`,
    bilinear resizing with aligned corners) and the depth head (`DPTDepthHead`, in float32)
    predicts one depth per pixel. With `weights=` a Hugging Face Depth Anything folder states
    everything (backbone, blocks, decoder) and its outputs are transformers' `predicted_depth`;
    without, `backbone=` names any row of the table (or is a keras_vit ViT) and the decoder is
    randomly initialised, to train. Images must be scaled as the backbone expects (ImageNet
    mean and std for Depth Anything: `preprocessing="imagenet"` does it inside the model), with
    sides that are multiples of the patch.

    Args:
        weights: str or None. A Hugging Face `DepthAnythingForDepthEstimation` folder or Hub id
            "hf-hub:ORG/NAME" (backbone_config model_type "dinov2"). Defaults to None.
        backbone: str, `VisionTransformer` or None. Without `weights`: a variant name (built
            with `include_top=False`) or a keras_vit ViT (its layers are shared). Defaults to None.
        indices: int, list of int or None. Without `weights`: the blocks feeding the decoder, one
            per stage (0 the first, negative from the end; an int n: the last n blocks). None takes the last block of each
            quarter of the depth (Depth Anything's 4 of 12, 3 6 9 12 in Hugging Face's count).
            Defaults to None.
        image_size: int, (int, int) or None. Input height and width; None accepts any size on the
            patch grid. Defaults to None.
        preprocessing: str or None. Pixel scaling inside the model, as `keras_vit.ViT`'s
            ("imagenet" for Depth Anything's [0, 255] images). Defaults to None.
        neck_hidden_sizes: list of int or None. Width of each stage after reassembly. Defaults
            to Depth Anything V2 Small's [48, 96, 192, 384].
        reassemble_factors: list of number or None. Each stage's resize: n times larger, or
            1/n. Defaults to [4, 2, 1, 0.5].
        fusion_hidden_size: int or None. Width of the fusion blocks. Defaults to 64.
        head_hidden_size: int or None. Width of the head's second convolution. Defaults to 32.
        depth_estimation_type: str or None. "relative" (ReLU) or "metric" (sigmoid times
            `max_depth`). Defaults to "relative".
        max_depth: float or None. The metric head's depth range. Defaults to 1.
        name: str. Model name. Defaults to "depth_anything".

    Returns:
        A `DepthModel`, images (B, H, W, C) to depth (B, H, W) in float32.

    Example:

    >>> import numpy as np, keras_vit
    >>> model = keras_vit.DepthEstimator(backbone="tiny_dinov3", neck_hidden_sizes=[8, 8, 8, 8],
    ...                                  fusion_hidden_size=8, head_hidden_size=4)
    >>> tuple(model(np.zeros((1, 32, 48, 3), "float32")).shape)
    (1, 32, 48)
    """
    decoder = {"neck_hidden_sizes": neck_hidden_sizes, "reassemble_factors": reassemble_factors,
               "fusion_hidden_size": fusion_hidden_size, "head_hidden_size": head_hidden_size,
               "depth_estimation_type": depth_estimation_type, "max_depth": max_depth}
    folder = None
    if weights is not None:
        if not isinstance(weights, (str, os.PathLike)):
            raise ValueError(f"Invalid weights={weights!r}. Expected None, a Hugging Face Depth Anything folder or "
                             "a Hub id 'hf-hub:ORG/NAME'.")
        given = [key for key, value in {"backbone": backbone, "indices": indices, **decoder}.items()
                 if value is not None]
        if given:
            raise ValueError(f"Invalid {', '.join(f'{key}=' for key in given)} with weights={weights!r}: the folder "
                             "states the backbone, its blocks and the decoder. Leave them out.")
        folder = read_depth_anything(weights)
        vit = ViT(weights=folder.backbone, image_size=image_size, include_top=False, preprocessing=preprocessing,
                  name="backbone")
        indices, norm, decoder = folder.indices, folder.norm, folder.decoder
    else:
        vit = _backbone(backbone, image_size, preprocessing)
        depth = vit.vit_config["num_layers"]
        norm = True
        decoder = {key: DECODER_DEFAULTS[key] if value is None else value for key, value in decoder.items()}
        if indices is None:
            indices = [max(depth * quarter // 4 - 1, 0) for quarter in range(1, 5)]
        indices = block_indices(indices, depth)
        for key in ("neck_hidden_sizes", "reassemble_factors"):
            if not isinstance(decoder[key], (list, tuple)) or len(decoder[key]) != len(indices):
                raise ValueError(f"Invalid {key}={decoder[key]!r}: expected a list with one entry per chosen block "
                                 f"({len(indices)}: {indices}).")
        check_positive_int("fusion_hidden_size", decoder["fusion_hidden_size"], minimum=2)
    maps_model = vit.feature_maps_model(indices=indices, norm=norm)
    images, maps = maps_model.inputs[0], maps_model.outputs
    width = decoder["fusion_hidden_size"]
    features = [
        DPTReassemble(channels, factor, width, name=f"reassemble_{i}")(feature_map)
        for i, (feature_map, channels, factor) in enumerate(
            zip(maps, decoder["neck_hidden_sizes"], decoder["reassemble_factors"]))
    ]
    x = None
    # Coarsest stage first; each block ends at the size of the next stage's map, the last at twice its own.
    for step, stage in enumerate(reversed(range(len(features)))):
        fusion = DPTFusion(width, residual=x is not None, name=f"fusion_{step}")
        reference = features[stage - 1] if stage > 0 else None
        x = fusion(features[stage], reference=reference) if x is None else fusion(x, features[stage], reference=reference)
    depth = DPTDepthHead(decoder["head_hidden_size"], decoder["depth_estimation_type"], decoder["max_depth"],
                         dtype="float32", name="depth_head")(x, images)
    model = DepthModel(images, depth, pixel_multiple=vit.pixel_multiple, name=name)
    if folder is not None:
        load_decoder([layer for layer in model.layers if isinstance(layer, (DPTReassemble, DPTFusion, DPTDepthHead))],
                     folder)
    return model


def _backbone(backbone, image_size, preprocessing):
    if isinstance(backbone, VisionTransformer):
        if image_size is not None or preprocessing is not None:
            raise ValueError("Invalid image_size= or preprocessing= with a backbone model: they are the model's own. "
                             "Pass them when building it.")
        return backbone
    if isinstance(backbone, str):
        return ViT(backbone, image_size=image_size, include_top=False, preprocessing=preprocessing, name="backbone")
    raise ValueError(f"Invalid backbone={backbone!r}. Expected a variant name of keras_vit.VARIANTS (e.g. "
                     "'tiny_dinov2') or a keras_vit ViT model, or weights= a Depth Anything folder.")
