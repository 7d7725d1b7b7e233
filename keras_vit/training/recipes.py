"""Training recipes: optimizer, learning-rate schedule, loss and regularisation in one named row.

- "deit": from scratch, DeiT-like (Touvron et al. 2021): AdamW lr 5e-4 x batch/512, weight
  decay 0.05 on kernels only (not biases, norms, position embedding, class token), linear
  warmup then cosine decay, label smoothing 0.1, gradient-norm clipping, stochastic depth 0.1,
  strong augmentation.
- "finetune": the paper's fine-tuning (vit_jax): SGD momentum 0.9, lr 0.03 x batch/512, 500
  warmup steps then cosine, global gradient-norm clip 1.0, no weight decay, light augmentation.
  Use it with a zero-initialised head (the builder's default) and, at a higher resolution than
  pre-training, resampled position embeddings (weights loading does that).
- "compact": from scratch on small images and short compute budgets (the Fashion-MNIST
  benchmark): the DeiT recipe with a larger learning rate, a one-epoch warmup, and only flips
  for augmentation, since a run of a few epochs underfits rather than overfits.
- "finetune_adamw": fine-tuning as DeiT, BEiT and DINOv2 do it: AdamW lr 1e-3 x batch/1024, weight
  decay 0.05 on kernels, layer-wise learning-rate decay 0.65 (block i of L learns at 0.65^(L+1-i)
  of the head's rate, the patch embedding at 0.65^(L+1), its weight decay at that rate too, as
  BEiT and timm do), warmup then cosine, label smoothing 0.1, stochastic depth 0.1, light augmentation.
- "lpft": fine-tuning from a fitted linear probe's head (LP-FT, what `--adapt auto` runs after its
  probe): AdamW 3e-4 at batch 32 (timm's small-set rate), layer decay 0.75, warmup then cosine,
  label smoothing 0.1, stochastic depth 0.1, 1/8-side padded crops and flips.
- "anchor": the keras.io ViT example recipe (AdamW 1e-3, weight decay 1e-4 on every variable,
  constant learning rate, no smoothing, clipping or stochastic depth), kept to measure the
  other recipes against.

Example:

>>> recipe = get_recipe("deit")
>>> recipe.learning_rate_for(1024)
0.001
"""

from __future__ import annotations

import dataclasses
import math

import keras

from keras_vit._validation import check_choice, check_non_negative_int, check_number_in, check_positive_int
from keras_vit.data import augment
from keras_vit.models.head import outputs_probabilities
from keras_vit.training.optimizers import LayerDecayAdamW, LayerDecaySGD, layer_learning_rate_scales

# Variables that weight decay must not shrink: biases, LayerNorm scale/offset, the position
# embedding, the class token and MAE's mask token (DeiT, timm's no_weight_decay, AugReg "kernels only").
NO_DECAY_NAMES = ("bias", "gamma", "beta", "position_embedding", "class_token", "mask_token")
# Below this global batch the peak learning rate follows the square root of the batch instead of
# the batch (Recipe.learning_rate_for): linear scaling takes a 32-image batch to 1/16 of the rate
# at 512, which barely moves a model in the few hundred steps a small folder gives.
SMALL_BATCH = 128


@dataclasses.dataclass(frozen=True)
class Recipe:
    """One training recipe.

    Args:
        name: str. Key in `RECIPES`.
        optimizer: str. "adamw" or "sgd".
        learning_rate: float. Peak learning rate at `reference_batch_size`.
        reference_batch_size: int. Batch size the learning rate is given for; it scales
            linearly with the global batch size. Defaults to 512.
        weight_decay: float. Decoupled weight decay. Defaults to 0.
        decay_all: bool. Apply weight decay to every variable (keras.io style) instead of
            kernels only. Defaults to False.
        warmup_epochs: float. Linear warmup length in epochs. Defaults to 0.
        warmup_steps: int. Linear warmup length in steps, added to `warmup_epochs`.
            Defaults to 0. Warmup is capped at a fifth of training.
        schedule: str. "cosine" or "constant". Defaults to "cosine".
        min_learning_rate_ratio: float. Final / peak learning rate of the cosine. Defaults to 0.
        label_smoothing: float. Defaults to 0.
        clip_norm: float or None. Global gradient-norm clip. Defaults to None.
        drop_path_rate: float. Stochastic depth of the last block. Defaults to 0.
        augment: str. Default augmentation preset. Defaults to "none".
        batch_size: int. Default global batch size. Defaults to 256.
        beta_2: float. AdamW's second-moment decay. Defaults to 0.999.
        momentum: float. SGD momentum. Defaults to 0.9.
        layer_decay: float or None. Layer-wise learning-rate decay of a fine-tuning recipe
            (`layer_learning_rate_scales`); None trains every layer at the same rate.
            Defaults to None.
        ema_momentum: float or None. Keep an exponential moving average of the weights with this
            momentum (Keras' optimizer `use_ema`); `fit` ends with the model holding the average.
            None keeps none. Defaults to None.

    Example:

    >>> recipe = Recipe("mine", "sgd", 0.1, reference_batch_size=256)
    >>> recipe.learning_rate_for(512), recipe.schedule
    (0.2, 'cosine')
    >>> dataclasses.replace(get_recipe("deit"), label_smoothing=0.0).weight_decay
    0.05
    """

    name: str
    optimizer: str
    learning_rate: float
    reference_batch_size: int = 512
    weight_decay: float = 0.0
    decay_all: bool = False
    warmup_epochs: float = 0.0
    warmup_steps: int = 0
    schedule: str = "cosine"
    min_learning_rate_ratio: float = 0.0
    label_smoothing: float = 0.0
    clip_norm: float | None = None
    drop_path_rate: float = 0.0
    augment: str = "none"
    batch_size: int = 256
    beta_2: float = 0.999
    momentum: float = 0.9
    layer_decay: float | None = None
    ema_momentum: float | None = None

    def __post_init__(self):
        inf = float("inf")
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Invalid name={self.name!r}. Expected a non-empty string.")
        check_choice("optimizer", self.optimizer, ("adamw", "sgd"))
        check_choice("schedule", self.schedule, ("cosine", "constant"))
        check_choice("augment", self.augment, tuple(augment.PRESETS))
        if not isinstance(self.decay_all, bool):
            raise ValueError(f"Invalid decay_all={self.decay_all!r}. Expected True or False.")
        check_number_in("learning_rate", self.learning_rate, 0, inf, include_low=False, include_high=False)
        check_number_in("weight_decay", self.weight_decay, 0, inf, include_high=False)
        check_number_in("warmup_epochs", self.warmup_epochs, 0, inf, include_high=False)
        check_number_in("min_learning_rate_ratio", self.min_learning_rate_ratio, 0, 1)
        check_number_in("label_smoothing", self.label_smoothing, 0, 1, include_high=False)
        check_number_in("drop_path_rate", self.drop_path_rate, 0, 1, include_high=False)
        check_number_in("beta_2", self.beta_2, 0, 1, include_high=False)
        check_number_in("momentum", self.momentum, 0, 1, include_high=False)
        if self.layer_decay is not None:
            check_number_in("layer_decay", self.layer_decay, 0, 1, include_low=False)
        if self.ema_momentum is not None:
            check_number_in("ema_momentum", self.ema_momentum, 0, 1, include_high=False)
        if self.clip_norm is not None:
            check_number_in("clip_norm", self.clip_norm, 0, inf, include_low=False, include_high=False)
        check_positive_int("reference_batch_size", self.reference_batch_size)
        check_positive_int("batch_size", self.batch_size)
        check_non_negative_int("warmup_steps", self.warmup_steps)

    def learning_rate_for(self, batch_size: int) -> float:
        """Peak learning rate for a global batch of `batch_size`.

        The linear scaling rule down to `SMALL_BATCH`; below it the square-root rule, so that
        the batches of a few hundred images (fine-tuning sets) keep a rate that still trains.

        Example:

        >>> recipe = Recipe("mine", "adamw", 1e-3, reference_batch_size=512)
        >>> [round(recipe.learning_rate_for(b), 7) for b in (1024, 128, 32)]
        [0.002, 0.00025, 0.000125]
        """
        check_positive_int("batch_size", batch_size)
        if batch_size >= SMALL_BATCH:
            return self.learning_rate * batch_size / self.reference_batch_size
        return self.learning_rate * SMALL_BATCH / self.reference_batch_size * math.sqrt(batch_size / SMALL_BATCH)


RECIPES: dict[str, Recipe] = {
    "deit": Recipe(
        "deit", "adamw", 5e-4, 512, weight_decay=0.05, warmup_epochs=5, min_learning_rate_ratio=0.01,
        label_smoothing=0.1, clip_norm=1.0, drop_path_rate=0.1, augment="strong",
    ),
    "finetune": Recipe(
        "finetune", "sgd", 0.03, 512, warmup_steps=500, clip_norm=1.0, augment="light", batch_size=512,
    ),
    "finetune_adamw": Recipe(
        "finetune_adamw", "adamw", 1e-3, 1024, weight_decay=0.05, warmup_epochs=1, min_learning_rate_ratio=0.01,
        label_smoothing=0.1, clip_norm=1.0, drop_path_rate=0.1, augment="light", batch_size=256, layer_decay=0.65,
    ),
    # LP-FT (Kumar et al. 2022): all weights fine-tuned from a fitted linear probe's head, at
    # timm's small-set rate (3e-4 at batch 32, here by the square-root rule from 6e-4 at 128) with
    # layer decay 0.75; the probe's head already fits, so one warm-up epoch.
    "lpft": Recipe(
        "lpft", "adamw", 6e-4, 128, weight_decay=0.05, warmup_epochs=1, min_learning_rate_ratio=0.01,
        label_smoothing=0.1, clip_norm=1.0, drop_path_rate=0.1, augment="pad_crop", batch_size=32, layer_decay=0.75,
    ),
    "compact": Recipe(
        "compact", "adamw", 2e-3, 512, weight_decay=0.05, warmup_epochs=1, min_learning_rate_ratio=0.01,
        label_smoothing=0.1, clip_norm=1.0, drop_path_rate=0.0, augment="flip", batch_size=256,
        beta_2=0.99,
    ),
    "anchor": Recipe(
        "anchor", "adamw", 1e-3, 256, weight_decay=1e-4, decay_all=True, schedule="constant",
        augment="none", batch_size=256,
    ),
}


def get_recipe(name: str | Recipe) -> Recipe:
    """Returns the recipe called `name` (a key of `RECIPES`), or `name` itself when it is a `Recipe`.

    Args:
        name: str or Recipe. "deit", "finetune", "finetune_adamw", "lpft", "compact" or "anchor"; or a
            recipe of the caller's own.

    Example:

    >>> recipe = get_recipe("finetune")
    >>> recipe.optimizer, recipe.learning_rate, recipe.warmup_steps
    ('sgd', 0.03, 500)
    """
    if isinstance(name, Recipe):
        return name
    if name not in RECIPES:
        raise ValueError(f"Unknown recipe={name!r}. Expected one of {list(RECIPES)} or a keras_vit.training.recipes.Recipe.")
    return RECIPES[name]


@keras.saving.register_keras_serializable(package="keras_vit")
class WarmupCosine(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `peak` over `warmup_steps`, then cosine decay to `peak * min_ratio`.

    `total_steps` lives in a variable so a time-budgeted run can shorten the cosine once it
    has measured its speed (see `keras_vit.training.callbacks.TimeBudget`).

    Args:
        peak: float. Peak learning rate.
        total_steps: int. Steps of the whole schedule, warmup included.
        warmup_steps: int. Warmup steps. Defaults to 0.
        min_ratio: float. Final / peak learning rate. Defaults to 0.

    Example:

    >>> schedule = WarmupCosine(1.0, total_steps=10, warmup_steps=2)
    >>> [round(float(schedule(s)), 3) for s in (0, 1, 2, 6, 10)]
    [0.0, 0.5, 1.0, 0.5, 0.0]
    """

    def __init__(self, peak, total_steps, warmup_steps=0, min_ratio=0.0):
        check_number_in("peak", peak, 0, float("inf"), include_low=False, include_high=False)
        check_number_in("total_steps", total_steps, 0, float("inf"), include_low=False, include_high=False)
        check_non_negative_int("warmup_steps", warmup_steps)
        check_number_in("min_ratio", min_ratio, 0, 1)
        self.peak = float(peak)
        self.warmup_steps = int(warmup_steps)
        self.min_ratio = float(min_ratio)
        self.total_steps = keras.Variable(float(total_steps), trainable=False, name="total_steps")
        self._total_steps = float(total_steps)  # for get_config: distributed variables resist reads

    def set_total_steps(self, total_steps):
        """Changes the schedule's length (warmup unchanged)."""
        self._total_steps = float(total_steps)
        self.total_steps.assign(self._total_steps)

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        warmup = float(max(self.warmup_steps, 1))
        total = keras.ops.maximum(self.total_steps.value, warmup + 1.0)
        progress = keras.ops.clip((step - self.warmup_steps) / (total - self.warmup_steps), 0.0, 1.0)
        cosine = self.min_ratio + (1.0 - self.min_ratio) * 0.5 * (1.0 + keras.ops.cos(math.pi * progress))
        warm = step / warmup
        return self.peak * keras.ops.where(step < self.warmup_steps, warm, cosine)

    def get_config(self):
        return {
            "peak": self.peak,
            "total_steps": self._total_steps,
            "warmup_steps": self.warmup_steps,
            "min_ratio": self.min_ratio,
        }


def make_schedule(recipe: Recipe, batch_size: int, steps_per_epoch: int, epochs: int):
    """Returns the learning-rate schedule of `recipe` for this batch size and run length.

    The peak follows the global batch size (`Recipe.learning_rate_for`); warmup is capped at a
    fifth of the run. A "constant" recipe gives a float.

    Args:
        recipe: `Recipe`.
        batch_size: int. Global batch size.
        steps_per_epoch: int. Optimizer steps in one epoch.
        epochs: int. Length of the run.

    Returns:
        A `WarmupCosine`, or a float for a constant schedule.

    Example:

    >>> schedule = make_schedule(get_recipe("deit"), batch_size=1024, steps_per_epoch=10, epochs=100)
    >>> schedule.warmup_steps, [round(float(schedule(s)), 6) for s in (0, 25, 50, 1000)]
    (50, [0.0, 0.0005, 0.001, 1e-05])
    >>> make_schedule(get_recipe("anchor"), batch_size=512, steps_per_epoch=10, epochs=1)
    0.002
    """
    check_positive_int("steps_per_epoch", steps_per_epoch)
    check_positive_int("epochs", epochs)
    peak = recipe.learning_rate_for(batch_size)
    if recipe.schedule == "constant":
        return peak
    total = steps_per_epoch * epochs
    warmup = int(recipe.warmup_epochs * steps_per_epoch) + recipe.warmup_steps
    warmup = min(warmup, total // 5)
    return WarmupCosine(peak, total, warmup, recipe.min_learning_rate_ratio)


def no_decay_variables(model) -> list:
    """The model's variables excluded from weight decay: biases, norms, position embedding, class and mask tokens.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT("tiny", num_classes=3)
    >>> sorted({v.path.split("/")[-1] for v in no_decay_variables(model)})
    ['beta', 'bias', 'class_token', 'gamma', 'position_embedding']
    """
    return [v for v in model.trainable_variables if v.path.split("/")[-1] in NO_DECAY_NAMES]


def make_optimizer(recipe: Recipe, model, learning_rate):
    """Builds the optimizer of `recipe` for `model`, with weight-decay exclusions and clipping.

    Call it inside the distribution strategy's scope, before `model.compile`.

    Args:
        recipe: `Recipe`.
        model: keras.Model. Its variables decide the weight-decay exclusions.
        learning_rate: float or schedule, usually from `make_schedule`.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT("tiny", num_classes=3)
    >>> optimizer = make_optimizer(get_recipe("deit"), model, 1e-3)
    >>> type(optimizer).__name__, optimizer.decoupled_weight_decay, optimizer.global_clipnorm
    ('LayerDecayAdamW', 0.05, 1.0)
    >>> type(make_optimizer(get_recipe("finetune"), model, 0.01)).__name__
    'SGD'
    """
    schedule = learning_rate
    extra = {}
    if recipe.layer_decay is not None:
        extra = {"layer_scales": layer_learning_rate_scales(model, recipe.layer_decay)}
    if recipe.ema_momentum is not None:
        extra.update(use_ema=True, ema_momentum=recipe.ema_momentum)
    if recipe.optimizer == "sgd":
        sgd = LayerDecaySGD if "layer_scales" in extra else keras.optimizers.SGD
        return sgd(schedule, momentum=recipe.momentum, global_clipnorm=recipe.clip_norm, **extra)
    if recipe.optimizer != "adamw":
        raise ValueError(f"Invalid optimizer={recipe.optimizer!r} in recipe {recipe.name!r}. Expected 'adamw' or 'sgd'.")
    optimizer = LayerDecayAdamW(
        schedule, weight_decay=recipe.weight_decay, beta_2=recipe.beta_2, global_clipnorm=recipe.clip_norm, **extra
    )
    if not recipe.decay_all:
        optimizer.exclude_from_weight_decay(var_list=no_decay_variables(model))
    return optimizer


def build_optimizer_variables(model) -> None:
    """Creates the compiled `model`'s optimizer variables now, so TensorFlow traces the training step once.

    Keras on TensorFlow otherwise creates them inside the first trace of the step, and a
    `tf.function` that creates variables is traced twice: ViT-Ti/4's first step at batch 32 took
    48 s instead of 23 s on a 2-core Xeon (benchmarks/RESULTS.md). Call it after `model.compile`
    (and after any weight-decay exclusion, which Keras refuses on a built optimizer), inside the
    distribution strategy's scope.

    Args:
        model: keras.Model. Compiled with an optimizer.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT("tiny", num_classes=3)
    >>> model.compile(make_optimizer(get_recipe("deit"), model, 1e-3), "categorical_crossentropy")
    >>> build_optimizer_variables(model)
    >>> model.optimizer.built
    True
    """
    if not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)


def make_loss(recipe: Recipe, model):
    """Cross-entropy on one-hot (possibly mixed) labels with the recipe's label smoothing.

    The loss reads the model's head: probabilities from a softmax head (the builders' default),
    logits (`from_logits=True`) from a head built with `classifier_activation=None`. Label
    smoothing acts on the labels, so it works with either.

    Args:
        recipe: `Recipe`.
        model: keras.Model. The classifier to train; its head must be softmax or linear.

    Example:

    >>> import numpy as np, keras_vit
    >>> loss = make_loss(get_recipe("deit"), keras_vit.ViT("tiny", num_classes=2))
    >>> confident = np.array([[0.999, 0.001], [0.001, 0.999]])
    >>> loss.label_smoothing, round(float(loss(np.eye(2), confident)), 4)  # smoothing penalises certainty
    (0.1, 0.3463)
    >>> make_loss(get_recipe("deit"), keras_vit.ViT("tiny", num_classes=2, classifier_activation=None)).get_config()["from_logits"]
    True
    """
    probabilities = outputs_probabilities(model)
    return keras.losses.CategoricalCrossentropy(from_logits=not probabilities, label_smoothing=recipe.label_smoothing)
