"""What a time budget buys: every setting a budgeted run adapts, read from one set of rules.

A run with a budget (`--budget-minutes N`) and no explicit choice of its own trains the model
and recipe the rules below give for its budget and data. The one input that measures the
budget against the data is the training time per image, `budget_seconds / num_train` (ms per
image): 8 minutes for 45,000 CIFAR-10 images is 10.7 ms, 10 minutes for 60,000 Fashion-MNIST
images 10 ms. Explicit flags always win: a given model (variant, size flags or backbone),
`stem`, tokenizer, recipe, augmentation, attention init, pooling or epoch count is kept as given.

| setting | rule | why (benchmarks/RESULTS.md, "Accuracy in a time budget") |
|---|---|---|
| epochs | as many as the budget buys (the cosine is fitted to it) | a fixed count stops early or runs out |
| model | images <= 64 px: the conv stem + ViT (`STEM_MODEL`), else the default ViT | at 28-32 px the stem + 2 blocks trains 1.7x the images per second of the default ViT's 4x4 grid and 7x those of a patch-4 ViT; CIFAR-10 in 8 min: 73.0% against the anchor's 53.3%; the stem's fourth convolution (`stems.DEFAULT_FILTERS`): CIFAR-10 78.70% against 75.88%, Fashion-MNIST 92.67% against 92.33% |
| image size | with the stem, resized up to a multiple of its stride (28 -> 32) | the stem's map must tile the image; zero padding instead of the resize: Fashion-MNIST 91.92% against 92.13% |
| blocks (with the stem) | < 4 ms per image: 1; < 25: 2; else 4 | a short budget buys passes over the data, not depth |
| blocks (plain ViT) | 4-25 ms per image: 4 instead of the default model's 6; elsewhere 6 (not measured there) | Fashion-MNIST, 10 min (mimetic init): 89.39% in 19 epochs against 89.04% in 13; 3 blocks: 89.26% in 23 |
| augmentation | colour images: flips + shifts of up to 1/16 of the side ("shift"); single-channel images: flips ("flip") | CIFAR-10, 8 min: shift 72.8%, flip 69.7% (over-fitting), "light" crops 65.7% (under-fitting); Fashion-MNIST (centred grey objects), 10 min: flip 91.94%, shift 91.20% |
| recipe | "compact" | tuned for budgets of minutes |
| peak learning rate | 4-25 ms per image: twice the recipe's; elsewhere the recipe's (not measured there) | Fashion-MNIST, 10 min: conv stem 92.13% against 91.94%, plain ViT 88.29% against 87.87% (x4 with mimetic init, mean pooling and 4 blocks: 88.84% against 89.57%); CIFAR-10, 8 min: 75.70% against 72.98% |
| weight decay (with the stem) | 4-25 ms per image: 0.15 (three times the recipe's 0.05); elsewhere the recipe's (not measured there) | CIFAR-10, 8 min: 75.90% against 75.70%; Fashion-MNIST, 10 min: 92.38% against 92.13%; the plain ViT: 88.32% against 88.29% (no rule) |
| tokenizer (plain ViT) | 4-25 ms per image, images <= 64 px: shifted patches (`SHIFTED_PATCHES`, `keras_vit.models.stems.shifted_patch_stem`); elsewhere the paper's patches (not measured there) | Fashion-MNIST, 10 min: 90.19% against 89.57% (seed 0) and 90.43% against 89.39% (seed 1), in 16 epochs instead of 18-19 (the 5x wider patch vectors cost 15% of the images per second); four runs average 90.06% against 89.37% for three on the paper's patches |
| attention init | the plain ViT: mimetic (`keras_vit.models.mimetic`); behind the stem: Keras' own (`MIMETIC_INIT`) | Fashion-MNIST, 10 min: plain ViT 89.04% against 88.29%; conv stem 92.16% against 92.13% (no gain) |
| adapting a checkpoint (`--weights`, `--adapt auto`) | a linear probe first, then fine-tuning from it when the rest of the budget buys `MIN_FINETUNE_EPOCHS` epochs at the speed its forward pass measured | benchmarks/RESULTS.md, "Transfer": CIFAR-10's other five classes, 50 images each, 3 min |
| pooling | the plain ViT: the mean of the tokens ("gap"); behind the stem: the class token (`BUDGET_POOLING`) | Fashion-MNIST, 10 min, plain ViT: 89.27% against 89.04% (mimetic), 88.21% against 87.87% (before); conv stem 91.89% against 91.94% |

With or without a budget, the model takes the images' channels as read
(`keras_vit.training.plan.resolve_channels`): grey data as one channel, not the same grey three
times. Fashion-MNIST, 10 min: the plain ViT on shifted patches 90.49%, 90.29% and 90.55% (245
values per patch vector instead of 735, 1,606-1,779 img/s against 1,462-1,519) against 90.06%
over four runs of 3 channels; the conv stem model 92.72% and 92.87% against 92.59% and 92.67%.

Example:

>>> choice = choose(budget_seconds=480, num_train=45_000, image_size=32)
>>> choice.stem, choice.architecture["num_layers"], choice.image_size
(True, 2, 32)
>>> choice.reasons[0]
'8 min for 45,000 training images: 10.7 ms per image'
"""

from __future__ import annotations

import dataclasses
import math

from keras_vit import _validation, choices
from keras_vit.models import stems

# The ViT behind the conv stem: the default model's width and heads, its blocks by budget.
# Its patch is counted in cells of the stem's feature map (`keras_vit.models.spec.default_patch_size` on that map).
STEM_MODEL = {"hidden_size": 128, "num_heads": 4, "mlp_dim": 256}
# Images up to this side get the stem; above it the stem's full-resolution convolutions were
# never measured against a patch grid.
STEM_MAX_IMAGE_SIZE = 64
# (ms per training image below which, blocks behind the stem); the last row has no bound.
STEM_BLOCKS = ((4.0, 1), (25.0, 2), (math.inf, 4))
# (ms per training image below which, blocks of the plain default ViT, None: the default model's
# own); the last row has no bound. Measured at 10 ms per image only.
PLAIN_BLOCKS = ((4.0, None), (25.0, 4), (math.inf, None))
# Epoch limit of a budgeted run without --epochs: large enough that the budget ends it.
BUDGET_EPOCHS = 10_000
# Augmentation of a budgeted run: enough against over-fitting in the passes a budget of
# minutes buys, not so much that it under-fits.
BUDGET_AUGMENT = {"colour": "shift", "single-channel": "flip"}
# Blocks behind a stem asked for without a budget (`stem="conv"`): the 10 ms-per-image row.
UNBUDGETED_STEM_BLOCKS = 2
# (ms per training image below which, factor on the recipe's peak learning rate); the last row
# has no bound. Measured at 10-10.7 ms per image only; the other rows keep the recipe's rate.
LEARNING_RATE_SCALES = ((4.0, 1.0), (25.0, 2.0), (math.inf, 1.0))
# (ms per training image below which, weight decay of the conv stem + ViT; None: the recipe's);
# the last row has no bound. Measured at 10-10.7 ms per image only.
STEM_WEIGHT_DECAYS = ((4.0, None), (25.0, 0.15), (math.inf, None))
# Attention kernels of a budgeted run, by model ("plain": a ViT on a patch grid; "stem": behind the
# conv stem): True for mimetic initialization (`keras_vit.models.mimetic`), False for Keras' own.
MIMETIC_INIT = {"plain": True, "stem": False}
# How the header names the two kinds of model the tables above are keyed by.
MODEL_NAMES = {"plain": "plain ViT", "stem": "conv stem + ViT"}
# Pooling of a budgeted run's encoder output, by model: "gap" (average of the tokens) or "token".
BUDGET_POOLING = {"plain": "gap", "stem": "token"}
# (ms per training image below which, shifted patches for the plain default ViT); the last row has no
# bound. Measured at 10 ms per image on 28 px images only; as with the stem, images above
# STEM_MAX_IMAGE_SIZE keep the paper's patches (the embedding grows with the patch, five times the paper's).
SHIFTED_PATCHES = ((4.0, False), (25.0, True), (math.inf, False))
# A run from a checkpoint with a budget and --adapt auto fits a linear probe first (one forward
# pass over the data), then fine-tunes from it only if the rest of the budget buys this many
# epochs at the speed the probe's forward pass measured (a training step costing three forward
# passes); otherwise the probe is the result.
MIN_FINETUNE_EPOCHS = 3
# The header's reason for a budget's epoch count, from scratch or from a checkpoint.
EPOCHS_REASON = "epochs: as many as the budget buys, the cosine fitted to it"


# The options whose "auto" the rules resolve (`keras_vit.train_options`): `choose` takes each as
# the config gives it and returns it chosen, by the name of its `keras_vit.models.spec.ModelSpec` field.
CHOSEN = ("stem", "tokenizer", "pooling", "attention_init")


@dataclasses.dataclass(frozen=True)
class BudgetChoice:
    """The settings a budget buys.

    Attributes:
        stem: bool. Put the conv stem (`keras_vit.models.stems.conv_stem`) before the encoder.
        architecture: dict. Model fields to use (empty: the caller's model is kept).
        image_size: int. The model's input side.
        epochs: int or None. Epoch limit (None: keep the caller's).
        augment: str or None. Augmentation preset (None: keep the caller's or the recipe's).
        learning_rate_scale: float. Factor on the recipe's peak learning rate (1.0: keep it).
        weight_decay: float or None. The recipe's weight decay replaced (None: keep it).
        attention_init: str. "mimetic" or "random" (Keras' initializers), the run's attention kernels.
        tokenizer: str. "patches" (the paper's) or "shifted" (`keras_vit.models.stems.shifted_patch_stem`).
        pooling: str. "token" or "gap", the run's pooling.
        reasons: tuple of str. One line per choice, for the run's header.
    """

    stem: bool
    architecture: dict
    image_size: int
    epochs: int | None
    augment: str | None
    learning_rate_scale: float
    weight_decay: float | None
    attention_init: str
    tokenizer: str
    pooling: str
    reasons: tuple[str, ...]

    def model_choices(self) -> dict:
        """The chosen `CHOSEN`, as `keras_vit.models.spec.ModelSpec` takes them."""
        return {name: getattr(self, name) for name in CHOSEN}


def milliseconds_per_image(budget_seconds: float, num_train: int) -> float:
    """Training time the budget gives each training image per run, in ms.

    Example:

    >>> milliseconds_per_image(600, 60_000)
    10.0
    """
    _validation.check_positive_number("budget_seconds", budget_seconds)
    _validation.check_positive_int("num_train", num_train)
    return 1000.0 * budget_seconds / num_train


def stem_blocks(ms_per_image: float) -> int:
    """Blocks of the encoder behind the stem for a budget of `ms_per_image` (`STEM_BLOCKS`).

    Example:

    >>> [stem_blocks(ms) for ms in (1, 10.7, 40)]
    [1, 2, 4]
    """
    return _row(STEM_BLOCKS, ms_per_image)


def plain_blocks(ms_per_image: float) -> int | None:
    """Blocks of the plain default ViT for a budget of `ms_per_image` (`PLAIN_BLOCKS`); None keeps its own.

    Example:

    >>> [plain_blocks(ms) for ms in (1, 10.7, 40)]
    [None, 4, None]
    """
    return _row(PLAIN_BLOCKS, ms_per_image)


def stem_weight_decay(ms_per_image: float) -> float | None:
    """Weight decay of the conv stem + ViT for a budget of `ms_per_image` (`STEM_WEIGHT_DECAYS`); None keeps the recipe's.

    Example:

    >>> [stem_weight_decay(ms) for ms in (1, 10.7, 40)]
    [None, 0.15, None]
    """
    return _row(STEM_WEIGHT_DECAYS, ms_per_image)


def shifted_patches(ms_per_image: float) -> bool:
    """Whether the plain default ViT gets shifted patches for a budget of `ms_per_image` (`SHIFTED_PATCHES`).

    Example:

    >>> [shifted_patches(ms) for ms in (1, 10.7, 40)]
    [False, True, False]
    """
    return _row(SHIFTED_PATCHES, ms_per_image)


def learning_rate_scale(ms_per_image: float) -> float:
    """Factor on the recipe's peak learning rate for a budget of `ms_per_image` (`LEARNING_RATE_SCALES`).

    Example:

    >>> [learning_rate_scale(ms) for ms in (1, 10.7, 40)]
    [1.0, 2.0, 1.0]
    """
    return _row(LEARNING_RATE_SCALES, ms_per_image)


def _row(table, ms_per_image):
    """The value of the first (bound, value) row of `table` whose bound exceeds `ms_per_image`."""
    return next(value for bound, value in table if ms_per_image < bound)


def choose(budget_seconds, num_train: int, image_size: int, *, stem: str = "auto", model_given: bool = False,
           image_size_given: bool = False, epochs_given: bool = False, augment_given: bool = False,
           recipe_given: bool = False, data_channels: int = 3, attention_init: str = "auto",
           pooling: str = "auto", tokenizer: str = "auto", stem_stride: int | None = None,
           checkpoint: bool = False) -> BudgetChoice:
    """The model, input size and epoch limit a run buys with `budget_seconds` for `num_train` images.

    Args:
        budget_seconds: float or None. The training budget; None for none (the stem only when
            `stem="conv"`).
        num_train: int. Training images.
        image_size: int. Side of the (square) images, or the size the caller chose.
        stem: str. "auto" (the conv stem when the rules say so), "conv" or "none".
            Defaults to "auto".
        model_given: bool. The caller chose the model (variant, size flags, backbone): keep it.
            Defaults to False.
        image_size_given: bool. The caller chose the input size: keep it. Defaults to False.
        epochs_given: bool. The caller chose the epoch count: keep it. Defaults to False.
        augment_given: bool. The caller chose the augmentation or the recipe: keep theirs.
            Defaults to False.
        recipe_given: bool. The caller chose the recipe: keep its learning rate. Defaults to False.
        data_channels: int. Channels of the images as stored (1 for Fashion-MNIST's grey
            images, whatever the model's input). Defaults to 3.
        attention_init: str. "auto" (mimetic initialization where `MIMETIC_INIT` says so, with a
            budget), "mimetic" or "random". Defaults to "auto".
        pooling: str. "auto" (`BUDGET_POOLING`'s with a budget, else "token"), "token" or "gap".
            Defaults to "auto".
        tokenizer: str. "auto" (shifted patches where `SHIFTED_PATCHES` says so, for the plain
            default ViT on images up to `STEM_MAX_IMAGE_SIZE`), "patches" or "shifted". Defaults to "auto".
        stem_stride: int or None. The stride of the conv stem, whose map must tile the images;
            None for the default stem's (`keras_vit.models.stems.stem_stride`). Defaults to None.
        checkpoint: bool. The run adapts a checkpoint: its model, and the recipe's augmentation and
            learning rate, stay; the rules for a model trained from scratch do not apply (a reason
            says so). Defaults to False.

    Returns:
        A `BudgetChoice`.

    Example:

    >>> choose(None, 60_000, 28).stem, choose(600, 60_000, 28, stem="none").stem
    (False, False)
    >>> choice = choose(600, 60_000, 28)
    >>> choice.image_size, choice.reasons[2]
    (32, 'images resized 28 -> 32 px: the conv stem (stride 8) must tile them')
    """
    # The plan passes a checked config's values (`keras_vit.train_options.check_config`), and the
    # model choices this returns are checked where they become a `keras_vit.models.spec.ModelSpec`;
    # only an unknown stem would otherwise pass as "none" unnoticed.
    _validation.check_choice("stem", stem, choices.STEMS)
    reasons = []
    ms = None
    if budget_seconds is not None:
        ms = milliseconds_per_image(budget_seconds, num_train)
        reasons.append(f"{budget_seconds / 60:g} min for {num_train:,} training images: {ms:.3g} ms per image")
    if checkpoint:
        if ms is not None and not epochs_given:
            reasons.append(EPOCHS_REASON)
        if ms is not None:
            reasons.append("the checkpoint's model and the recipe's augmentation and learning rate: the rules for a "
                           "model from scratch (conv stem, depth, shifted patches, mimetic initialization, GAP "
                           "pooling, augmentation, learning rate) do not apply")
        return BudgetChoice(stem=False, architecture={}, image_size=image_size,
                            epochs=BUDGET_EPOCHS if ms is not None and not epochs_given else None, augment=None,
                            learning_rate_scale=1.0, weight_decay=None,
                            attention_init="random" if attention_init == "auto" else attention_init,
                            tokenizer="patches" if tokenizer == "auto" else tokenizer,
                            pooling="token" if pooling == "auto" else pooling, reasons=tuple(reasons))
    small_images = image_size <= STEM_MAX_IMAGE_SIZE
    if stem == "auto":
        use_stem = ms is not None and not model_given and small_images and tokenizer != "shifted"
        if ms is not None and not model_given:
            reasons.append(
                f"conv stem + ViT: images of {image_size} px <= {STEM_MAX_IMAGE_SIZE}" if use_stem
                else "no conv stem: shifted patches given" if tokenizer == "shifted"
                else f"no conv stem: images of {image_size} px > {STEM_MAX_IMAGE_SIZE}"
            )
    else:
        use_stem = stem == "conv"
    architecture = {}
    if use_stem:
        stride = stem_stride or stems.stem_stride()
        if image_size % stride and not image_size_given:
            resized = math.ceil(image_size / stride) * stride
            reasons.append(f"images resized {image_size} -> {resized} px: the conv stem (stride {stride}) must tile them")
            image_size = resized
        if not model_given:
            blocks = stem_blocks(ms) if ms is not None else UNBUDGETED_STEM_BLOCKS
            architecture = {**STEM_MODEL, "num_layers": blocks}
            if ms is not None:
                reasons.append(f"{blocks} block{'s' if blocks > 1 else ''} behind the stem for {ms:.3g} ms per image")
    elif ms is not None and not model_given and plain_blocks(ms) is not None:
        architecture = {"num_layers": plain_blocks(ms)}
        reasons.append(f"{plain_blocks(ms)} blocks in the plain ViT for {ms:.3g} ms per image")
    epochs = None
    if ms is not None and not epochs_given:
        epochs = BUDGET_EPOCHS
        reasons.append(EPOCHS_REASON)
    augment = None
    if ms is not None and not augment_given:
        kind = "single-channel" if data_channels == 1 else "colour"
        augment = BUDGET_AUGMENT[kind]
        reasons.append(f"augment {augment} for {kind} images")
    scale = 1.0
    if ms is not None and not recipe_given:
        scale = learning_rate_scale(ms)
        if scale != 1.0:
            reasons.append(f"peak learning rate x{scale:g} for {ms:.3g} ms per image")
    weight_decay = stem_weight_decay(ms) if ms is not None and not recipe_given and use_stem else None
    if weight_decay is not None:
        reasons.append(f"weight decay {weight_decay:g} for the conv stem + ViT at {ms:.3g} ms per image")
    model = "stem" if use_stem else "plain"
    if tokenizer == "auto":
        tokenizer = "patches"
        if ms is not None and not use_stem and not model_given and small_images and shifted_patches(ms):
            tokenizer = "shifted"
            reasons.append(f"shifted patches (Lee et al. 2021) for the plain ViT at {ms:.3g} ms per image")
    if attention_init == "auto":
        attention_init = "random"
        if ms is not None and MIMETIC_INIT[model]:
            attention_init = "mimetic"
            reasons.append(f"mimetic initialization of the attention for the {MODEL_NAMES[model]}")
    if pooling == "auto":
        pooling = "token"
        if ms is not None and BUDGET_POOLING[model] != "token":
            pooling = BUDGET_POOLING[model]
            reasons.append(f"pooling {pooling} (the mean of the patch tokens) for the {MODEL_NAMES[model]}")
    return BudgetChoice(stem=use_stem, architecture=architecture, image_size=image_size, epochs=epochs,
                        augment=augment, learning_rate_scale=scale, weight_decay=weight_decay,
                        attention_init=attention_init, tokenizer=tokenizer, pooling=pooling,
                        reasons=tuple(reasons))
