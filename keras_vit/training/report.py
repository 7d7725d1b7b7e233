"""The text a training run prints: the header before the first step and the summary after the last."""

from __future__ import annotations

import os

from keras_vit import backends
from keras_vit.training import distribute, memory


def header(plan, model, estimate, progress) -> str:
    """The lines printed before training: model, data, recipe and hardware, memory, outputs, resume state.

    Args:
        plan: `keras_vit.training.plan.RunPlan`.
        model: keras.Model. The compiled model.
        estimate: `keras_vit.training.memory` estimate of a training step.
        progress: `keras_vit.training.run_dir.RunProgress`. Where the run stands in its run directory.
    """
    config, arch, run, state = plan.config, plan.architecture, progress.directory, progress.state
    train_source, test_source, validation_source = plan.train, plan.test, plan.validation
    image_size, strategy = plan.image_size, plan.strategy
    blocks = [layer for layer in model.layers if layer.name.startswith("encoderblock_")]
    tokens = int(blocks[0].input.shape[1]) if blocks else None
    tokenizer = ""
    if plan.stem:
        tokenizer = f" behind a conv stem ({_stem_text(plan.model)})"
    elif plan.tokenizer == "shifted":
        tokenizer = " on shifted patches (each with its neighbours half a patch away, no convolution)"
    name = "the checkpoint's ViT" if plan.pretrained is not None else config.variant or "default ViT"
    model_line = (
        f"Model:    {name}{tokenizer} (patch {arch['patch_size']} ({plan.patch_reason}), width {arch['hidden_size']}, "
        f"{arch['num_layers']} layers, {arch['num_heads']} heads, MLP {arch['mlp_dim']}), {tokens} tokens, "
        f"{model.count_params():,} parameters, pooling {plan.pooling}, attention init {plan.attention_init}"
    )
    if test_source is not None:
        test = f"test {_count_text(test_source)}({config.test_split})"
    else:
        test = "no test split"
    validation = f"; validation: {validation_source.description}" if validation_source is not None else ""
    lines = [
        model_line,
        f"Data:     {config.dataset}: train {_count_text(train_source)}({config.train_split}), {test}; {train_source.num_classes} classes; "
        f"images {image_size}x{image_size}x{plan.channels} ({plan.image_size_reason}; {plan.channels_reason}), "
        f"scaling {plan.scaling} ({plan.scaling_reason}){validation}",
        f"Training: recipe {plan.recipe.name} (peak learning rate {plan.peak_learning_rate:g}, weight decay {plan.recipe.weight_decay:g}), augment {plan.augment if isinstance(plan.augment, str) else 'custom'}, {_epochs_text(plan)} x "
        f"{plan.steps_per_epoch} steps at batch {plan.batch_size} ({plan.batch_reason}), precision {plan.precision} ({plan.precision_reason}), {compilation(plan.jit_compile)}, "
        f"strategy {config.strategy} ({strategy.num_replicas_in_sync} replica{'s' if strategy.num_replicas_in_sync > 1 else ''})"
        + (f", budget {config.budget_seconds / 60:g} min" if config.budget_seconds is not None else ""),
        f"Memory:   about {estimate.total / memory.GIB:.2f} GiB per training step (estimate)"
        + (f" per device; {strategy.describe(model)}" if isinstance(strategy, distribute.MeshStrategy) else ""),
        f"Outputs:  run dir {os.path.abspath(config.run_dir) if config.run_dir else 'none'}; final model "
        + (f"{os.path.abspath(os.path.join(config.output_dir, config.name))}.keras"
           + (" + SavedModel + TFLite" if config.export else "") if config.output_dir else "not saved"),
    ]
    if plan.budget_reasons:
        lines.insert(3, "Budget:   " + "; ".join(plan.budget_reasons))
    if plan.pretrained is not None:
        lines.insert(0, weights_line(plan))
    if state is None:
        resume = "new run"
    elif progress.finished:
        resume = (f"training had finished (epoch {state['epoch']} of {plan.epochs}); writing the final artefacts "
                  f"only (backup in {run.backup_dir})")
    else:
        resume = f"resuming from epoch {state['epoch']} of {plan.epochs} (backup in {run.backup_dir})"
    lines.append(f"Resume:   {resume}")
    lines.extend(f"          moved the previous run's files aside to {path}" for path in (run.moved if run else []))
    return "\n".join(lines)


def weights_line(plan) -> str:
    """What a run from a checkpoint loaded, from where, what it dropped and what it trains."""
    pretrained = plan.pretrained
    dropped = ", ".join(pretrained.dropped) if pretrained.dropped else "nothing"
    trained = {"finetune": "every weight trained (fine-tuning)",
               "probe": "the head alone on frozen features (linear probe)",
               "probe_then_finetune": "a linear probe, then every weight if the budget buys it"}[plan.adapt]
    return (f"Weights:  {pretrained.source} ({pretrained.kind}); dropped {dropped}; a new zero head for "
            f"{plan.train.num_classes} classes; {trained} ({plan.adapt_reason})")


def _epochs_text(plan) -> str:
    if plan.config.epochs is None and plan.config.budget_seconds is not None:
        return "epochs until the budget is spent"
    return f"{plan.epochs} epochs"


def _stem_text(spec) -> str:
    from keras_vit.models import stems

    widths = ", ".join(map(str, spec.stem_args.get("filters", stems.DEFAULT_FILTERS)))
    return f"3x3 convolutions of {widths} channels, stride {spec.stem_stride}"


def _count_text(source) -> str:
    """A split's size as known before training, e.g. "1,000 " or "17 files listed ": a folder's files are
    decoded while training, and one that fails then is skipped; the summary and vit.json count the images used."""
    if source.num_examples is None:
        return ""
    return f"{source.num_examples:,} {'files listed ' if source.files else ''}"


def compilation(jit_compile) -> str:
    """How the train step runs, e.g. "XLA on, Keras backend jax"."""
    backend = backends.current()
    return f"{backend.COMPILER} {'on' if jit_compile else 'off'}, Keras backend {backend.NAME}"


def format_summary(result) -> str:
    """The lines printed after a run: what was trained, for how long, and the test metrics."""
    settings = result["settings"]
    partial = ", the last one partial" if result["last_epoch_partial"] else ""
    speed = f", {result['images_per_second']:.0f} images/s in this process" if result["images_per_second"] else ""
    probe = result.get("probe")
    lines = []
    if probe:
        then = ", then fine-tuned from it" if result["steps_done"] else " (the head alone; the backbone frozen)"
        lines.append(f"Fitted a linear probe of {probe['num_features']} features in {probe['seconds']:.0f} s{then}.")
    if not probe or result["steps_done"]:
        lines.append(
            f"Trained {settings['params']:,} parameters for {result['epochs_done']} epochs ({result['steps_done']} steps"
            f"{partial}) in {result['train_seconds']:.0f} s of training"
            f"{' including the resumed parts' if result['initial_epoch'] else ''}{speed} ({settings['precision']}, "
            f"{compilation(settings['jit_compile'])}).")
    if result["test_accuracy"] is not None:
        lines.append(
            f"Test accuracy: {result['test_accuracy']:.4f} (loss {result['test_loss']:.4f}, cross-entropy without "
            f"label smoothing as `keras-vit evaluate` reports it) on {result['num_test_examples']} examples"
            + (f" ({result['unscored_test_examples']} beyond the last whole batch not scored: several processes "
               "split whole batches only)" if result.get("unscored_test_examples") else "")
        )
    elif result["validation_accuracy"] is not None:
        lines.append(f"Validation accuracy: {result['validation_accuracy']:.4f} on {result['data']['validation']}")
    if result["skipped_files"]:
        lines.append(skipped_line(result["skipped_files"]))
    return "\n".join(lines)


def skipped_line(files) -> str:
    """The line every command that reads a folder prints about the corrupt files it skipped.

    Example:

    >>> skipped_line(["a.jpg", "b.png", "c.gif", "d.bmp"])
    'Skipped 4 corrupt image files: a.jpg, b.png, c.gif, ...'
    >>> skipped_line(["a.jpg"])
    'Skipped 1 corrupt image file: a.jpg'
    """
    files_word = "file" if len(files) == 1 else "files"
    return f"Skipped {len(files)} corrupt image {files_word}: {', '.join(files[:3])}{', ...' if len(files) > 3 else ''}"
