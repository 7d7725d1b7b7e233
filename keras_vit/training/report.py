"""The text a training run prints: the header before the first step and the summary after the last."""

from __future__ import annotations

from keras_vit import train_options
from keras_vit.backends import compilation
from keras_vit.training import distribute, memory

# The header's layout: its lines in order, each a label and its parts in order. A part is an
# option's (`keras_vit.train_options.Option.header`: the option declares its text) or one of the
# facts below, which no option states. An option with a header that no line places goes at the end
# of its flag group's line (`GROUP_LINES`); a line with no part to show is left out.
LINES = (
    ("Weights", ("weights", "adapt")),
    ("Model", ("variant", "stem", "model_overrides", "tokens", "pooling", "attention_init", "vit_args")),
    ("Data", ("dataset", "train_split", "test_split", "classes", "image_size", "resize", "scaling", "validation_split")),
    ("Training", ("recipe", "augment", "epochs", "batch_size", "precision", "jit_compile", "strategy", "budget_seconds")),
    ("Budget", ("budget_reasons",)),
    ("Memory", ("memory",)),
    ("Outputs", ("run_dir", "output_dir")),
    ("Resume", ("resume",)),
)
GROUP_LINES = {"data": "Data", "model": "Model", "training": "Training", "output": "Outputs"}


def _tokens(plan, model, estimate, progress):
    blocks = [layer for layer in model.layers if layer.name.startswith("encoderblock_")]
    tokens = int(blocks[0].input.shape[1]) if blocks else None
    return f", {tokens} tokens, {model.count_params():,} parameters"


def _memory(plan, model, estimate, progress):
    text = f"about {estimate.total / memory.GIB:.2f} GiB per training step (estimate)"
    if isinstance(plan.strategy, distribute.MeshStrategy):
        text += f" per device; {plan.strategy.describe(model)}"
    return text


def _resume(plan, model, estimate, progress):
    run, state = progress.directory, progress.state
    if state is None:
        resume = "new run"
    elif progress.finished:
        resume = (f"training had finished (epoch {state['epoch']} of {plan.epochs}); writing the final artefacts "
                  f"only (backup in {run.backup_dir})")
    else:
        resume = f"resuming from epoch {state['epoch']} of {plan.epochs} (backup in {run.backup_dir})"
    moved = "".join(f"\n          moved the previous run's files aside to {path}" for path in (run.moved if run else []))
    return resume + moved


FACTS = {
    "tokens": _tokens,
    "classes": lambda plan, model, estimate, progress: f"; {plan.train.num_classes} classes",
    "budget_reasons": lambda plan, model, estimate, progress: "; ".join(plan.budget_reasons) or None,
    "memory": _memory,
    "resume": _resume,
}


def header(plan, model, estimate, progress) -> str:
    """The lines printed before training (`LINES`): checkpoint, model, data, training, budget, memory, outputs, resume.

    Args:
        plan: `keras_vit.training.plan.RunPlan`.
        model: keras.Model. The compiled model.
        estimate: `keras_vit.training.memory` estimate of a training step.
        progress: `keras_vit.training.run_dir.RunProgress`. Where the run stands in its run directory.
    """
    parts = train_options.header_parts(plan)
    placed = {name for _, names in LINES for name in names}
    lines = []
    for label, names in LINES:
        texts = [FACTS[name](plan, model, estimate, progress) if name in FACTS else parts.get(name) for name in names]
        texts += [text for name, text in parts.items() if name not in placed
                  and GROUP_LINES.get(train_options.OPTIONS[name].flag.group) == label]
        texts = [text for text in texts if text]
        if texts:
            lines.append(f"{label + ':':<10}" + "".join(texts))
    return "\n".join(lines)


def sign_test_words(decision):
    """The figures of `--adapt auto`'s decision (trainer._keep_the_better) in words."""
    return (f"only the probe right on {decision['only_probe_right']} image(s), only the fine-tuned model on "
            f"{decision['only_finetuned_right']}: sign test p = {decision['sign_test_p']:.3g}")


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
    decision = result.get("adapt_decision")
    if decision:
        tuned = decision["finetuned_validation_accuracy"]
        lines.append(
            f"Kept the {'fine-tuned model' if decision['kept'] == 'finetuned' else 'probe'}: validation accuracy "
            f"{decision['probe_validation_accuracy']:.4f} probed"
            + (f", {tuned:.4f} fine-tuned ({sign_test_words(decision)})" if tuned is not None else "")
            + (" (the probe then fitted again on the training and validation images)" if decision["kept"] == "probe"
               else "")
            + (f"; decided after {decision['decided_at_step']} steps, then the validation images joined the fine-tuning"
               if decision.get("decided_at_step") is not None and decision["kept"] == "finetuned" else "")
            + ("; decided by the run this one resumed" if decision.get("before_resume") else "") + ".")
    if not probe or result["steps_done"]:
        lines.append(
            f"Trained {settings['params']:,} parameters for {result['epochs_done']} epochs ({result['steps_done']} steps"
            f"{partial}) in {result['train_seconds']:.0f} s of training"
            f"{' including the resumed parts' if result['initial_epoch'] else ''}{speed} ({settings['precision']}, "
            f"{compilation(settings['jit_compile'])}).")
    recalibrated = result.get("batch_norm")
    if recalibrated:
        lines.append(f"Recomputed the statistics of {recalibrated['layers']} BatchNorm layers from "
                     f"{recalibrated['images']:,} training images in {recalibrated['seconds']:.0f} s, after the "
                     f"training: {recalibrated['steps']} steps had left their moving averages short of the data "
                     "(precise BatchNorm).")
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
