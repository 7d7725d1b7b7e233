"""What a training run will do, resolved once from its `TrainConfig` before the first step.

`resolve(config)` checks the config and settles every choice it leaves open: the recipe, the
strategy, the precision, XLA, the global batch, the augmentation, the data splits and their
sizes, the image size and why, the architecture. The plan is frozen: where the run stands in its
run directory (the backup it resumes from) is the run's (`keras_vit.training.run_dir.RunProgress`).
The plan feeds the backup's fingerprint, the settings
record of the results, the header printed before training and the summary after it
(`keras_vit.training.report`).

Example:

>>> plan = resolve(TrainConfig(variant="tiny", image_size=28, epochs=1, max_train_examples=32,
...                            batch_size=16, run_dir=None, output_dir=None, precision="float32"))
>>> plan.batch_size, plan.steps_per_epoch, plan.image_size, plan.recipe.name, plan.architecture["num_layers"]
(16, 2, 28, 'compact', 2)
>>> plan.fingerprint()["num_train_examples"]
32
"""

from __future__ import annotations

import dataclasses

import keras

from keras_vit import _validation, choices, configs, precision_trial, precision_workloads, train_options
from keras_vit.data.sources import Source, load_source, load_splits
from keras_vit.models.spec import (  # noqa: F401  (DEFAULT_MODEL, DEFAULT_GRID, default_patch_size: public here too)
    DEFAULT_GRID,
    DEFAULT_MODEL,
    ModelSpec,
    build_spec,
    conv_stem_stride,
    default_patch_size,
    resolve_architecture,
    resolve_image_size,
)
from keras_vit.models import stems
from keras_vit.training import budget, distribute, memory, recipes
from keras_vit.train_options import TrainConfig, check_config  # noqa: F401  (their home is train_options)

DEFAULT_EPOCHS = 10  # without a budget and without --epochs
DEFAULT_RECIPE = "compact"
# A run from a checkpoint (`TrainConfig.weights`): the recipe, and without a budget or --epochs
# about this many fine-tuning steps (the paper fine-tunes its small tasks, such as the VTAB-1k
# sets of 1,000 images, for 500 to 2,500 steps).
FINETUNE_RECIPE = "finetune_adamw"
# After a linear probe (`--adapt auto` with a budget) the fine-tuning starts from a head that fits
# already: LP-FT's recipe.
LPFT_RECIPE = "lpft"
# `--adapt auto` decides between fine-tuning and the probe on images that neither fitted on: this
# share of the training images, held out (by `seed`) unless --validation-split says another. Never
# the test split, which reports the result. The fine-tuned model learns from the rest only: at 0.2, 50 images per class fine-tuned 1.3 points below timm's LP-FT on all of them
# (the weak backbone of benchmarks/RESULTS.md section 17), so the share is the smallest that still
# catches a fine-tuning that went wrong.
DECISION_SPLIT = 0.1
# ... and keeps the fine-tuned model unless the probe is right on more of the images where exactly
# one of them is right than chance explains at this level (one-sided sign test; trainer._keep_the_better).
# Deciding by the higher accuracy threw away fine-tuning that was behind by one image of 25 (0.60
# against 0.64 on the weak backbone of benchmarks/RESULTS.md section 17, where timm's LP-FT gained
# 5.6 points over its probe on the test images). The usual 5%: a fine-tuning that went wrong (at
# chance on the held-out images) is caught on 25 of them; a draw is not.
DECISION_ALPHA = 0.05
# ... and decides once the fine-tuning has taken this share of its steps (the cosine's, as fitted
# to a budget), then gives the held-out images back: the rest of the fine-tuning learns from every
# training image, as timm's LP-FT does from the start. Held out to the end they cost 0.70 points
# on average over eight runs (benchmarks/RESULTS.md, "What the 10% held out for the decision
# costs"); given back halfway they gained 0.33 on average over six checkpoints, 4 of 6 higher
# ("The held-out share given back halfway"). Halfway is a guess, not tuned: between a decision
# made on a fine-tuning too young to judge and images given back too late to teach much.
GIVE_BACK_AT = 0.5
FINETUNE_STEPS = 500
# A small training set gets a batch that still gives this many steps an epoch (the recipe's
# batch otherwise): 250 images train at batch 32 (7 steps) rather than failing at 256.
MIN_STEPS_PER_EPOCH = 4
# Per-epoch validation of a small training set against a large validation set (250 images
# against 5,000) would cost more than the training itself: it validates on the first (class by
# class in turn) max(training images, VALIDATION_SAMPLE) of them; the test split is still scored
# in full at the end.
VALIDATION_SAMPLE = 500
# ... and holds that pass's batches in memory after the first epoch when they take at most this
# many bytes (float32): each pass otherwise builds a new tf.data iterator over its source, which
# for a folder cost 0.2 s on 2 cores, ten times the pass itself on 25 held-out images
# (benchmarks/RESULTS.md section 17, "Epochs without their edges").
VALIDATION_CACHE_BYTES = 256 * 2**20
MODEL_KEYS = choices.MODEL_FIELDS  # what model_overrides may set
# A custom backbone (a Keras model the run was given): a precision trial cannot build it again,
# and a ViT on its patch size of 1 would time one token per pixel (50,176 at 224 px), so the trial
# times the width's stand-in (`keras_vit.precision_workloads.width_workload`). The conv stem and a hybrid's BiT
# ResNet are built again from their arguments.
OTHER_STEM = "other"


def build_model(plan):
    """Builds the model of `plan` with scaling inside it: its `ModelSpec`, or its checkpoint with a new head.

    With `config.weights`, the checkpoint's model with a new zero-initialised head
    (`keras_vit.transfer.load_pretrained`), or with `config.head` "zeroshot" its text tower's
    zero-shot head on the unit image embedding (`plan.zeroshot_head`); else
    `keras_vit.models.spec.build_spec` of `plan.model` with the config's backbone. Stochastic depth is the recipe's. Call it inside the plan's
    strategy's scope.

    Args:
        plan: `RunPlan`. The resolved run.

    Example:

    >>> run = resolve(TrainConfig(variant="tiny", model_overrides={"num_layers": 1}, max_train_examples=32,
    ...                           run_dir=None, output_dir=None))
    >>> model = build_model(run)
    >>> model.input_shape, model.output_shape, model.layers[1].name
    ((None, 32, 32, 1), (None, 10), 'preprocessing')
    >>> sum(layer.name.startswith("encoderblock_") for layer in model.layers)
    1
    """
    config, num_classes, drop_path_rate = plan.config, plan.train.num_classes, plan.recipe.drop_path_rate
    if config.weights is not None:
        from keras_vit.transfer.pretrained import load_pretrained

        head = plan.zeroshot_head
        model, _ = load_pretrained(config.weights, num_classes=num_classes, image_size=plan.image_size,
                                   scaling=plan.scaling, patch_size=config.model_overrides.get("patch_size"),
                                   drop_path_rate=drop_path_rate, head_norm="l2" if head is not None else None)
        if head is not None:
            head.set_on(model)
        return model
    backbone = config.backbone
    if callable(backbone) and not isinstance(backbone, keras.layers.Layer):
        backbone = backbone()
    return build_spec(plan.model, num_classes, drop_path_rate=drop_path_rate, backbone=backbone, seed=config.seed)


def resolve_channels(channels: int | None, data_channels: int, backbone_given: bool = False) -> tuple[int, str]:
    """The model's input channels and why, for the header: the images' own unless given.

    Grey images repeated to three channels carry nothing more and cost a first layer three
    times as wide (RESULTS.md section 10: the plain ViT on shifted patches, 245 values per
    patch instead of 735, trained more epochs in the same budget).

    Args:
        channels: int or None. The caller's choice (`TrainConfig.channels`); None to choose.
        data_channels: int. Channels of the training images as read (1 or 3).
        backbone_given: bool. A backbone was given: it takes 3 channels unless `channels` says
            otherwise. Defaults to False.

    Returns:
        (channels, reason).

    Example:

    >>> resolve_channels(None, 1), resolve_channels(None, 3)
    ((1, 'grey, as read'), (3, 'colour, as read'))
    >>> resolve_channels(3, 1)
    (3, 'given')
    """
    if channels is not None:
        _validation.check_choice("channels", channels, choices.CHANNELS)
        return channels, "given"
    _validation.check_choice("data_channels", data_channels, choices.CHANNELS)
    if backbone_given:
        return 3, "a backbone given: pass channels (--channels) for other than 3"
    return data_channels, ("grey" if data_channels == 1 else "colour") + ", as read"


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """A training run with every choice resolved; see `resolve`.

    Attributes: `config` (the `TrainConfig`), `recipe`, `strategy`, `precision` (a dtype
    policy name) and `precision_reason`, `jit_compile` (bool), `batch_size` (global), `augment` (preset name or
    config), `model` (the `keras_vit.models.spec.ModelSpec` to build: its architecture, input and choices;
    each of its fields is read through as a property of the same name, `plan.pooling`), `mesh`
    (the device mesh of a keras.distribution strategy, "2x4"; None for tf.distribute's), `train`, `validation` and `test` (data `Source`s; the last two may be
    None), `num_train`, `steps_per_epoch`, why the model's choices are what they are (`image_size_reason`,
    `patch_reason`, `channels_reason`, `scaling_reason`, `budget_reasons`), `batch_reason`, `pretrained`
    (a `keras_vit.transfer.Pretrained` describing the checkpoint of `config.weights`, or None), `adapt`
    ("scratch", "finetune", "probe" or "probe_then_finetune") and `adapt_reason`, `zeroshot_head` (a
    `keras_vit.transfer.zeroshot_head.ZeroshotHead` the head starts from, or None), `given_back` (every
    training image, `validation`'s included, for `--adapt auto`'s fine-tuning once it has decided on
    `validation`: `GIVE_BACK_AT`; None where `validation` is not the decision's own), `cache`. Frozen: where
    the run stands in its run directory is the run's (`keras_vit.training.run_dir.RunProgress`), not the
    plan's.
    """

    config: TrainConfig
    recipe: recipes.Recipe
    strategy: object
    precision: str
    jit_compile: bool
    batch_size: int
    augment: object
    model: ModelSpec
    train: Source
    validation: Source | None
    test: Source | None
    num_train: int
    steps_per_epoch: int
    image_size_reason: str
    cache: bool
    patch_reason: str = "given"
    epochs: int = DEFAULT_EPOCHS
    channels_reason: str = "given"
    scaling_reason: str = "the default"
    batch_reason: str = "the recipe's"
    precision_reason: str = "given"
    pretrained: object = None
    adapt: str = "scratch"
    adapt_reason: str = ""
    budget_reasons: tuple = ()
    zeroshot_head: object = None
    given_back: Source | None = None

    @property
    def mesh(self) -> str | None:
        """The device mesh of a keras.distribution strategy, "2x4"; None for a tf.distribute strategy."""
        if isinstance(self.strategy, distribute.MeshStrategy):
            return "x".join(map(str, self.strategy.mesh))
        return None

    @property
    def augment_name(self) -> str:
        if isinstance(self.augment, str):
            return self.augment
        if dataclasses.is_dataclass(self.augment):  # an AugmentConfig: what differs from no augmentation
            changed = {f.name: getattr(self.augment, f.name) for f in dataclasses.fields(self.augment)
                       if getattr(self.augment, f.name) != f.default}
            return "custom(" + ", ".join(f"{k}={v!r}" for k, v in changed.items()) + ")"
        return repr(self.augment)

    @property
    def peak_learning_rate(self) -> float:
        """The recipe's peak learning rate at this run's global batch (what the schedule reaches)."""
        return self.recipe.learning_rate_for(self.batch_size)

    def fingerprint(self) -> dict:
        """What a backup must share with the run resuming from it: data, model, recipe, batch."""
        return {
            **train_options.record(self, "fingerprint"), **self.architecture,
            "num_train_examples": self.num_train, "num_classes": self.train.num_classes,
            "learning_rate": self.peak_learning_rate, "weight_decay": self.recipe.weight_decay,
        }

    def settings(self, model, estimate=None) -> dict:
        """The settings record of the run's results (and of `<name>.json`); without `estimate`, no memory figure."""
        recorded = {
            **train_options.record(self, "settings"),
            "learning_rate": self.peak_learning_rate, "weight_decay": self.recipe.weight_decay,
            "backend": keras.backend.backend(), "replicas": self.strategy.num_replicas_in_sync,
            "params": model.count_params(),
        }
        if estimate is not None:
            recorded["estimated_step_memory_gib"] = round(estimate.total / memory.GIB, 2)
        return recorded


# The model's facts live in its spec: the plan reads each field through (`plan.pooling` is
# `plan.model.pooling`), a field of the plan's own coming first.
for _field in dataclasses.fields(ModelSpec):
    if _field.name not in {field.name for field in dataclasses.fields(RunPlan)}:
        setattr(RunPlan, _field.name, property(lambda self, name=_field.name: getattr(self.model, name),
                                               doc=f"The model's `{_field.name}` (`keras_vit.models.spec.ModelSpec`)."))
del _field


def resolve(config: TrainConfig, *, name=None) -> RunPlan:
    """Checks `config` and resolves what the run will do; reads the data splits' listings, trains nothing.

    Args:
        config: `TrainConfig`. The run to plan.
        name: callable or None. How the check spells a field in messages (`keras-vit train` passes
            `keras_vit.train_options.flag_name`); None for the field's own name. Defaults to None.

    Returns:
        A frozen `RunPlan` (the run directory is the run's: `keras_vit.training.run_dir.RunProgress`).
    """
    check_config(config, name=name)
    adapt, adapt_reason = (resolve_adapt(config.adapt, config.budget_seconds, config.head) if config.weights is not None
                           else ("scratch", "no checkpoint given"))
    default_recipe = {"scratch": DEFAULT_RECIPE, "probe_then_finetune": LPFT_RECIPE}.get(adapt, FINETUNE_RECIPE)
    recipe = recipes.get_recipe(config.recipe or default_recipe)
    validation_split = config.validation_split
    if adapt == "probe_then_finetune" and validation_split is None:
        validation_split = DECISION_SPLIT
    # First: MultiWorkerMirroredStrategy must be created before anything initialises TF's runtime.
    strategy = distribute.get_strategy(config.strategy, mesh=config.mesh)
    distribute.check_jit_compile(config.jit_compile, strategy)
    augment = config.augment or recipe.augment
    keras.utils.set_random_seed(config.seed)

    # Every split is found before the first step: a missing one must not cost a training run.
    train_source, validation_source, test_source = load_splits(
        config.dataset, config.train_split, config.test_split, validation_split, config.seed,
        config.data_dir, config.on_corrupt, config.download,
    )
    train_source = train_source.take(config.max_train_examples)
    num_train = train_source.count()
    batch_size, batch_reason = resolve_batch_size(config.batch_size, recipe.batch_size, num_train)
    batch_size = distribute.global_batch_size(batch_size, strategy)
    if num_train < batch_size:
        raise ValueError(f"batch_size={batch_size} is larger than the {num_train} training examples.")
    if test_source is not None:
        test_source = test_source.take(config.max_test_examples)
    if validation_source is not None:
        validation_source = validation_source.take(config.max_test_examples)
    cache = config.cache if config.cache is not None else train_source.keys is None and num_train <= 200_000
    data_channels = train_source.dataset.element_spec[0].shape[-1] or 3
    pretrained = zeroshot_head = None
    if config.weights is not None:
        pretrained, pretrained_architecture, channels, pretrained_stem = describe_pretrained(
            config, train_source.num_classes)
        if config.head == "zeroshot":
            from keras_vit.transfer.zeroshot_head import fold_head

            zeroshot_head = fold_head(config.weights, train_source.class_names, name=name)
        image_size, image_size_reason = pretrained.image_size[0], pretrained.image_size_reason
        converted = {(1, 3): ", grey images repeated", (3, 1): ", colour images to grey"}.get((data_channels, channels), "")
        channels_reason = "the checkpoint's" + converted
        scaling, scaling_reason = pretrained.scaling, pretrained.scaling_reason
    else:
        image_size, image_size_reason = resolve_image_size(config.image_size, config.variant, train_source.image_size,
                                                           f"dataset={config.dataset!r}")
        channels, channels_reason = resolve_channels(config.channels, data_channels, config.backbone is not None)
        scaling, scaling_reason = (config.scaling, "given") if config.scaling else ("unit", "the default")
    model_given = (config.variant is not None or config.backbone is not None or pretrained is not None
                   or any(v is not None for v in config.model_overrides.values()))
    stem_stride = conv_stem_stride(config.stem_args)  # the stem's, should the rules or the config choose it
    choice = budget.choose(
        config.budget_seconds, num_train, image_size, model_given=model_given,
        image_size_given=config.image_size is not None or pretrained is not None, epochs_given=config.epochs is not None,
        augment_given=config.augment is not None or config.recipe is not None,
        recipe_given=config.recipe is not None or pretrained is not None, data_channels=data_channels,
        stem_stride=stem_stride, checkpoint=config.weights is not None,
        **{name: getattr(config, name) for name in budget.CHOSEN},
    )
    augment = choice.augment or augment
    if choice.learning_rate_scale != 1.0:
        recipe = dataclasses.replace(recipe, learning_rate=recipe.learning_rate * choice.learning_rate_scale)
    if choice.weight_decay is not None:
        recipe = dataclasses.replace(recipe, weight_decay=choice.weight_decay)
    if choice.image_size != image_size:
        image_size, image_size_reason = choice.image_size, f"{image_size_reason}, resized for the conv stem"
    if pretrained is not None:
        architecture = pretrained_architecture
        patch_reason = "the checkpoint's"
    else:
        architecture, patch_reason = resolve_architecture(
            config.variant, config.model_overrides, image_size, chosen=choice.architecture,
            stem_stride=stem_stride if choice.stem else None)
    model = ModelSpec(variant=config.variant, architecture=architecture, image_size=image_size, channels=channels,
                      scaling=scaling, vit_args=dict(config.vit_args), stem_args=dict(config.stem_args),
                      **choice.model_choices())
    jit_compile = config.jit_compile
    if jit_compile is None and adapt == "probe_then_finetune" and keras.backend.backend() == "tensorflow":
        # The fine-tuning after a probe is a short part of a budget, and XLA's compilation of its
        # step (ViT-Ti/4: one step in the first 150 s of a 3-minute run on a loaded 2-core Xeon)
        # costs more than XLA's faster steps give back in it.
        jit_compile = False
        adapt_reason += "; XLA off: its compilation costs more than a short fine-tuning saves"
    if pretrained is not None:
        stem = pretrained_stem
    elif model.stem:
        stem = stems.stem_arguments(model.stem_args)
    elif config.backbone is not None:
        stem = OTHER_STEM
    else:
        stem = _resnet_stem(config.variant)
    if validation_source is not None and config.max_test_examples is None:
        validation_source = _validation_sample(validation_source, num_train)
    # The AMX rule reads the model's width, and a precision trial times the model at the run's batch,
    # with XLA as the run will set it, and its validation's compilations: resolved once the architecture is.
    precision, precision_reason = distribute.choose_precision(
        config.precision, width=architecture.get("hidden_size"), strategy=strategy,
        workload=precision_workloads.training_workload(
            architecture, image_size, channels, batch_size, jit_compile,
            recipe=_named_recipe(recipe), stem=stem) if stem != OTHER_STEM else None,
        resumed=_backup_precision(config), budget_seconds=config.budget_seconds,
        validation_shapes=precision_trial.validation_shapes(
            validation_source.count() if validation_source is not None else None, batch_size,
            whole_batches=distribute.whole_batches_only(strategy)))
    if jit_compile is None:
        jit_compile = distribute.default_jit_compile(precision=precision, strategy=strategy)
    steps_per_epoch = num_train // batch_size
    default_epochs = DEFAULT_EPOCHS if pretrained is None else max(DEFAULT_EPOCHS, -(-FINETUNE_STEPS // steps_per_epoch))
    epochs = config.epochs or choice.epochs or default_epochs
    given_back = None
    if adapt == "probe_then_finetune" and config.validation_split is None and test_source is not None and \
            config.max_train_examples is None and config.max_test_examples is None:
        # The decision's own share, with the test split to report on: the training images it was held out of.
        given_back = load_source(config.dataset, config.train_split, data_dir=config.data_dir,
                                 on_corrupt=config.on_corrupt, download=config.download)
        adapt_reason += (f"; the held-out {DECISION_SPLIT:.0%} decides once {GIVE_BACK_AT:.0%} of the fine-tuning "
                         "is done, then the fine-tuning learns from it too")
    return RunPlan(
        config=config, recipe=recipe, strategy=strategy, precision=precision, precision_reason=precision_reason,
        jit_compile=jit_compile,
        batch_size=batch_size, augment=augment, model=model, patch_reason=patch_reason, train=train_source,
        validation=validation_source, test=test_source, num_train=num_train, steps_per_epoch=steps_per_epoch,
        image_size_reason=image_size_reason, cache=cache, epochs=epochs, channels_reason=channels_reason,
        budget_reasons=choice.reasons, scaling_reason=scaling_reason, batch_reason=batch_reason,
        pretrained=pretrained, adapt=adapt, adapt_reason=adapt_reason, zeroshot_head=zeroshot_head,
        given_back=given_back,
    )


def _named_recipe(recipe):
    """`recipe`'s name where it is that `recipes.RECIPES` entry up to the rates a budget sets (what a
    precision trial compiles by name), else None."""
    named = recipes.RECIPES.get(recipe.name)
    same = named is not None and dataclasses.replace(
        named, learning_rate=recipe.learning_rate, weight_decay=recipe.weight_decay) == recipe
    return recipe.name if same else None


def _backup_precision(config):
    """The precision in the fingerprint of the backup `config` resumes from, else None."""
    if not config.resume or config.run_dir is None or config.precision != "auto":
        return None
    from keras_vit.training.run_dir import RunDirectory

    try:
        fingerprint = (RunDirectory(config.run_dir).backup_state() or {}).get("fingerprint")
    except (OSError, ValueError, AttributeError):  # the run reports an unreadable backup where it opens it
        return None
    return fingerprint.get("precision") if isinstance(fingerprint, dict) else None


def resolve_batch_size(batch_size: int | None, recipe_batch_size: int, num_train: int) -> tuple[int, str]:
    """The global batch and why, for the header: the given one, else the recipe's, held to small data.

    A training set smaller than `MIN_STEPS_PER_EPOCH` recipe batches gets the largest power of two
    that gives that many steps an epoch.

    Example:

    >>> resolve_batch_size(None, 256, 60_000), resolve_batch_size(64, 256, 250)
    ((256, "the recipe's"), (64, 'given'))
    >>> resolve_batch_size(None, 256, 250)
    (32, 'for 250 training images: at least 4 steps an epoch')
    """
    if batch_size is not None:
        return batch_size, "given"
    if num_train >= MIN_STEPS_PER_EPOCH * recipe_batch_size:
        return recipe_batch_size, "the recipe's"
    small = 2 ** (max(num_train // MIN_STEPS_PER_EPOCH, 1).bit_length() - 1)
    return min(small, recipe_batch_size), f"for {num_train:,} training images: at least {MIN_STEPS_PER_EPOCH} steps an epoch"


def resolve_adapt(adapt: str, budget_seconds: float | None, head: str = "zero") -> tuple[str, str]:
    """How a run from a checkpoint adapts it, and why, for the header.

    A zero-shot head (`head` "zeroshot") is fine-tuned from: a linear probe would fit the head
    anew and throw it away (`check_config` refuses "probe" with it).

    Example:

    >>> resolve_adapt("auto", None)[0], resolve_adapt("auto", 180)[0], resolve_adapt("probe", 180)
    ('finetune', 'probe_then_finetune', ('probe', 'given'))
    >>> resolve_adapt("auto", 180, "zeroshot")
    ('finetune', "from the zero-shot head, which takes the linear probe's place")
    """
    _validation.check_choice("adapt", adapt, choices.ADAPTS)
    if adapt != "auto":
        return adapt, "given"
    if head == "zeroshot":
        return "finetune", "from the zero-shot head, which takes the linear probe's place"
    if budget_seconds is None:
        return "finetune", "no budget: the paper's fine-tuning"
    return "probe_then_finetune", (
        f"a linear probe first (features computed once), then fine-tuning from it ({LPFT_RECIPE}) if the rest of the "
        f"budget buys {budget.MIN_FINETUNE_EPOCHS} epochs at the speed measured by the probe's forward pass; the "
        "fine-tuned model is kept only if it beats the probe on the validation images")


def finetune_after_probe(plan, probed) -> tuple[bool, str]:
    """Whether a run fine-tunes after its linear probe, and why (`budget.MIN_FINETUNE_EPOCHS`).

    Example:

    >>> import types
    >>> plan = types.SimpleNamespace(adapt="probe_then_finetune", num_train=250,
    ...                              config=types.SimpleNamespace(budget_seconds=180))
    >>> finetune_after_probe(plan, types.SimpleNamespace(seconds=10.0, forward_seconds_per_image=0.01))
    (True, 'fine-tuning from the probe: the 170 s left buy about 23 epochs')
    >>> finetune_after_probe(plan, types.SimpleNamespace(seconds=170.0, forward_seconds_per_image=0.01))[0]
    False
    """
    if plan.adapt != "probe_then_finetune":
        return plan.adapt == "finetune", "the probe is the result (--adapt probe)" if plan.adapt == "probe" else ""
    left = plan.config.budget_seconds - probed.seconds
    # A training step costs about three forward passes.
    epochs = left / max(3 * probed.forward_seconds_per_image * plan.num_train, 1e-9)
    if epochs >= budget.MIN_FINETUNE_EPOCHS:
        return True, f"fine-tuning from the probe: the {left:.0f} s left buy about {epochs:.0f} epochs"
    return False, (f"the probe is the result: the {max(left, 0):.0f} s left buy about {max(epochs, 0):.1f} fine-tuning "
                   f"epochs, fewer than {budget.MIN_FINETUNE_EPOCHS}")


def _validation_sample(source, num_train):
    """The validation examples of each epoch: a sample of a set more than twice `VALIDATION_SAMPLE` and the training set."""
    keep = max(VALIDATION_SAMPLE, num_train)
    if source.count() <= 2 * keep:
        return source
    sample = source.take(keep)
    sample.description = f"{keep:,} of {source.description} (a sample for the per-epoch validation)"
    return sample


def describe_pretrained(config, num_classes):
    """(`keras_vit.transfer.Pretrained`, its core architecture fields, its input channels, its stem) of `config.weights`.

    The stem: the conv stem's arguments, a hybrid's ResNet (`precision_workloads.resnet_stem`),
    `OTHER_STEM` for a custom backbone, None for patches read from the pixels.

    Model flags that contradict the checkpoint are refused by name. The model is built here to
    read them and built again inside the run's strategy and precision (`build_model`).
    """
    from keras_vit.transfer.pretrained import load_pretrained

    model, pretrained = load_pretrained(config.weights, num_classes=num_classes, image_size=config.image_size,
                                        scaling=config.scaling, patch_size=config.model_overrides.get("patch_size"))
    arch = model.vit_config
    given = {k: v for k, v in config.model_overrides.items() if v is not None}
    if config.variant is not None:
        row = configs.get_variant(config.variant)
        given = {**{k: getattr(row, k) for k in MODEL_KEYS}, **given}
    wrong = [f"{'--' + k.replace('_', '-')}={v} (the checkpoint's {arch[k]})" for k, v in given.items() if arch.get(k) != v]
    if wrong:
        what = f"variant {config.variant!r}: " if config.variant is not None else ""
        raise ValueError(f"Contradicting {what}{', '.join(wrong)} and weights={config.weights!r}: the checkpoint states "
                         "the model; leave the model flags out.")
    if pretrained.image_size[0] != pretrained.image_size[1]:
        raise ValueError(f"The checkpoint {config.weights!r} is built for {pretrained.image_size[0]}x"
                         f"{pretrained.image_size[1]} images: pass image_size (--image-size N) for a square input.")
    if config.channels is not None and config.channels != arch["channels"]:
        raise ValueError(f"Contradicting --channels={config.channels} and weights={config.weights!r}: the checkpoint "
                         f"takes {arch['channels']}-channel images (the data are converted to them). Leave it out.")
    stem = stems.conv_stem_arguments(model)
    if stem is None and arch.get("stem") is not None:
        stem = precision_workloads.resnet_stem(arch["stem"], arch["stem_width"])
    elif stem is None and arch.get("backbone") is not None:
        stem = OTHER_STEM
    return pretrained, {key: arch[key] for key in MODEL_KEYS}, arch["channels"], stem


def _resnet_stem(variant) -> dict | None:
    """A hybrid variant's BiT ResNet, as a precision trial builds it again; None for a variant without one.

    >>> _resnet_stem("R50_B16"), _resnet_stem("B16"), _resnet_stem(None)
    ({'resnet': [3, 4, 9], 'width': 64}, None, None)
    """
    row = configs.get_variant(variant) if variant is not None else None
    if row is None or row.stem is None:
        return None
    return precision_workloads.resnet_stem(row.stem, row.stem_width)
