"""What model a training run builds, as data: the architecture it resolves, the `ModelSpec` and `build_spec`.

The one place that decides a training run's architecture: `resolve_architecture` settles the
default model (`DEFAULT_MODEL`, its patch following the image size), a variant, the caller's
overrides and the fields a budget's rules chose (`keras_vit.training.budget`); the training plan
(`keras_vit.training.plan.resolve`) puts it with the input and the other choices into one
`ModelSpec`, checked where it is made, and `build_spec` builds it. The spec is plain data (no
Keras objects): a backbone, which is one, is passed to `build_spec` beside it.

Example:

>>> spec = ModelSpec(variant=None, architecture={"patch_size": 7, "hidden_size": 32, "num_layers": 1,
...                  "num_heads": 2, "mlp_dim": 64}, image_size=28, channels=1, tokenizer="shifted")
>>> model = build_spec(spec, num_classes=10)
>>> model.input_shape, model.vit_config["patch_size"], model.vit_config["backbone"]
((None, 28, 28, 1), 1, 'shifted_patches')
"""

from __future__ import annotations

import dataclasses

from keras_vit import _validation, choices, configs

# The default model of `keras-vit train`: a small ViT for 28x28 images that trains in minutes
# on a CPU. Patch 7 gives 16 tokens (+1 class token); chosen by measured throughput and accuracy
# (benchmarks/RESULTS.md).
DEFAULT_MODEL = {"patch_size": 7, "hidden_size": 128, "num_layers": 6, "num_heads": 4, "mlp_dim": 256}
# The default model's token grid (DEFAULT_MODEL's patch 7 on 28 px Fashion-MNIST, where its speed
# and accuracy were measured): other image sizes get the patch that keeps about this grid.
DEFAULT_GRID = 4
# What a spec's choices take: the resolved values of the train options ("auto" is the plan's to
# resolve, not the builder's).
TOKENIZERS, POOLINGS, ATTENTION_INITS = (tuple(value for value in values if value != "auto")
                                         for values in (choices.TOKENIZERS, choices.TRAIN_POOLINGS, choices.ATTENTION_INITS))


def default_patch_size(image_size: int) -> tuple[int, str]:
    """The default model's patch for square images of side `image_size`, and why, for the header.

    The divisor of `image_size` closest to image_size / DEFAULT_GRID (ties: the smaller patch),
    so that any square size trains with about the token count the default was measured with.

    Example:

    >>> [default_patch_size(size)[0] for size in (28, 32, 48, 96, 224)]
    [7, 8, 12, 24, 56]
    >>> default_patch_size(32)[1]
    'chosen for 32 px images: a 4x4 grid of patches, as the default model has on 28 px'
    """
    _validation.check_positive_int("image_size", image_size)
    divisors = [p for p in range(1, image_size + 1) if image_size % p == 0]
    patch = min(divisors, key=lambda p: (abs(p - image_size / DEFAULT_GRID), p))
    grid = image_size // patch
    return patch, f"chosen for {image_size} px images: a {grid}x{grid} grid of patches, as the default model has on 28 px"


def resolve_image_size(given: int | None, variant: str | None, images_size,
                       images: str = "the training set") -> tuple[int, str]:
    """A training run's input side, and why, for the header: given, else the variant's, else the images' own.

    Args:
        given: int or None. The caller's side (`TrainConfig.image_size`).
        variant: str or None. A `keras_vit.configs.VARIANTS` name.
        images_size: (int, int) or None. The size all the training images share; None when they
            differ or it is unknown (`keras_vit.data.sources.Source.image_size`).
        images: str. How an error names the images, e.g. "dataset='photos/'". Defaults to "the training set".

    Example:

    >>> resolve_image_size(None, None, (28, 28)), resolve_image_size(None, "tiny", None)
    ((28, "the images' own (28x28)"), (32, "variant tiny's"))
    >>> resolve_image_size(None, None, (28, 32))
    Traceback (most recent call last):
    ...
    ValueError: The images of the training set are 28x32, not square: pass image_size (--image-size N) to choose the model's input side.
    """
    if given is not None:
        return int(given), "given"
    if variant is not None:
        return configs.get_variant(variant).image_size, f"variant {variant}'s"
    if images_size is None:
        raise ValueError(f"The images of {images} differ in size (or it is unknown): pass image_size "
                         "(--image-size N) to choose the model's input side.")
    if images_size[0] != images_size[1]:
        raise ValueError(f"The images of {images} are {images_size[0]}x{images_size[1]}, not square: pass image_size "
                         "(--image-size N) to choose the model's input side.")
    return int(images_size[0]), f"the images' own ({images_size[0]}x{images_size[1]})"


def resolve_architecture(variant: str | None, overrides: dict, image_size: int | None = None, *,
                         stem_stride: int | None = None, chosen: dict | None = None) -> tuple[dict, str]:
    """The core fields (`keras_vit.choices.MODEL_FIELDS`) of a training run's model, and why its patch.

    The variant's row, or `DEFAULT_MODEL` whose patch follows `image_size` (`default_patch_size`);
    behind the conv stem (`stem_stride`) the patch follows the stem's feature map and is counted
    in its cells. Then the fields a budget's rules chose (`chosen`), then the caller's `overrides`.

    Args:
        variant: str or None. A `keras_vit.configs.VARIANTS` name; None for `DEFAULT_MODEL`.
        overrides: dict. Fields the caller set (None values are unset).
        image_size: int or None. The model's input side; None keeps the default model's patch.
            Defaults to None.
        stem_stride: int or None. The conv stem's stride (`ModelSpec.stem_stride`); None without
            the stem. Defaults to None.
        chosen: dict or None. Fields a budget's rules chose. Defaults to None.

    Example:

    >>> resolve_architecture(None, {"num_layers": 2}, 32)
    ({'patch_size': 8, 'hidden_size': 128, 'num_layers': 2, 'num_heads': 4, 'mlp_dim': 256}, \
'chosen for 32 px images: a 4x4 grid of patches, as the default model has on 28 px')
    >>> resolve_architecture("tiny", {}, 32)[1]
    "variant tiny's"
    """
    base = DEFAULT_MODEL if variant is None else dataclasses.asdict(configs.get_variant(variant))
    arch = {key: base.get(key) for key in choices.MODEL_FIELDS}
    arch.update(chosen or {})
    given = {key: value for key, value in overrides.items() if value is not None}
    reason = "given" if "patch_size" in given else f"variant {variant}'s" if variant is not None else "the default model's"
    if variant is None and "patch_size" not in given and image_size is not None:
        if stem_stride is not None:
            cells = image_size // stem_stride
            arch["patch_size"], _ = default_patch_size(cells)
            grid = cells // arch["patch_size"]
            reason = f"cells of the conv stem's {cells}x{cells} map: a {grid}x{grid} grid"
        else:
            arch["patch_size"], reason = default_patch_size(image_size)
    arch.update(given)
    return arch, reason


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A ViT to build for training, every choice resolved.

    Args:
        variant: str or None. A `keras_vit.configs.VARIANTS` name; None for a model of
            `architecture` alone.
        architecture: dict. The core fields (`keras_vit.choices.MODEL_FIELDS`), resolved.
        image_size: int. Input height and width.
        channels: int. Input channels, 1 or 3.
        scaling: str. Pixel scaling inside the model. Defaults to "unit".
        stem: bool. The conv stem (`keras_vit.models.stems.conv_stem`) before the encoder.
            Defaults to False.
        tokenizer: str. "patches" (the paper's patch embedding) or "shifted"
            (`keras_vit.models.stems.shifted_patch_stem` of the patch size, the encoder reading its
            cells as 1x1 patches). Defaults to "patches".
        pooling: str. "token" or "gap". Defaults to "token".
        attention_init: str. "mimetic" (`keras_vit.models.mimetic`) or "random" (Keras'
            initializers). Defaults to "random".
        vit_args: dict. More `keras_vit.ViT` arguments, e.g. {"position_embedding": "sincos2d"};
            not those the spec sets itself (`SPEC_VIT_ARGS`). Defaults to {}.
        stem_args: dict. `keras_vit.models.stems.conv_stem` arguments (filters, strides) of the
            conv stem; only with `stem`. Defaults to {}.
    """

    variant: str | None
    architecture: dict
    image_size: int
    channels: int
    scaling: str = "unit"
    stem: bool = False
    tokenizer: str = "patches"
    pooling: str = "token"
    attention_init: str = "random"
    vit_args: dict = dataclasses.field(default_factory=dict)
    stem_args: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        _validation.check_choice("attention_init", self.attention_init, ATTENTION_INITS)
        _validation.check_choice("pooling", self.pooling, POOLINGS)
        _validation.check_choice("tokenizer", self.tokenizer, TOKENIZERS)
        if self.channels is None:
            raise ValueError("Missing channels: pass channels=1 or 3 (or set TrainConfig.channels); "
                             "`resolve` chooses them from the data (RunPlan.channels).")
        _validation.check_choice("channels", self.channels, choices.CHANNELS)
        check_tokens(self.stem, self.tokenizer, self.variant)
        check_model_arguments("vit_args", self.vit_args)
        check_model_arguments("stem_args", self.stem_args)
        if self.stem_args and not self.stem:
            raise ValueError(f"Invalid stem_args={self.stem_args!r} without the conv stem: pass stem='conv' "
                             "(--stem conv), or leave stem_args out.")

    @property
    def stem_stride(self) -> int | None:
        """The conv stem's stride (a feature-map cell per `stem_stride` pixels each way); None without it."""
        return conv_stem_stride(self.stem_args) if self.stem else None


def conv_stem_stride(stem_args: dict) -> int:
    """The stride of the conv stem built with `stem_args` (`keras_vit.models.stems.conv_stem` arguments).

    Example:

    >>> conv_stem_stride({}), conv_stem_stride({"filters": (32, 64), "strides": (2, 2)})
    (8, 4)
    """
    from keras_vit.models import stems

    return stems.stem_stride(stems.stem_arguments(stem_args)["strides"])


# `keras_vit.ViT` arguments a spec sets itself: `ModelSpec.vit_args` may not.
SPEC_VIT_ARGS = (*choices.MODEL_FIELDS, "variant", "backbone", "input_shape", "input_tensor", "num_classes", "classes",
                 "pooling", "preprocessing", "drop_path_rate", "weights", "image_size", "include_top")


def check_tokens(stem, tokenizer: str, variant: str | None, backbone: bool = False, *, name=None) -> None:
    """Refuses settings that would each make the model's tokens: the conv stem, shifted patches, a variant or a backbone.

    Both the config's check (`keras_vit.train_options.check_config`, before any data is read) and
    `ModelSpec` ask it.

    Args:
        stem: bool or str. The conv stem: True, or a `TrainConfig.stem` value ("conv" is the stem).
        tokenizer: str. "shifted" is shifted patches.
        variant: str or None. A variant's own patch embedding.
        backbone: bool. A backbone is given. Defaults to False.
        name: callable or None. How a field is spelled in messages (`keras_vit.train_options.flag_name`).
            Defaults to None (the field's own name).

    Example:

    >>> check_tokens("conv", "shifted", None)
    Traceback (most recent call last):
    ...
    ValueError: Contradicting stem='conv' and tokenizer='shifted': the conv stem makes the tokens. Pass stem='none' for shifted patches.
    """
    name = name or (lambda field: field)
    has_stem = stem is True or stem == "conv"
    if has_stem and tokenizer == "shifted":
        raise ValueError(f"Contradicting {name('stem')}={stem!r} and {name('tokenizer')}='shifted': the conv stem makes "
                         f"the tokens. Pass {name('stem')}='none' for shifted patches.")
    for field, value, on, what in (("stem", stem, has_stem, "the conv stem"),
                                   ("tokenizer", tokenizer, tokenizer == "shifted", "shifted patches")):
        if on and (backbone or variant is not None):
            other = "a backbone" if backbone else f"{name('variant')}={variant!r}"
            raise ValueError(f"Contradicting {name(field)}={value!r} and {other}: only the default model is built "
                             f"with {what}.")


def check_model_arguments(name: str, given) -> None:
    """Refuses `given` (`ModelSpec.vit_args` or `.stem_args`, by `name`) unless a dict of arguments it may set.

    Example:

    >>> check_model_arguments("stem_args", {"filters": (16, 32), "strides": (2, 2)})
    >>> check_model_arguments("vit_args", {"num_layers": 2})
    Traceback (most recent call last):
    ...
    ValueError: Invalid vit_args keys ['num_layers']: the spec sets them (num_layers=).
    """
    import inspect

    from keras_vit.models.stems import conv_stem
    from keras_vit.models.vit import ViT

    if not isinstance(given, dict):
        raise ValueError(f"Invalid {name}={given!r}. Expected a dict of arguments.")
    function, own = (ViT, SPEC_VIT_ARGS) if name == "vit_args" else (conv_stem, ("channels", "name"))
    taken = sorted(set(given) & set(own))
    if taken:
        raise ValueError(f"Invalid {name} keys {taken}: the spec sets them ({', '.join(k + '=' for k in taken)}).")
    unknown = sorted(set(given) - set(inspect.signature(function).parameters))
    if unknown:
        raise ValueError(f"Invalid {name} keys {unknown}. Expected arguments of {function.__name__}.")


def build_spec(spec: ModelSpec, num_classes: int | None, *, drop_path_rate: float = 0.0, backbone=None, seed: int = 0):
    """Builds the ViT of `spec` with a head of `num_classes`, or its pooled features without one.

    Args:
        spec: `ModelSpec`. The model.
        num_classes: int or None. Width of the head; None for a feature model (include_top=False).
        drop_path_rate: float. Stochastic depth of the last block. Defaults to 0.
        backbone: Keras model or layer or None. A stem for a hybrid ViT (`keras_vit.ViT(backbone=)`);
            not with the conv stem or shifted patches, which are the spec's own. Defaults to None.
        seed: int. Seed of mimetic initialization. Defaults to 0.
    """
    from keras_vit.models import mimetic_initialization, stems
    from keras_vit.models.vit import ViT

    arch = dict(spec.architecture)
    if backbone is not None and (spec.stem or spec.tokenizer == "shifted"):
        raise ValueError("Invalid backbone= with the conv stem or shifted patches: they make the tokens themselves.")
    if spec.stem:
        backbone = stems.conv_stem(channels=spec.channels, **spec.stem_args)
    elif spec.tokenizer == "shifted":
        backbone = stems.shifted_patch_stem(arch["patch_size"], channels=spec.channels)
        arch["patch_size"] = 1
    model = ViT(
        spec.variant,
        **arch,
        **spec.vit_args,
        backbone=backbone,
        input_shape=(spec.image_size, spec.image_size, spec.channels),
        num_classes=num_classes,
        include_top=num_classes is not None,
        pooling=spec.pooling,
        preprocessing=spec.scaling,
        drop_path_rate=drop_path_rate,
    )
    if spec.attention_init == "mimetic":
        mimetic_initialization(model, seed=seed)
    return model
