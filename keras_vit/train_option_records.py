"""How the training options are written down: the backup's fingerprint, the settings record, the run's header.

The functions the rows of `keras_vit.train_options.OPTIONS` name for their `fingerprint`,
`settings` and `header`: each takes the run's plan (`keras_vit.training.plan.RunPlan`) and gives
the value recorded (`UNSET` to leave it out) or the text shown. Like the options, it imports no
Keras or TensorFlow.

Example:

>>> as_stored({"widths": (16, 32)})
{'widths': [16, 32]}
"""

from __future__ import annotations

import dataclasses
import os

# What an option's record function returns to leave its key out: an option that is not set then
# adds nothing, and backups written before the option existed still resume.
UNSET = object()


def _default(config, field):
    """The field's default, as `TrainConfig` (made from the options' table) declares it."""
    (declared,) = (f for f in dataclasses.fields(config) if f.name == field)
    return declared.default_factory() if declared.default is dataclasses.MISSING else declared.default


def as_stored(value):
    """`value` as the backup's JSON gives it back (tuples as lists), so that a resumed run compares equal."""
    import json

    return json.loads(json.dumps(value))


def set_arguments(field):
    """The record of a dict of arguments: left out when empty, as JSON stores it (tuples as lists) when set."""

    def recorded(plan):
        value = getattr(plan.config, field)
        return as_stored(value) if value else UNSET

    return recorded


def unless_default(field):
    """The record of an option left out at its default (backups written before it existed still resume)."""

    def recorded(plan):
        value = getattr(plan.config, field)
        return UNSET if value == _default(plan.config, field) else value

    return recorded


def recipe_fingerprint(plan):
    """A named recipe by its name; one's own by every field, so that a backup of another is not resumed."""

    recipe = plan.config.recipe
    if recipe is None or isinstance(recipe, str):
        return plan.recipe.name
    return as_stored(dataclasses.asdict(recipe))


def backbone_name(plan):
    """The backbone function's (or object's) name; None without one."""
    backbone = plan.config.backbone
    if backbone is None:
        return None
    return getattr(backbone, "name", None) or getattr(backbone, "__name__", type(backbone).__name__)


# The options' parts of the run's header (`Option.header`), each with its leading separator.

def count_text(source) -> str:
    """A split's size as known before training, e.g. "1,000 " or "17 files listed ": a folder's files are
    decoded while training, and one that fails then is skipped; the summary and vit.json count the images used."""
    if source.num_examples is None:
        return ""
    return f"{source.num_examples:,} {'files listed ' if source.files else ''}"


def evaluation_header(plan):
    if plan.test is None:
        return ", no test split"
    return f", test {count_text(plan.test)}({plan.config.test_split})"


def unless_default_header(field):
    def shown(plan):
        value = getattr(plan.config, field)
        return None if value == _default(plan.config, field) else f", {field.replace('_', ' ')} {value}"

    return shown


def weights_header(plan):
    pretrained = plan.pretrained
    if pretrained is None:
        return None
    dropped = ", ".join(pretrained.dropped) if pretrained.dropped else "nothing"
    head = (plan.zeroshot_head.describe() if plan.zeroshot_head is not None
            else f"a new zero head for {plan.train.num_classes} classes")
    return f"{pretrained.source} ({pretrained.kind}); dropped {dropped}; {head}"


def adapt_header(plan):
    if plan.pretrained is None:
        return None
    trained = {"finetune": "every weight trained (fine-tuning)",
               "probe": "the head alone on frozen features (linear probe)",
               "probe_then_finetune": "a linear probe, then every weight if the budget buys it"}[plan.adapt]
    return f"; {trained} ({plan.adapt_reason})"


def architecture_header(plan):
    arch = plan.architecture
    return (f" (patch {arch['patch_size']} ({plan.patch_reason}), width {arch['hidden_size']}, {arch['num_layers']} "
            f"layers, {arch['num_heads']} heads, MLP {arch['mlp_dim']})")


def stem_header(plan):
    """How the pixels become tokens where not the paper's patches: behind the conv stem, or on shifted patches."""
    if plan.tokenizer == "shifted":
        return " on shifted patches (each with its neighbours half a patch away, no convolution)"
    if not plan.stem:
        return None
    from keras_vit.models import stems

    widths = ", ".join(map(str, stems.stem_arguments(plan.stem_args)["filters"]))
    return f" behind a conv stem (3x3 convolutions of {widths} channels, stride {plan.model.stem_stride})"


def epochs_header(plan):
    if plan.config.epochs is None and plan.config.budget_seconds is not None:
        return f", epochs until the budget is spent x {plan.steps_per_epoch} steps"
    return f", {plan.epochs} epochs x {plan.steps_per_epoch} steps"


def compilation_header(plan):
    from keras_vit import backends

    return ", " + backends.compilation(plan.jit_compile)


def strategy_header(plan):
    replicas = plan.strategy.num_replicas_in_sync
    return f", strategy {plan.config.strategy} ({replicas} replica{'s' if replicas > 1 else ''})"


def output_header(plan):
    config = plan.config
    if not config.output_dir:
        return "; final model not saved"
    path = os.path.abspath(os.path.join(config.output_dir, config.name))
    return f"; final model {path}.keras" + (" + SavedModel + TFLite" if config.export else "")
