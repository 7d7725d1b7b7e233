"""`zeroshot_classifier`: an image-text checkpoint and label names as an ordinary keras_vit classifier.

The image tower scores the unit image embedding with a float32 Dense head folded from the
label names: each name is put into every template, the texts embedded and L2-normalised, their
mean taken and normalised again (open_clip's `build_zero_shot_classifier`), times the stored
logit scale, plus SigLIP's stored bias. CLIP's head ends in softmax, SigLIP's (and SigLIP 2's)
in sigmoid: the scores transformers' zero-shot-image-classification pipeline gives. The model
is a `VisionTransformer` like any other: it takes [0, 255] pixels, keeps its label names and the
checkpoint's image processor in its config, saves as `.keras` and exports through
`keras_vit.export` (SavedModel with its bytes signature, TFLite, ONNX).

Example (a two-tower folder saved by transformers, with its tokenizer and processor):

>>> model = zeroshot_classifier("clip-folder", ["cat", "dog"])  # doctest: +SKIP
>>> model.vit_config["class_names"], model.output_shape  # doctest: +SKIP
(['cat', 'dog'], (None, 2))
"""

from __future__ import annotations

import numpy as np

from keras_vit import configs

DEFAULT_TEMPLATE = "This is a photo of {}."  # transformers' zero-shot pipeline's hypothesis_template
# open_clip's OPENAI_IMAGENET_TEMPLATES: the 80 prompts of the CLIP paper's ImageNet ensemble.
IMAGENET_TEMPLATES = tuple(
    template.replace("<>", "{}") for template in (
        "a bad photo of a <>.", "a photo of many <>.", "a sculpture of a <>.", "a photo of the hard to see <>.",
        "a low resolution photo of the <>.", "a rendering of a <>.", "graffiti of a <>.", "a bad photo of the <>.",
        "a cropped photo of the <>.", "a tattoo of a <>.", "the embroidered <>.", "a photo of a hard to see <>.",
        "a bright photo of a <>.", "a photo of a clean <>.", "a photo of a dirty <>.", "a dark photo of the <>.",
        "a drawing of a <>.", "a photo of my <>.", "the plastic <>.", "a photo of the cool <>.",
        "a close-up photo of a <>.", "a black and white photo of the <>.", "a painting of the <>.",
        "a painting of a <>.", "a pixelated photo of the <>.", "a sculpture of the <>.", "a bright photo of the <>.",
        "a cropped photo of a <>.", "a plastic <>.", "a photo of the dirty <>.", "a jpeg corrupted photo of a <>.",
        "a blurry photo of the <>.", "a photo of the <>.", "a good photo of the <>.", "a rendering of the <>.",
        "a <> in a video game.", "a photo of one <>.", "a doodle of a <>.", "a close-up photo of the <>.",
        "a photo of a <>.", "the origami <>.", "the <> in a video game.", "a sketch of a <>.", "a doodle of the <>.",
        "a origami <>.", "a low resolution photo of a <>.", "the toy <>.", "a rendition of the <>.",
        "a photo of the clean <>.", "a photo of a large <>.", "a rendition of a <>.", "a photo of a nice <>.",
        "a photo of a weird <>.", "a blurry photo of a <>.", "a cartoon <>.", "art of a <>.", "a sketch of the <>.",
        "a embroidered <>.", "a pixelated photo of a <>.", "itap of the <>.", "a jpeg corrupted photo of the <>.",
        "a good photo of a <>.", "a plushie <>.", "a photo of the nice <>.", "a photo of the small <>.",
        "a photo of the weird <>.", "the cartoon <>.", "art of the <>.", "a drawing of the <>.",
        "a photo of the large <>.", "a black and white photo of a <>.", "the plushie <>.", "a dark photo of a <>.",
        "itap of a <>.", "graffiti of the <>.", "a toy <>.", "itap of my <>.", "a photo of a cool <>.",
        "a photo of a small <>.", "a tattoo of the <>.",
    ))
TEMPLATE_SETS = {"imagenet": IMAGENET_TEMPLATES}
# The pipeline's scores of each kind: CLIP's softmax over the labels, SigLIP's sigmoid of each.
ACTIVATIONS = {"clip": "softmax", "siglip": "sigmoid", "siglip2": "sigmoid"}
_NEW_LAYERS = ("head", "head_norm", "preprocessing")


def zeroshot_classifier(weights, class_names, templates=None, *, name=None):
    """A classifier of `class_names` from an image-text checkpoint, with no training: image tower + a folded text head.

    Args:
        weights: str or `keras_vit.ImageTextModel`. A CLIP, SigLIP or SigLIP 2 two-tower
            checkpoint (what `ImageTextModel(weights=)` takes), or one already loaded.
        class_names: sequence of str. The labels, each put into the templates; distinct and
            non-empty. CLIP's softmax needs two or more (one label would always score 1.0).
        templates: None, str or sequence of str. Prompts with "{}" where the label goes:
            None for transformers' pipeline's "This is a photo of {}.", "imagenet" for open_clip's
            80-prompt ImageNet ensemble, or your own list. Defaults to None.
        name: str or None. The model's name. Defaults to "zeroshot_<kind>".

    Returns:
        A `VisionTransformer` taking [0, 255] pixels (batch, H, W, 3) and returning per-class
        probabilities (softmax for CLIP, sigmoid for SigLIP and SigLIP 2); its `vit_config`
        keeps `class_names` and the checkpoint's `image_processor`.

    Raises:
        ValueError: bad labels or templates (naming them), or a checkpoint whose pixel scaling
            is none of `keras_vit.configs.SCALINGS`.

    Example:

    >>> zeroshot_classifier("clip-folder", ["cat", "dog"], templates="imagenet")  # doctest: +SKIP
    """
    from keras_vit.text.image_text_model import ImageTextModel

    pair = weights if isinstance(weights, ImageTextModel) else ImageTextModel(weights=weights)
    activation = ACTIVATIONS[pair.kind]
    names = check_class_names(class_names, activation)
    kernel, bias = zeroshot_head(pair, names, templates)
    tower = _image_tower(pair)
    model = _build(tower, pair, names, activation, name or f"zeroshot_{pair.kind}")
    model.get_layer("head").set_weights([kernel, bias])
    return model


def zeroshot_head(pair, class_names, templates=None):
    """(kernel (d, classes), bias (classes,)) float32 of the head folded from `class_names`, on unit image embeddings.

    The kernel is the labels' unit text embeddings (`class_embeddings`) times the stored logit
    scale; the bias is SigLIP's stored logit bias (0 for CLIP): the head's outputs are
    transformers' `logits_per_image`.

    Args:
        pair: `keras_vit.ImageTextModel`.
        class_names: sequence of str. Checked as `check_class_names` does.
        templates: None, str or sequence of str. As `zeroshot_classifier` takes them. Defaults to None.
    """
    names = check_class_names(class_names, ACTIVATIONS[pair.kind])
    kernel = pair.logit_scale * class_embeddings(pair, names, _check_templates(templates)).T
    return kernel.astype("float32"), np.full(len(names), pair.logit_bias or 0.0, "float32")


def class_embeddings(pair, class_names, templates):
    """(classes, d) unit text embeddings of each label: its templates' normalised embeddings averaged, normalised again.

    Args:
        pair: `keras_vit.ImageTextModel`.
        class_names: sequence of str.
        templates: sequence of str, each with "{}".
    """
    texts = [template.format(label) for label in class_names for template in templates]
    embedded = pair.encode_texts(texts).reshape(len(class_names), len(templates), -1).astype("float64")
    mean = embedded.mean(axis=1)
    return (mean / np.linalg.norm(mean, axis=-1, keepdims=True)).astype("float32")


def check_class_names(class_names, activation=None):
    """`class_names` as a list, checked (one-line, distinct, non-empty; two or more under "softmax"); ValueError naming it.

    Example:

    >>> check_class_names(("cat", "dog"), "softmax")
    ['cat', 'dog']
    """
    if isinstance(class_names, str) or class_names is None:
        raise ValueError(f"Invalid class_names={class_names!r}: expected a list of label names, e.g. ['cat', 'dog'] "
                         "(keras-vit zeroshot: --labels 'cat,dog').")
    names = [str(label) if isinstance(label, str) else label for label in class_names]
    bad = [label for label in names if not isinstance(label, str) or not label.strip() or "\n" in label]
    if bad:
        raise ValueError(f"Invalid class_names={list(class_names)!r}: {bad[0]!r} is no label; expected non-empty "
                         "one-line strings.")
    repeated = sorted({label for label in names if names.count(label) > 1})
    if repeated:
        raise ValueError(f"Invalid class_names={names!r}: {repeated} appear more than once; each label once.")
    if not names:
        raise ValueError("Invalid class_names=[]: expected at least one label.")
    if activation == "softmax" and len(names) < 2:
        raise ValueError(f"Invalid class_names={names!r}: CLIP scores labels by softmax over them, so a single label "
                         "always scores 1.0; pass two or more (e.g. add a contrasting label).")
    return names


def _check_templates(templates):
    if templates is None:
        return (DEFAULT_TEMPLATE,)
    if isinstance(templates, str):
        if templates in TEMPLATE_SETS:
            return TEMPLATE_SETS[templates]
        if "{}" not in templates:
            raise ValueError(f"Invalid templates={templates!r}: expected one of {sorted(TEMPLATE_SETS)}, a template "
                             "with '{}' where the label goes, or a list of them.")
        templates = [templates]
    templates = list(templates)
    bad = [template for template in templates if not isinstance(template, str) or template.count("{}") != 1]
    if not templates or bad:
        raise ValueError(f"Invalid templates={templates!r}: expected prompts each with one '{{}}' where the label goes"
                         + (f"; {bad[0]!r} is not." if bad else "; the list is empty."))
    return tuple(templates)


def _image_tower(pair):
    """The image tower on images of one size: the pair's own, or its NaFlex weights at their grid's square."""
    if not pair.naflex:
        return pair.image_encoder
    from keras_vit.models.vit import ViT

    config = pair.image_encoder.vit_config
    side = config["grid_size"][0] * config["patch_size"]
    return ViT(weights=pair.path, include_top=False, naflex=False, image_size=(side, config["grid_size"][1] * config["patch_size"]))


def _build(tower, pair, names, activation, name):
    """The classifier's VisionTransformer: the tower's config with the pixel scaling, a unit-norm and a head; its weights."""
    from keras_vit.models.vit import build, resolve_config
    from keras_vit.weights.preprocessing import HF_PREPROCESSOR_FILE, HF_PROCESSOR_FILE

    config = tower.vit_config
    record = pair.preprocessing
    if record is None or record.scaling is None:
        stated = (f"it has no {HF_PREPROCESSOR_FILE} or {HF_PROCESSOR_FILE}, so states no pixel mean and std"
                  if record is None else f"{record.source} states mean={list(record.mean)}, std={list(record.std)}")
        raise ValueError(f"Invalid weights={pair.path!r}: {stated}, which is none of keras_vit's pixel scalings "
                         f"{sorted(configs.SCALINGS)}; the classifier scales pixels inside.")
    arguments = {field: config[field] for field in configs.ARCHITECTURE_FIELDS}
    arguments.update(
        image_size=config["image_size"], include_top=True, num_classes=len(names),
        classifier_activation=activation, preprocessing=record.scaling, interpolation=config["interpolation"],
        name=name, image_processor=config.get("image_processor"), head_norm="l2", class_names=list(names),
        fused_attention=config.get("fused_attention", False))
    model = build(resolve_config(None, None, **arguments))
    for layer in model.layers:
        if layer.name in _NEW_LAYERS or not layer.weights:
            continue
        layer.set_weights(tower.get_layer(layer.name).get_weights())
    return model
