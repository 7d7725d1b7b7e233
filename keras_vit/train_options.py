"""The options of a training run, each declared once: `TrainConfig`, the `keras-vit train` flags, the check.

Each row of `OPTIONS` is one option: its name, type, default, choices, check, the text of its
field (`TrainConfig`'s docstring) and of its flag (`keras-vit train --help`), whether it enters
the backup's fingerprint and the settings record of the results
(`keras_vit.training.plan.RunPlan`), and its part of the header a run prints
(`keras_vit.training.report.header`), by the functions of `keras_vit.train_option_records`.
`TrainConfig`, `add_train_flags`, `config_from_flags`, `check_config`, the records and the
header's parts are made from the rows, so a new option is one row here plus the code that uses it.
The module imports no Keras or TensorFlow: `keras-vit train --help` reads it.

Example:

>>> config = TrainConfig(variant="tiny", epochs=3)
>>> config.dataset, config.epochs, OPTIONS["epochs"].flag_name
('sample', 3, '--epochs')
>>> check_config(TrainConfig(epochs=0), name=flag_name)
Traceback (most recent call last):
...
ValueError: Invalid --epochs=0. Expected an integer >= 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Callable

from keras_vit import _validation, choices, configs
from keras_vit import train_option_records as records
from keras_vit.train_option_records import UNSET

# The flag groups of `keras-vit train --help`, in their order.
GROUPS = ("data", "model", "training", "output")


@dataclasses.dataclass(frozen=True)
class Flag:
    """How an option appears on `keras-vit train`.

    Args:
        group: str. One of `GROUPS`.
        help: str. The flag's help text.
        spelling: str or None. The flag; None for "--" and the option's name with dashes.
        kwargs: dict. More `argparse.add_argument` arguments (type, action, metavar, dest, its
            own choices or default). Defaults to {}.
        from_args: callable or None. The option's value from the parsed arguments; None reads
            the flag's own destination. Defaults to None.
        shown: callable or None. The value as the flag spells it, for messages (minutes for
            seconds); None shows the option's value. Defaults to None.
        extra: tuple. (spelling, kwargs) of more flags setting the same option (an alias).
            Defaults to ().
    """

    group: str
    help: str
    spelling: str | None = None
    kwargs: dict = dataclasses.field(default_factory=dict)
    from_args: Callable | None = None
    shown: Callable | None = None
    extra: tuple = ()


@dataclasses.dataclass(frozen=True)
class Option:
    """One training option.

    Args:
        name: str. The `TrainConfig` field.
        type: str. The field's annotation ("int | None"); `doc` says it in words.
        default: object. The default; a callable with `factory` set makes a fresh one (a list).
        doc: str. The field's text in `TrainConfig`'s docstring (with its "Defaults to").
        flag: `Flag` or None. Its `keras-vit train` flag; None for library-only options.
        choices: tuple or None. The values it takes (None unset is always allowed). Defaults to None.
        check: callable or None. `check(label, value, name)` raises ValueError for a bad
            value (not None); `label` is how the message names the option, `name` how it names
            other fields. Defaults to None.
        fingerprint: bool or callable. Whether it enters the backup's fingerprint (a backup of
            another value is not resumed); a callable `f(plan)` gives the recorded value (`UNSET`
            for none), True the plan's resolved value of the same name, else the config's.
            Defaults to False.
        settings: bool or callable. The same for the settings record of the results. Defaults to False.
        header: callable, str or None. Its part of the header a run prints before training
            (`keras_vit.training.report.header`): `header(plan)` gives the text with its leading
            separator (None: nothing this run); a str names the option whose part shows it too;
            None: not shown. An option the header's layout does not place goes at the end of its
            flag group's line. Defaults to None.
        factory: bool. `default` is a factory. Defaults to False.
    """

    name: str
    type: str
    default: object
    doc: str
    flag: Flag | None = None
    choices: tuple | None = None
    check: Callable | None = None
    fingerprint: bool | Callable = False
    settings: bool | Callable = False
    header: Callable | str | None = None
    factory: bool = False

    @property
    def flag_name(self) -> str | None:
        """Its `keras-vit train` flag, e.g. "--budget-minutes"; None for a library-only option."""
        if self.flag is None:
            return None
        return self.flag.spelling or flag_name(self.name)


def flag_name(field: str) -> str:
    """The flag of a field: the option's own (`--budget-minutes` for budget_seconds), else "--" + dashes.

    Example:

    >>> flag_name("max_train_examples"), flag_name("budget_seconds"), flag_name("patch_size")
    ('--max-train-examples', '--budget-minutes', '--patch-size')
    """
    option = OPTIONS.get(field)
    if option is not None and option.flag is not None and option.flag.spelling:
        return option.flag.spelling
    return "--" + field.replace("_", "-")


def _positive_int(label, value, name):
    _validation.check_positive_int(label, value)


def _writable_folder(label, value, name):
    _validation.check_writable_folder(label, value)


def _file_stem(label, value, name):
    if not isinstance(value, str) or value in ("", ".", "..") or any(sep in value for sep in ("/", "\\", os.sep)):
        raise ValueError(f"Invalid {label}={value!r}. Expected a file name without folders (the model is saved as "
                         f"<output dir>/<name>.keras; the output dir names the folder).")


def _check_model_overrides(label, overrides, name):
    unknown = set(overrides) - set(choices.MODEL_FIELDS)
    if unknown:
        raise ValueError(f"Invalid {label} keys {sorted(unknown)}. Expected some of {list(choices.MODEL_FIELDS)}.")
    for field, value in overrides.items():
        if value is not None:
            _validation.check_positive_int(name(field), value)


def _check_mesh(label, value, name):
    from keras_vit import distribution

    distribution.parse_mesh(value)


def _check_model_arguments(label, value, name):
    if value == {}:
        return
    from keras_vit.models import spec

    spec.check_model_arguments(label, value)


_OPTIONS = (
    Option("dataset", "str", "sample", 'str. "sample", a folder, or a tfds name. Defaults to "sample".',
           Flag("data", "'sample' (shipped Fashion-MNIST sample, the default), a folder of class sub-folders (or of "
                "train/ and test/ sub-folders), a folder with the Fashion-MNIST IDX files, or a tensorflow-datasets "
                "name such as cifar10"),
           fingerprint=True, settings=True,
           header=lambda plan: plan.config.dataset),
    Option("data_dir", "str | None", None, "str or None. tfds data_dir. Defaults to None.",
           Flag("data", "tensorflow-datasets data_dir (default: tensorflow-datasets' own)")),
    Option("train_split", "str", "train", 'str. Defaults to "train".',
           Flag("data", "split to train on (default: train)"), fingerprint=True,
           header=lambda plan: f": train {records.count_text(plan.train)}({plan.config.train_split})"),
    Option("test_split", "str | None", "test",
           "str or None. Split evaluated at the end; None skips it. A flat class folder has none (its held-out "
           'validation share is reported instead). Defaults to "test".',
           Flag("data", "split to report test accuracy on, '' for none; a folder of class sub-folders has none "
                "(default: test)", from_args=lambda args: args.test_split or None),
           header=records.evaluation_header),
    Option("validation_split", "float | None", None,
           "float or None. Share of the training split held out for per-epoch validation, chosen by `seed`; None "
           "validates on the test split (a flat class folder holds out 0.1). Defaults to None.",
           Flag("data", "share of the training split held out (chosen by --seed) for per-epoch validation (default: "
                "none, the test split validates; a folder of class sub-folders holds out 0.1)", kwargs={"type": float}),
           check=lambda label, value, name: _validation.check_fraction(label, value), fingerprint=True,
           header=lambda plan: f"; validation: {plan.validation.description}" if plan.validation is not None else None),
    Option("download", "bool", False, "bool. Let tfds download. Defaults to False.",
           Flag("data", "let tensorflow-datasets download missing data", kwargs={"action": "store_true"})),
    Option("on_corrupt", "str", "skip", 'str. "skip" or "error" for corrupt image files. Defaults to "skip".',
           Flag("data", "corrupt image files in a folder: skip them (and report the count) or stop (default: skip)"),
           choices=("skip", "error")),
    Option("resize", "str", "bilinear",
           'str. How images of another size reach the model\'s input side, unless an augmentation crop resizes '
           'them: "bilinear" or "pad" (centred zero padding, larger images centre-cropped). `keras-vit predict` '
           'and `evaluate` resize bilinearly. Defaults to "bilinear".',
           Flag("data", "images of another size than the model's input: bilinear (resized) or pad (centred zero "
                "padding, larger images centre-cropped; default: bilinear)"),
           choices=choices.RESIZES, fingerprint=records.unless_default("resize"), settings=records.unless_default("resize"),
           header=records.unless_default_header("resize")),
    Option("variant", "str | None", None, "str or None. A `configs.VARIANTS` name; None for `DEFAULT_MODEL`.",
           Flag("model", f"ViT variant, one of {', '.join(configs.VARIANTS)} (default: a small ViT: patch 7, D 128, 6 "
                "layers, 4 heads, MLP 256)",
                from_args=lambda args: None if args.variant is None else configs.normalize_variant_name(args.variant)),
           check=lambda label, value, name: configs.get_variant(value),
           fingerprint=lambda plan: plan.config.variant or "default",
           settings=lambda plan: plan.config.variant or "default",
           header=lambda plan: ("the checkpoint's ViT" if plan.pretrained is not None
                                else plan.config.variant or "default ViT")),
    Option("weights", "str | None", None,
           "str or None. A checkpoint to adapt instead of training from scratch: anything "
           "`keras_vit.transfer.load_pretrained` takes (a `.npz`, safetensors file, Hugging Face or timm Hub folder, "
           'a name of `keras_vit.weights.CHECKPOINTS`, "hf-hub:ORG/NAME[@REV]", or a `.keras` model). Its '
           "architecture, pixel scaling and resolution are read from it, its head is replaced by a "
           "zero-initialised one for the data's classes. Defaults to None.",
           Flag("model", "adapt a pre-trained checkpoint instead of training from scratch: a .npz, safetensors file, "
                "Hugging Face or timm Hub folder, a .keras model, a preset name or hf-hub:ORG/NAME[@REVISION] "
                "(HF_TOKEN for gated repositories, HF_HUB_OFFLINE=1 for the cache alone); its architecture, "
                "scaling and resolution are read from it and its head replaced for the data's classes",
                kwargs={"metavar": "SPEC"}),
           fingerprint=True,
           settings=lambda plan: plan.pretrained.source if plan.pretrained is not None else None,
           header=records.weights_header),
    Option("adapt", "str", "auto",
           'str. With `weights`: "finetune" (every weight trained), "probe" (a linear probe of the frozen '
           'backbone: features computed once, a head fitted to them), or "auto" (with a budget: the probe first, '
           "then fine-tuning from it when the rest of the budget buys `budget.MIN_FINETUNE_EPOCHS` epochs at the "
           'measured speed; without one, or with `head` "zeroshot": "finetune"). Defaults to "auto".',
           Flag("model", "with --weights: finetune (every weight), probe (a linear probe of the frozen backbone: "
                "features computed once), auto (with --budget-minutes a probe, then fine-tuning from it when the "
                "budget buys it; without, finetune; default: auto)",
                extra=(("--probe", {"dest": "adapt", "action": "store_const", "const": "probe",
                                    "help": "the same as --adapt probe"}),)),
           choices=choices.ADAPTS, fingerprint=True, settings=True,
           header=records.adapt_header),
    Option("head", "str", "zero",
           'str. With `weights`: "zero" (a new zero-initialised head) or "zeroshot" (an image-text checkpoint\'s '
           "zero-shot head: each class name in \"This is a photo of {}.\", embedded by its text tower, scaled and "
           "folded into the head on the unit image embedding; fine-tuned from under softmax cross-entropy, "
           '`keras_vit.transfer.zeroshot_head`). Defaults to "zero".',
           Flag("model", "with --weights: zero (a new zero-initialised head) or zeroshot (a CLIP or SigLIP "
                "checkpoint's text tower folds the class names into the head, which fine-tuning starts from; "
                "no linear probe; default: zero)"),
           choices=choices.HEADS, fingerprint=records.unless_default("head"), settings=records.unless_default("head"),
           header="weights"),
    Option("model_overrides", "dict", dict, "dict. patch_size/hidden_size/num_layers/num_heads/mlp_dim overrides.",
           Flag("model", "override the variant's {field}",
                from_args=lambda args: {k: getattr(args, k) for k in choices.MODEL_FIELDS}),
           check=_check_model_overrides, factory=True,
           header=records.architecture_header),
    Option("backbone", "object", None,
           "Keras model or layer, callable or None. A stem for a hybrid ViT (see `keras_vit.ViT(backbone=)`); a "
           "callable without arguments is called inside the distribution strategy's scope to build it. "
           "Defaults to None.",
           fingerprint=records.backbone_name),
    Option("vit_args", "dict", dict,
           'dict. More `keras_vit.ViT` arguments of a model trained from scratch, e.g. {"position_embedding": '
           '"sincos2d"}; not those other options set (`keras_vit.models.spec.SPEC_VIT_ARGS`). Defaults to {}.',
           check=_check_model_arguments, fingerprint=records.set_arguments("vit_args"), settings=records.set_arguments("vit_args"),
           factory=True,
           header=lambda plan: f", ViT arguments {plan.vit_args}" if plan.vit_args else None),
    Option("stem_args", "dict", dict,
           "dict. Arguments of the conv stem (`keras_vit.models.stems.conv_stem`: filters, strides); only with the "
           "conv stem. Defaults to {}.",
           check=_check_model_arguments, fingerprint=records.set_arguments("stem_args"), settings=records.set_arguments("stem_args"),
           factory=True,
           header="stem"),
    Option("stem", "str", "auto",
           'str. "auto": the conv stem (`keras_vit.models.stems.conv_stem`) when a budget\'s rules choose it '
           '(`keras_vit.training.budget`); "conv": always (on the default model or the variant); "none": never. '
           'Defaults to "auto".',
           Flag("model", "conv stem before the encoder: auto (when --budget-minutes' rules choose it for images up "
                "to 64 px and no model flag is given), conv, none (default: auto)"),
           choices=choices.STEMS, fingerprint=True, settings=True,
           header=records.stem_header),
    Option("tokenizer", "str", "auto",
           'str. "auto": shifted patches (`keras_vit.models.stems.shifted_patch_stem`) for the plain default ViT '
           "when a budget's rules choose them (`keras_vit.training.budget`), else \"patches\", the paper's patch "
           'embedding; "shifted": always (the default model, no conv stem). Defaults to "auto".',
           Flag("model", "how the plain ViT makes its tokens: patches (the paper's), shifted (shifted-patch "
                "tokenization, Lee et al. 2021: each patch also holds the pixels half a patch around it); auto: "
                "shifted when --budget-minutes' rules choose it, else patches (default: auto)"),
           choices=choices.TOKENIZERS, fingerprint=True, settings=True,
           header="stem"),
    Option("pooling", "str", "auto",
           "str. \"auto\": what a budget's rules choose (`keras_vit.training.budget`), else \"token\"; \"token\" "
           '(the class token) or "gap" (the mean of the tokens). Defaults to "auto".',
           Flag("model", "token (the class token) or gap (the mean of the tokens); auto: gap when --budget-minutes' "
                "rules choose it for a plain ViT, else token (default: auto)"),
           choices=choices.TRAIN_POOLINGS, fingerprint=True, settings=True,
           header=lambda plan: f", pooling {plan.pooling}" if plan.pretrained is None
           else f", pooling {plan.pretrained.pooling} (the checkpoint's)"
           + (f", {plan.pretrained.register_tokens} register tokens" if plan.pretrained.register_tokens else "")),
    Option("attention_init", "str", "auto",
           'str. "auto": mimetic initialization of the attention kernels (`keras_vit.models.mimetic`) when a '
           'budget\'s rules choose it, else Keras\' own; "mimetic": always; "random": never. Defaults to "auto".',
           Flag("model", "attention kernels: auto (mimetic initialization when --budget-minutes' rules choose it), "
                "mimetic (Trockman & Kolter 2023) or random, Keras' own initializers (default: auto)"),
           choices=choices.ATTENTION_INITS, fingerprint=True, settings=True,
           header=lambda plan: f", attention init {plan.attention_init}" if plan.pretrained is None else None),
    Option("image_size", "int | None", None,
           "int or None. Defaults to the images' own size when they all share one square size (with the default "
           "model; a folder whose images differ needs it), else the variant's.",
           Flag("model", "input side in pixels (default: the variant's, or the images' own when they share one "
                "square size; needed when a folder's images differ in size)", kwargs={"type": int}),
           check=_positive_int, fingerprint=True, settings=True,
           header=lambda plan: (f"; images {plan.image_size}x{plan.image_size}x{plan.channels} "
                                f"({plan.image_size_reason}; {plan.channels_reason})")),
    Option("channels", "int | None", None,
           "int or None. Model input channels, 1 or 3; None for the images' own as read (1 for grey data such as "
           "Fashion-MNIST, 3 for colour and for folders, which decode to RGB), or 3 with a backbone given. "
           "Defaults to None.",
           Flag("model", "input channels of the model; default: the images' own as read (1 for grey data, 3 for "
                "colour and folders)", kwargs={"type": int}),
           choices=choices.CHANNELS, fingerprint=True, settings=True,
           header="image_size"),
    Option("scaling", "str | None", None,
           'str or None. Pixel scaling put in the model (`configs.SCALINGS`); None for "unit", or with `weights` '
           "the checkpoint's own (refused where it states none). Defaults to None.",
           Flag("model", "pixel scaling built into the model: unit [0,1], symmetric [-1,1], imagenet or clip "
                "mean/std (default: unit; with --weights the checkpoint's own, read from its files)"),
           choices=tuple(configs.SCALINGS), fingerprint=True, settings=True,
           header=lambda plan: f", scaling {plan.scaling} ({plan.scaling_reason})"),
    Option("recipe", "str | recipes.Recipe | None", None,
           "str, `recipes.Recipe` or None. A `recipes.RECIPES` name, or a recipe of your own (e.g. "
           '`dataclasses.replace(recipes.get_recipe("compact"), name="mine", learning_rate=4e-3)`); None for '
           '"compact" ("finetune_adamw" with `weights`). Defaults to None.',
           Flag("training", "optimizer/schedule/regularisation recipe (default: compact; with --weights "
                "finetune_adamw)", kwargs={"choices": choices.RECIPES}),
           fingerprint=records.recipe_fingerprint, settings=lambda plan: plan.recipe.name,
           header=lambda plan: (f"recipe {plan.recipe.name} (peak learning rate {plan.peak_learning_rate:g}, "
                                f"weight decay {plan.recipe.weight_decay:g})")),
    Option("augment", "object", None,
           "str, `keras_vit.data.augment.AugmentConfig` or None. A preset name (`augment.PRESETS`) or a config of "
           "your own; None for the recipe's, or with a budget and no recipe given the budget's "
           "(`keras_vit.training.budget`). Defaults to None.",
           Flag("training", "augmentation preset (default: the recipe's)", kwargs={"choices": choices.AUGMENT_PRESETS}),
           fingerprint=lambda plan: plan.augment_name, settings=lambda plan: plan.augment_name,
           header=lambda plan: f", augment {plan.augment if isinstance(plan.augment, str) else 'custom'}"),
    Option("epochs", "int | None", None,
           "int or None. Epoch limit; None for 10, or with a budget as many as it buys. Defaults to None.",
           Flag("training", "number of epochs (default: 10, or with --budget-minutes as many as the budget buys)",
                kwargs={"type": int}),
           check=_positive_int, fingerprint=True, settings=True,
           header=records.epochs_header),
    Option("batch_size", "int | None", None,
           "int or None. Global batch size; None for the recipe's. Defaults to None.",
           Flag("training", "global batch size, split over replicas (default: the recipe's, smaller for a small "
                "training set: at least 4 steps an epoch)", kwargs={"type": int}),
           check=_positive_int, fingerprint=True, settings=True,
           header=lambda plan: f" at batch {plan.batch_size} ({plan.batch_reason})"),
    Option("precision", "str", "auto",
           'str. "auto", "float32", "mixed_bfloat16", "mixed_float16". Defaults to "auto".',
           Flag("training", "dtype policy (default: auto, by hardware)"),
           choices=choices.PRECISIONS, fingerprint=True, settings=True,
           header=lambda plan: f", precision {plan.precision} ({plan.precision_reason})"),
    Option("jit_compile", "bool | None", None,
           "bool or None. None picks by Keras backend, hardware and precision (`distribute.default_jit_compile`). "
           "Defaults to None.",
           Flag("training", "compile the train step: XLA, or torch.compile on PyTorch (default: auto, by Keras "
                "backend, hardware and precision)", kwargs={"choices": ("auto", "on", "off"), "default": "auto"},
                from_args=lambda args: {"auto": None, "on": True, "off": False}[args.jit_compile]),
           settings=True,
           header=records.compilation_header),
    Option("strategy", "str", "default",
           'str. "default"; "mirrored", "multi_worker", "tpu" (tf.distribute, TensorFlow only); "data_parallel", '
           '"model_parallel" (keras.distribution, JAX only). Defaults to "default".',
           Flag("training", "mirrored, multi_worker, tpu: tf.distribute (TensorFlow); data_parallel, "
                "model_parallel: keras.distribution over a device mesh, on JAX (default: default, one device)"),
           choices=choices.STRATEGIES, settings=lambda plan: plan.config.strategy,
           header=records.strategy_header),
    Option("mesh", "str | None", None,
           'str or None. "BATCHxMODEL" device mesh of "model_parallel" (and "data_parallel", "Nx1"); None uses '
           "every device (model parallel: all on the model axis). Defaults to None.",
           Flag("training", "BATCHxMODEL devices of --strategy model_parallel, e.g. 2x4 (default: every device on "
                "the model axis; data_parallel: Nx1)"),
           check=_check_mesh, settings=True),
    Option("run_dir", "str | None", os.path.join("runs", "train"),
           'str or None. Logs and crash backups; None keeps none. Defaults to "runs/train".',
           Flag("output", "logs (TensorBoard, history.csv) and crash backups; the run touches only the files it "
                "wrote there (default: runs/train)"),
           check=_writable_folder,
           header=lambda plan: f"run dir {os.path.abspath(plan.config.run_dir) if plan.config.run_dir else 'none'}"),
    Option("output_dir", "str | None", "saved_models",
           'str or None. Where the final model goes; None saves nothing. Defaults to "saved_models".',
           Flag("output", "where the trained model is saved (default: saved_models)"), check=_writable_folder,
           header=records.output_header),
    Option("name", "str", "vit", 'str. File name stem of the saved model. Defaults to "vit".',
           Flag("output", "file name stem of the saved model (default: vit)"), check=_file_stem,
           header="output_dir"),
    Option("export", "bool", False,
           "bool. Also write the SavedModel (`<output_dir>/<name>/<version>/`) and `<name>.tflite`. "
           "Defaults to False.",
           Flag("output", "skip the SavedModel (<output-dir>/<name>/<version>) and <name>.tflite exports (written "
                "by default)", spelling="--no-export", kwargs={"dest": "export", "action": "store_false"}),
           header="output_dir"),
    Option("resume", "bool", True,
           "bool. Resume from the run directory's backup (of the same configuration); False moves an existing "
           "backup aside and starts anew. Defaults to True.",
           Flag("output", "resume from the run directory's backup after a crash (default); --no-resume starts "
                "anew and moves an existing backup and history aside",
                kwargs={"action": argparse.BooleanOptionalAction})),
    Option("seed", "int", 0, "int. Defaults to 0.", Flag("training", "random seed (default: 0)", kwargs={"type": int}),
           check=lambda label, value, name: _validation.check_seed(label, value), fingerprint=True, settings=True),
    Option("budget_seconds", "float | None", None,
           "float or None. Wall-clock training budget (> 0), summed over resumed parts; None for no budget. "
           "Defaults to None.",
           Flag("training", "stop after this many minutes of training, summed over resumed parts; > 0 (default: "
                "no budget)", spelling="--budget-minutes", kwargs={"type": float},
                from_args=lambda args: args.budget_minutes * 60 if args.budget_minutes is not None else None,
                shown=lambda seconds: seconds / 60),
           check=lambda label, value, name: _validation.check_positive_number(label, value),
           header=lambda plan: (f", budget {plan.config.budget_seconds / 60:g} min"
                                if plan.config.budget_seconds is not None else None)),
    Option("max_train_examples", "int | None", None,
           "int or None. Use only the first N training examples. Defaults to None.",
           Flag("data", "use only the first N training examples (default: all)", kwargs={"type": int}),
           check=_positive_int),
    Option("max_test_examples", "int | None", None,
           "int or None. Use only the first N test (and validation) examples. Defaults to None.",
           Flag("data", "use only the first N test examples (default: all)", kwargs={"type": int}),
           check=_positive_int),
    Option("verbose", "int | str", "auto", 'int or str. Keras verbosity (1 = progress bar). Defaults to "auto".',
           Flag("output", "one line per epoch instead of a progress bar", spelling="--quiet",
                kwargs={"action": "store_true"}, from_args=lambda args: 2 if args.quiet else 1)),
    Option("cache", "bool | None", None,
           "bool or None. Cache decoded data in memory; None caches tfds sets of known size under 200k examples "
           "(folders stream, arrays are in memory). Defaults to None."),
    Option("callbacks", "list", list, "list. Extra Keras callbacks. Defaults to [].", factory=True),
)
OPTIONS = {option.name: option for option in _OPTIONS}


def _config_doc() -> str:
    args = "\n".join(f"        {option.name}: {option.doc}" for option in _OPTIONS)
    return f'''Everything one training run needs; `keras-vit train --help` documents each field.

    Made from `keras_vit.train_options.OPTIONS`, one row per field.

    Args:
{args}

    Example:

    >>> config = TrainConfig(variant="tiny", epochs=3, model_overrides={{"num_layers": 1}})
    >>> config.dataset, config.recipe, config.batch_size, config.precision, config.stem
    ('sample', None, None, 'auto', 'auto')
    >>> dataclasses.replace(config, recipe="deit").recipe
    'deit'
    '''


TrainConfig = dataclasses.make_dataclass(
    "TrainConfig",
    [(option.name, option.type,
      dataclasses.field(default_factory=option.default) if option.factory else dataclasses.field(default=option.default))
     for option in _OPTIONS],
    namespace={"__doc__": _config_doc(), "__module__": __name__},
)


def add_train_flags(parser) -> dict:
    """Adds the flag of every option to `keras-vit train`'s `parser`; returns its argument groups by name."""
    groups = {group: parser.add_argument_group(group) for group in GROUPS}
    for option in _OPTIONS:
        flag = option.flag
        if flag is None:
            continue
        group = groups[flag.group]
        if option.name == "model_overrides":  # one flag per field
            for field in choices.MODEL_FIELDS:
                group.add_argument(flag_name(field), type=int, help=flag.help.format(field=field.replace("_", " ")))
            continue
        kwargs = {"help": flag.help}
        if option.choices is not None:
            kwargs["choices"] = option.choices
        if "action" not in flag.kwargs or flag.kwargs["action"] is argparse.BooleanOptionalAction:
            kwargs["default"] = option.default
        kwargs.update(flag.kwargs)
        group.add_argument(option.flag_name, **kwargs)
        for spelling, extra in flag.extra:
            group.add_argument(spelling, **extra)
    return groups


def config_from_flags(args):
    """The `TrainConfig` of `keras-vit train`'s parsed arguments."""
    values = {}
    for option in _OPTIONS:
        if option.flag is not None:
            values[option.name] = option.flag.from_args(args) if option.flag.from_args else getattr(args, option.name)
    return TrainConfig(**values)


def check_config(config, name=None):
    """Checks `config` before any data is read: ValueError naming the field (or with `name`, the flag).

    Every option's own check, then the settings that contradict each other. The one check of a
    run: `keras_vit.training.plan.resolve` calls it.

    Args:
        config: `TrainConfig`. The run to check.
        name: callable or None. How a field is spelled in messages (`keras-vit train` passes
            `flag_name`, "--max-train-examples"); with it, values are shown as the flag takes
            them (minutes for --budget-minutes). Defaults to None (the field's own name).

    Example:

    >>> check_config(TrainConfig(budget_seconds=-60), name=flag_name)
    Traceback (most recent call last):
    ...
    ValueError: Invalid --budget-minutes=-1.0. Expected a number > 0.
    """
    as_flags = name is not None
    name = name or (lambda field: field)
    for option in _OPTIONS:
        value = getattr(config, option.name)
        if value is None:
            continue
        shown = option.flag.shown(value) if as_flags and option.flag is not None and option.flag.shown else value
        if option.choices is not None:
            _validation.check_choice(name(option.name), shown, option.choices)
        if option.check is not None:
            option.check(name(option.name), shown, name)
    _check_weights_config(config, name)
    from keras_vit.models.spec import check_tokens  # the rule lives with the spec, which asks it too

    check_tokens(config.stem, config.tokenizer, config.variant, config.backbone is not None, name=name)


def _check_weights_config(config, name):
    """Refuses the settings that contradict adapting a checkpoint (or that need one), by name."""
    if config.weights is None:
        for field in ("adapt", "head"):
            if getattr(config, field) != OPTIONS[field].default:
                raise ValueError(f"{name(field)}={getattr(config, field)!r} adapts a checkpoint: pass "
                                 f"{name('weights')} too.")
        return
    if config.head == "zeroshot" and config.adapt == "probe":
        raise ValueError(f"Contradicting {name('head')}='zeroshot' and {name('adapt')}='probe': a linear probe fits "
                         f"the head anew, throwing the zero-shot head away. Pass {name('adapt')} finetune (or auto), "
                         f"or leave {name('head')} out.")
    if not isinstance(config.weights, str) or not config.weights:
        raise ValueError(f"Invalid {name('weights')}={config.weights!r}. Expected a checkpoint path, name or hf-hub: id.")
    # The checkpoint states the model: settings that build another one contradict it.
    for field in ("stem", "tokenizer", "attention_init", "pooling", "vit_args", "stem_args"):
        value, option = getattr(config, field), OPTIONS[field]
        if value != (option.default() if option.factory else option.default):
            raise ValueError(f"Contradicting {name(field)}={value!r} and {name('weights')}={config.weights!r}: the "
                             f"checkpoint states the model. Leave {name(field)} out.")
    if config.backbone is not None:
        raise ValueError(f"Contradicting backbone= and {name('weights')}={config.weights!r}: the checkpoint states the model.")
    if config.resize != OPTIONS["resize"].default:
        # The linear probe's features and the checkpoint's own preprocessing resize bilinearly.
        raise ValueError(f"Contradicting {name('resize')}={config.resize!r} and {name('weights')}={config.weights!r}: "
                         f"a checkpoint's images are resized bilinearly. Leave {name('resize')} out.")


def record(plan, which: str) -> dict:
    """The values of the options that enter `which` ("fingerprint" or "settings") of `plan`.

    Each is the row's own function of the plan (left out where it gives `UNSET`), or the plan's
    resolved value of the same name (a field or property), or the config's.
    """
    plan_type = type(plan)
    resolved = {f.name for f in dataclasses.fields(plan)} | {
        name for name in dir(plan_type) if isinstance(getattr(plan_type, name), property)}
    values = {}
    for option in _OPTIONS:
        how = getattr(option, which)
        if how is False:
            continue
        if callable(how):
            value = how(plan)
        elif option.name in resolved:
            value = getattr(plan, option.name)
        else:
            value = getattr(plan.config, option.name)
        if value is not UNSET:
            values[option.name] = value
    return values


def header_parts(plan) -> dict:
    """The parts of the run's header the options give for `plan`, by option name (`Option.header`).

    Options shown within another's part, and those with nothing to show this run, are left out.
    """
    parts = {}
    for option in _OPTIONS:
        if callable(option.header):
            text = option.header(plan)
            if text is not None:
                parts[option.name] = text
    return parts
