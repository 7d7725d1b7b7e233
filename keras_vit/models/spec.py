"""What model a training run builds, as data: a `ModelSpec` the plan resolves and `build_spec` builds.

The training plan (`keras_vit.training.plan.resolve`) settles the architecture, the input and
the choices of a budget's rules into one spec; this module checks it once, where it is made, and
builds it. The spec is plain data (no Keras objects): a backbone, which is one, is passed to
`build_spec` beside it.

Example:

>>> spec = ModelSpec(variant=None, architecture={"patch_size": 7, "hidden_size": 32, "num_layers": 1,
...                  "num_heads": 2, "mlp_dim": 64}, image_size=28, channels=1, tokenizer="shifted")
>>> model = build_spec(spec, num_classes=10)
>>> model.input_shape, model.vit_config["patch_size"], model.vit_config["backbone"]
((None, 28, 28, 1), 1, 'shifted_patches')
"""

from __future__ import annotations

import dataclasses

from keras_vit import _validation, choices

# What a spec's choices take: the resolved values of the train options ("auto" is the plan's to
# resolve, not the builder's).
TOKENIZERS, POOLINGS, ATTENTION_INITS = (tuple(value for value in values if value != "auto")
                                         for values in (choices.TOKENIZERS, choices.TRAIN_POOLINGS, choices.ATTENTION_INITS))


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

    def __post_init__(self):
        _validation.check_choice("attention_init", self.attention_init, ATTENTION_INITS)
        _validation.check_choice("pooling", self.pooling, POOLINGS)
        _validation.check_choice("tokenizer", self.tokenizer, TOKENIZERS)
        if self.channels is None:
            raise ValueError("Missing channels: pass channels=1 or 3 (or set TrainConfig.channels); "
                             "`resolve` chooses them from the data (RunPlan.channels).")
        _validation.check_choice("channels", self.channels, choices.CHANNELS)
        if self.stem and self.tokenizer == "shifted":
            raise ValueError("Contradicting stem=True and tokenizer='shifted': the conv stem makes the tokens.")
        if self.tokenizer == "shifted" and self.variant is not None:
            raise ValueError("Invalid tokenizer='shifted' with a variant: only the default model is built with "
                             "shifted patches.")


def build_spec(spec: ModelSpec, num_classes: int, *, drop_path_rate: float = 0.0, backbone=None, seed: int = 0):
    """Builds the ViT of `spec` with a head of `num_classes`.

    Args:
        spec: `ModelSpec`. The model.
        num_classes: int. Width of the head.
        drop_path_rate: float. Stochastic depth of the last block. Defaults to 0.
        backbone: Keras model or layer or None. A stem for a hybrid ViT (`keras_vit.ViT(backbone=)`);
            not with the conv stem or shifted patches, which are the spec's own. Defaults to None.
        seed: int. Seed of mimetic initialization. Defaults to 0.
    """
    # Through the package, as the budget harness's probes set `keras_vit.models.ViT` arguments there.
    from keras_vit.models import ViT, mimetic_initialization, stems

    arch = dict(spec.architecture)
    if backbone is not None and (spec.stem or spec.tokenizer == "shifted"):
        raise ValueError("Invalid backbone= with the conv stem or shifted patches: they make the tokens themselves.")
    if spec.stem:
        backbone = stems.conv_stem(channels=spec.channels)
    elif spec.tokenizer == "shifted":
        backbone = stems.shifted_patch_stem(arch["patch_size"], channels=spec.channels)
        arch["patch_size"] = 1
    model = ViT(
        spec.variant,
        **arch,
        backbone=backbone,
        input_shape=(spec.image_size, spec.image_size, spec.channels),
        num_classes=num_classes,
        pooling=spec.pooling,
        preprocessing=spec.scaling,
        drop_path_rate=drop_path_rate,
    )
    if spec.attention_init == "mimetic":
        mimetic_initialization(model, seed=seed)
    return model
