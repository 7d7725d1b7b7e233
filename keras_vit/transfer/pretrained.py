"""`load_pretrained`: the one loader of a pre-trained backbone, as a feature model or with a new head.

It reads a checkpoint once (`keras_vit.weights.Checkpoint`) or a `.keras` file saved by
keras_vit, decides the pixel scaling and image size (each with the reason, never a silent
guess), builds the model with the scaling inside (it takes raw [0, 255] pixels) and says what
of the source was left out (`Pretrained`).

Example:

>>> import os, tempfile, keras_vit
>>> path = os.path.join(tempfile.mkdtemp(), "tiny.npz")
>>> keras_vit.weights.save_npz(keras_vit.ViT("tiny", num_classes=10), path)
>>> model, info = load_pretrained(path, scaling="symmetric")
>>> model.output_shape, info.kind, info.image_size, info.dropped
((None, 32), 'vit_jax', (32, 32), ('head (10 classes)',))
"""

from __future__ import annotations

import dataclasses
import os

import keras

from keras_vit import _keras_file, configs
from keras_vit._validation import check_choice, check_positive_int, plain
from keras_vit.models import vit
from keras_vit.weights import CHECKPOINTS, Checkpoint, resample_position_embedding

# The file of a checkpoint folder that holds a keras_vit model (`keras-vit pretrain --method dino` writes one).
SAVED_MODEL_FILE = "model.keras"
# The layers of a model's classification head(s): a new head replaces them, features stop before them.
_HEAD_LAYERS = ("head", "head_dist", "head_average", "head_activation")


@dataclasses.dataclass(frozen=True)
class Pretrained:
    """What `load_pretrained` built, and why.

    Args:
        spec: str. The checkpoint or model as the user gave it.
        source: str. Where it came from: the file or folder read, or the checkpoint's own
            `source` (a hub id and revision) where it states one.
        kind: str. "keras" (a saved .keras model) or the checkpoint layout ("vit_jax", "timm", "hf").
        scaling: str. Key of `keras_vit.configs.SCALINGS` inside the model (layer `preprocessing`).
        scaling_reason: str. "given", "from <file>", "keras_vit.weights.CHECKPOINTS[...]" or "the
            .keras model's own".
        image_size: (int, int). (height, width) the model takes.
        image_size_reason: str. "given", "from <file>", "the checkpoint's" or "the .keras model's
            own", with the position embedding's resampling when there is one.
        dropped: tuple of str. What of the source was not kept, e.g. ("head (1000 classes)",).
        num_features: int. Width of the pooled features (the new head's input).
        pooling: str. How the model pools its tokens ("token", "gap", "map", ...), as the source has it.
        register_tokens: int. The source's register tokens (DINOv2's "with registers"), 0 for none.
    """

    spec: str
    source: str
    kind: str
    scaling: str
    scaling_reason: str
    image_size: tuple
    image_size_reason: str
    dropped: tuple
    num_features: int
    pooling: str = ""
    register_tokens: int = 0


def load_pretrained(spec, *, num_classes=None, image_size=None, patch_size=None, scaling=None,
                    classifier_activation="softmax", drop_path_rate=0.0, dropout_rate=0.0, head_norm=None):
    """Loads a pre-trained backbone as a feature model, or with a new zero-initialised head.

    Pixel scaling, first found wins: `scaling`; the checkpoint's own statement (its
    preprocessing record's `scaling`, or its mean/std when they are those of a SCALINGS key);
    for a name of `keras_vit.weights.CHECKPOINTS`, its `preprocessing`; for a `.keras` model,
    its own `preprocessing` layer. A source that states none is refused. Image size: `image_size`
    given (a learned position embedding is resampled), else the size the checkpoint's
    preprocessing states, else the checkpoint's grid times its patch. Channels are the
    checkpoint's: the data pipeline repeats grey images to 3. SigLIP 2 NaFlex weights load as a
    model on images of that one size (`naflex=False`: its position grid resampled once, as NaFlex
    resamples it per image), since a probe's batches share one size.

    Args:
        spec: str or path-like. What `keras_vit.ViT(weights=)` takes (a `.npz`, a safetensors
            file, a Hugging Face or timm folder, a name of `keras_vit.weights.CHECKPOINTS`, a hub
            id where `keras_vit.weights.Checkpoint` reads them), a `.keras` file saved by keras_vit, or
            a folder holding one as `model.keras` (and no checkpoint's config.json).
        num_classes: int or None. None: a feature model, returning the pooled features (the
            checkpoint's pooling, and its pre-logits layer if it has one, as the paper's few-shot
            evaluation reads them). An int: a new zero-initialised head of that many classes;
            the source's head and pre-logits layer are dropped, as the paper's fine-tuning does.
            Defaults to None.
        image_size: int, (int, int) or None. Input height and width. Defaults to None (see above).
        patch_size: int or None. A patch side other than the checkpoint's: its patch kernel is
            resized with FlexiViT's pseudo-inverse (`keras_vit.weights.resize_patch_kernel`) and
            the position embedding resampled to the new grid, at the same image size. None (or
            a `.keras` model) keeps the source's patch. Defaults to None.
        scaling: str or None. A key of `keras_vit.configs.SCALINGS`. Defaults to None (see above).
        classifier_activation: str or None. Activation of the new head; None gives logits.
            Defaults to "softmax".
        drop_path_rate: float. Stochastic depth of the blocks, for fine-tuning. Defaults to 0.
        dropout_rate: float. Dropout in the blocks, for fine-tuning. Defaults to 0.
        head_norm: None or "l2". "l2": the new head reads the unit features (a zero-shot head's
            input, `keras_vit.transfer.zeroshot_head`); needs `num_classes`. Defaults to None.

    Returns:
        (keras.Model, Pretrained). The model takes raw [0, 255] pixels (batch, height, width,
        channels).

    Example:

    >>> import os, tempfile, keras_vit
    >>> path = os.path.join(tempfile.mkdtemp(), "vit.keras")
    >>> keras_vit.ViT("tiny", num_classes=10, preprocessing="unit").save(path)
    >>> model, info = load_pretrained(path, num_classes=3)
    >>> model.output_shape, info.scaling, info.scaling_reason
    ((None, 3), 'unit', "the .keras model's own")
    >>> load_pretrained(os.path.join(os.path.dirname(path), "missing.npz"))
    Traceback (most recent call last):
    ...
    FileNotFoundError: Checkpoint file not found: '...missing.npz'.
    """
    if not isinstance(spec, (str, os.PathLike)):
        raise ValueError(f"Invalid spec={spec!r}. Expected a checkpoint file, folder or name, or a .keras file.")
    spec = os.fspath(spec)
    if num_classes is not None:
        check_positive_int("num_classes", plain(num_classes))
        num_classes = int(num_classes)
    image_size = _check_image_size(image_size)
    if patch_size is not None:
        check_positive_int("patch_size", plain(patch_size))
        patch_size = int(patch_size)
    if scaling is not None:
        check_choice("scaling", scaling, tuple(configs.SCALINGS))
    build_args = dict(classifier_activation=classifier_activation, drop_path_rate=drop_path_rate,
                      dropout_rate=dropout_rate)
    if head_norm is not None:
        check_choice("head_norm", head_norm, ("l2",))
        if num_classes is None:
            raise ValueError(f"Invalid head_norm={head_norm!r} without num_classes: it normalises a new head's input.")
        build_args["head_norm"] = head_norm
    saved = os.path.join(spec, SAVED_MODEL_FILE)
    if os.path.isdir(spec) and os.path.isfile(saved) and not os.path.exists(os.path.join(spec, "config.json")):
        spec = saved  # a folder holding a keras_vit model (`keras-vit pretrain --method dino`'s)
    if spec.endswith(".keras"):
        model, info = _from_keras_file(spec, num_classes, image_size, scaling, build_args)
        if patch_size is not None and patch_size != model.vit_config["patch_size"]:
            raise ValueError(
                f"Contradicting patch_size={patch_size} and spec={spec!r}: a .keras model keeps its own patch "
                f"({model.vit_config['patch_size']}); the patch kernel is resized for checkpoint files only. "
                "Leave patch_size out."
            )
    else:
        model, info = _from_checkpoint(spec, num_classes, image_size, patch_size, scaling, build_args)
    features = _pooled_features(model, spec, num_classes)
    return model, dataclasses.replace(info, num_features=features)


def _check_image_size(image_size):
    """(height, width) from an int or a pair, or None; ValueError naming image_size otherwise."""
    if image_size is None:
        return None
    size = plain(image_size)
    if isinstance(size, int) and not isinstance(size, bool):
        size = (size, size)
    if not (isinstance(size, (tuple, list)) and len(size) == 2
            and all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in size)):
        raise ValueError(f"Invalid image_size={image_size!r}. Expected an integer >= 1 or (height, width).")
    return tuple(size)


def _from_checkpoint(spec, num_classes, image_size, patch_size, scaling, build_args):
    checkpoint = Checkpoint(spec)  # read once: the builder takes the object
    name = spec if spec in CHECKPOINTS and not os.path.exists(spec) else None
    record = checkpoint.preprocessing
    arch = checkpoint.architecture
    scaling, scaling_reason = _checkpoint_scaling(spec, scaling, record)
    grid = arch.get("grid_size")
    if image_size is not None:
        size_reason = "given"
    elif record is not None and record.image_size is not None:
        image_size, size_reason = tuple(record.image_size), f"from {record.source}"
    elif grid is not None:
        image_size, size_reason = None, "the checkpoint's"  # the builder's "auto": grid x patch
    else:
        raise ValueError(
            f"Checkpoint {spec!r} states no image size (it stores no position embedding grid): pass "
            "image_size= (keras-vit: --image-size)."
        )
    arguments = dict(
        weights=checkpoint, include_top=False, preprocessing=scaling,
        image_size=image_size if image_size is not None else "auto",
    )
    if arch.get("naflex"):
        # The probes and fine-tuning read batches of one image size: NaFlex weights as a model on
        # images, its position grid resampled once at load as NaFlex resamples it per image.
        arguments["naflex"] = False
        size_reason += " (NaFlex weights at one image size: naflex=False)"
    if num_classes is not None:
        arguments["representation_size"] = None
    resized = patch_size is not None and patch_size != arch.get("patch_size")
    if resized:
        arguments["patch_size"] = patch_size  # the builder resizes the kernel (FlexiViT) and keeps the image size
    if arch.get("num_heads") is None and name is not None:
        arguments["variant"] = CHECKPOINTS[name].variant  # timm's fused qkv hides the head count
    model = vit.ViT(**arguments, **({} if num_classes is not None else build_args))
    if num_classes is not None:
        # The loader would load a head of the checkpoint's own size: the backbone is loaded
        # alone, then copied into the model with the new head.
        model = _rebuild(model, model.vit_config, num_classes, model.vit_config["image_size"], scaling, build_args)
    built = model.vit_config
    size = tuple(built["image_size"])
    new_grid = tuple(model.get_layer("embedding").grid_size or ())
    if resized:
        size_reason += (f" (patch kernel resized from {arch['patch_size']} to {patch_size} px by FlexiViT's "
                        "pseudo-inverse)")
    if grid is not None and built["position_embedding"] == "learned" and tuple(grid) != new_grid:
        size_reason += f" (position embedding resampled from {grid[0]}x{grid[1]} to {new_grid[0]}x{new_grid[1]})"
    dropped = []
    if arch.get("num_classes") is not None:
        dropped.append(f"head ({arch['num_classes']} classes)")
        if arch.get("distillation_token"):
            dropped.append(f"head_dist ({arch['num_classes']} classes)")
    if num_classes is not None and arch.get("representation_size") is not None:
        dropped.append(f"pre_logits ({arch['representation_size']})")
    info = Pretrained(
        spec=spec, source=checkpoint.source, kind=checkpoint.layout,
        scaling=scaling, scaling_reason=scaling_reason, image_size=size, image_size_reason=size_reason,
        dropped=tuple(dropped), num_features=0, **_pooling_facts(built),
    )
    return model, info


def _checkpoint_scaling(spec, scaling, record):
    """(scaling, reason) of a checkpoint: given, or what its own files (or its preset entry) state."""
    if scaling is not None:
        return scaling, "given"
    if record is None:
        raise ValueError(
            f"Checkpoint {spec!r} states no pixel scaling: pass scaling= (keras-vit: --scaling), one of "
            f"{', '.join(configs.SCALINGS)}, as its authors trained it."
        )
    if record.scaling is None:
        raise ValueError(
            f"Checkpoint {spec!r} states pixel mean={list(record.mean)} and std={list(record.std)} ({record.source}), "
            f"which are no scaling keras_vit has ({', '.join(configs.SCALINGS)}): pass scaling= "
            "(keras-vit: --scaling) to choose one."
        )
    return record.scaling, f"from {record.source}"


def _from_keras_file(spec, num_classes, image_size, scaling, build_args):
    if not os.path.isfile(spec):
        raise FileNotFoundError(f"Model file not found: spec={spec!r}.")
    source = _keras_file.load(spec, "spec", compile=False)
    config = getattr(source, "vit_config", None)
    if config is None:
        raise ValueError(
            f"Invalid spec={spec!r}: it is no keras_vit Vision Transformer (a .keras model without vit_config), "
            "so it has no backbone features to load. Expected a model saved by keras_vit (e.g. keras-vit train)."
        )
    own_scaling = config["preprocessing"]
    if scaling is not None:
        scaling_reason = "given"
    elif own_scaling is not None:
        scaling, scaling_reason = own_scaling, "the .keras model's own"
    else:
        raise ValueError(
            f"Model {spec!r} states no pixel scaling (it has no preprocessing layer): pass scaling= "
            f"(keras-vit: --scaling), one of {', '.join(configs.SCALINGS)}, as it was trained."
        )
    if config["pooling"] is None:
        raise ValueError(
            f"Invalid spec={spec!r}: the model was built with pooling=None (it returns every token), so it "
            "gives no pooled features to probe or to put a head on. Expected a model with pooling='token', "
            "'gap', 'map' or another pooling."
        )
    encoder = source.get_layer("embedding")
    pixels = config["patch_size"] * configs.stem_stride(config["stem"])  # pixels per token side
    own_size = tuple(source.inputs[0].shape[1:3])
    if None in own_size:
        own_size = tuple(g * pixels for g in encoder.grid_size)
    if image_size is None:
        image_size, size_reason = own_size, "the .keras model's own"
    else:
        size_reason = "given"
    old_grid = tuple(encoder.grid_size) if encoder.position_embedding == "learned" else None
    dropped = []
    if config["include_top"]:
        dropped.append(f"head ({config['num_classes']} classes)")
        if config["distillation_token"]:
            dropped.append(f"head_dist ({config['num_classes']} classes)")
    if num_classes is None and scaling == own_scaling and image_size == tuple(source.inputs[0].shape[1:3]):
        # Nothing to change but the head: the model's own graph, up to the head's input.
        model = keras.Model(source.inputs[0], source.get_layer("head").input, name=f"{source.name}_features") \
            if config["include_top"] else source
    else:
        if num_classes is not None and config["representation_size"] is not None:
            dropped.append(f"pre_logits ({config['representation_size']})")
        model = _rebuild(source, config, num_classes, image_size, scaling, build_args)
    new_grid = tuple(model.get_layer("embedding").grid_size or ()) if old_grid else None
    if old_grid and new_grid != old_grid:
        size_reason += (f" (position embedding resampled from {old_grid[0]}x{old_grid[1]} to "
                        f"{new_grid[0]}x{new_grid[1]})")
    info = Pretrained(
        spec=spec, source=os.path.abspath(spec), kind="keras", scaling=scaling, scaling_reason=scaling_reason,
        image_size=tuple(image_size), image_size_reason=size_reason, dropped=tuple(dropped), num_features=0,
        **_pooling_facts(config),
    )
    return model, info


def _pooling_facts(config):
    """The `Pretrained` fields of how a model's config pools its tokens: pooling and register tokens."""
    return {"pooling": config["pooling"], "register_tokens": int(config.get("num_register_tokens") or 0)}


def _rebuild(source, config, num_classes, image_size, scaling, build_args):
    """A fresh model from `config` with the new head, size and scaling; every other weight copied by layer name."""
    backbone = source.get_layer(config["backbone"]) if config.get("backbone") is not None else None
    arguments = {field: config[field] for field in configs.ARCHITECTURE_FIELDS}
    arguments.update(
        image_size=image_size, include_top=num_classes is not None, preprocessing=scaling,
        attention_dropout_rate=0.0, fused_attention=config.get("fused_attention", False),
        interpolation=config["interpolation"], name=config["name"], image_processor=config.get("image_processor"),
        **build_args,
    )
    if num_classes is not None:
        arguments.update(num_classes=num_classes, representation_size=None)
    model = vit.build(vit.resolve_config(None, None, backbone=backbone, **arguments), backbone=backbone)
    skipped = set(_HEAD_LAYERS) | {"preprocessing"}
    for layer in model.layers:
        if layer.name in skipped or not layer.weights or layer is backbone:
            continue
        old = source.get_layer(layer.name)
        for new_variable, old_variable in zip(layer.weights, old.weights):
            value = keras.ops.convert_to_numpy(old_variable)
            if tuple(new_variable.shape) != value.shape and new_variable is getattr(layer, "pos_embedding", None):
                old_encoder = source.get_layer("embedding")
                value = resample_position_embedding(
                    value, tuple(layer.grid_size), tuple(old_encoder.grid_size),
                    old_encoder.num_position_prefix_tokens, config["interpolation"])
            new_variable.assign(value)
    return model


def _pooled_features(model, spec, num_classes):
    """The width of the features the head reads; refuses a model that gives no pooled features."""
    if num_classes is not None:
        features = model.get_layer("head").input.shape
    else:
        features = model.output_shape if not isinstance(model.output_shape, list) else None
    if features is None or len(features) != 2 or features[-1] is None:
        raise ValueError(
            f"Invalid spec={spec!r}: the model gives no pooled features (its output has shape {features}, "
            "e.g. every token of a model built with pooling=None); a probe needs one vector per image. "
            "Rebuild it with pooling='token', 'gap' or 'map'."
        )
    return int(features[-1])
