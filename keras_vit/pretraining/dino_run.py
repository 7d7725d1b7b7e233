"""What `keras-vit pretrain --method dino` does differently from MAE: its backbone, recipe, header line and checkpoint.

The run itself (data, budget, crash-safe fit, run directory) is `keras_vit.pretraining.run.pretrain`'s.
The backbone is the model `keras-vit train` builds from scratch for images of this size and this
budget (`keras_vit.training.budget.choose`: on images up to 64 px the conv stem + ViT that learns
fastest on a CPU, which MAE cannot pre-train since it hides patches), so the checkpoint is the
model a user would otherwise train from scratch, started from their unlabeled images. The
checkpoint is a folder holding the teacher's backbone as `model.keras` (DINO evaluates and
publishes its teacher), which `keras-vit train --weights DIR`, `embed`, `fewshot` and `knn` read.
"""

from __future__ import annotations

import dataclasses
import json
import os

from keras_vit import _atomic
from keras_vit.pretraining import dino
from keras_vit.transfer.pretrained import SAVED_MODEL_FILE as MODEL_FILE

RECORD_FILE = "pretraining.json"
# DINO's recipe (Caron et al. 2021): AdamW, weight decay 0.04 (its start; DINO raises it to 0.4),
# gradients clipped at a global norm of 3, warm-up then cosine, the views augmentation. The peak is
# pre-training's short-run rate (`run.PEAK_LEARNING_RATE` per 256 images) where DINO's is 5e-4 per 256
# for ViT-S over 100+ ImageNet passes. DINO also keeps the prototypes fixed for the first epoch; a
# run of minutes does not (its first epoch is its warm-up).
WEIGHT_DECAY = 0.04
CLIP_NORM = 3.0
AUGMENT = "views"


def recipe(peak_learning_rate):
    """DINO's recipe as a `keras_vit.training.recipes.Recipe` at `peak_learning_rate` per 256 images."""
    from keras_vit.training.recipes import Recipe

    return Recipe("dino", "adamw", peak_learning_rate, 256, weight_decay=WEIGHT_DECAY, warmup_epochs=1,
                  clip_norm=CLIP_NORM, batch_size=256, augment=AUGMENT)


def build(config, name, source, num_train, data_channels):
    """(`dino.SelfDistillation`, reasons for the header) of the run: from `weights`, or the budget's backbone."""
    if config.weights is not None:
        student, reasons = _loaded(config, name)
    else:
        student, reasons = _budget_backbone(config, name, source, num_train, data_channels)
    head = config.head or dino.head_for(student.vit_config["hidden_size"])
    return dino.SelfDistillation(student, head=head), reasons


def _loaded(config, name):
    from keras_vit.transfer.pretrained import load_pretrained

    student, info = load_pretrained(config.weights, image_size=config.image_size, scaling=config.scaling,
                                    patch_size=config.model.get("patch_size"))
    if getattr(student, "vit_config", None) is None:
        raise ValueError(f"Invalid {name('weights')}={config.weights!r} for self-distillation: it loads as a model "
                         "without its ViT configuration (a .keras classifier). Pass a checkpoint folder or a "
                         ".keras feature model (include_top=False).")
    if config.channels is not None and config.channels != student.inputs[0].shape[-1]:
        raise ValueError(f"Contradicting {name('channels')}={config.channels} and {name('weights')}={config.weights!r}: "
                         f"the checkpoint takes {student.inputs[0].shape[-1]}-channel images.")
    return student, [f"weights {config.weights}: image {info.image_size[0]} px ({info.image_size_reason}), scaling "
                     f"{info.scaling} ({info.scaling_reason}), pooling {info.pooling}"]


def _budget_backbone(config, name, source, num_train, data_channels):
    from keras_vit.models.spec import ModelSpec, build_spec, resolve_architecture
    from keras_vit.pretraining.run import image_side
    from keras_vit.training import budget

    size, size_reason = image_side(config, name, source)
    given = {k: v for k, v in config.model.items() if v is not None}
    # The conv stem where `keras-vit train` puts it on a budget, with or without one here.
    stem = "conv" if size <= budget.STEM_MAX_IMAGE_SIZE and not given else "none"
    # Only the model: the epochs, augmentation and recipe are pre-training's own, not supervised training's.
    choice = budget.choose(config.budget_seconds, num_train, size, stem=stem, model_given=bool(given),
                           image_size_given=config.image_size is not None, epochs_given=True, augment_given=True,
                           recipe_given=True, data_channels=data_channels)
    from keras_vit.models import stems

    stride = stems.stem_stride() if choice.stem else None
    architecture, patch_reason = resolve_architecture(None, given, choice.image_size, stem_stride=stride,
                                                      chosen=choice.architecture)
    channels = config.channels or data_channels
    scaling = config.scaling or "unit"
    spec = ModelSpec(variant=None, architecture=architecture, image_size=choice.image_size, channels=channels,
                     scaling=scaling, stem=choice.stem, pooling="token", attention_init=choice.attention_init)
    student = build_spec(spec, None, seed=config.seed)
    kind = "conv stem + ViT" if choice.stem else "plain ViT"
    model_reason = (f"the {kind} keras-vit train builds from scratch for {choice.image_size} px images"
                    + (f" ({size_reason}{'; ' + '; '.join(choice.reasons) if choice.reasons else ''})"))
    if given:
        model_reason += f"; given: {', '.join(f'{name(k)} {v}' for k, v in given.items())}"
    return student, [model_reason, f"patch {architecture['patch_size']} ({patch_reason}), {channels} "
                     f"channel{'s' if channels > 1 else ''}, scaling {scaling}, class-token pooling (DINO's)"]


def fingerprint(model):
    """The run's facts that a resumed run must share (beside the data's): the backbone and the head."""
    config = model.student.vit_config
    return {"method": "dino", "encoder": {k: config[k] for k in ("patch_size", "hidden_size", "num_layers", "num_heads",
                                                                  "mlp_dim", "stem", "pooling")},
            "head": dataclasses.asdict(model.head_size)}


def model_line(model):
    """The header's Model line."""
    config, size = model.student.vit_config, model.head_size
    stem = " behind the conv stem" if config.get("backbone") or config.get("stem") else ""
    return (f"DINO (self-distillation): backbone {config['num_layers']} block(s) of width {config['hidden_size']}{stem} "
            f"({model.student.count_params():,} parameters), pooled by {config['pooling']}; head {size.hidden_dim} wide to "
            f"{size.out_dim:,} prototypes; teacher an average of the student (momentum {model.teacher_momentum:g}); "
            f"{model.num_views} views of each image; temperatures {model.student_temperature:g} (student) and "
            f"{model.teacher_temperature:g} (teacher)")


def data_line():
    """The header's words on the augmentation."""
    return f"augment {AUGMENT} (DINO's crops, flips, colour jitter, grey and solarization; each view its own)"


def save(model, output_dir, result_facts):
    """Writes the teacher's backbone (`MODEL_FILE`) and what made it (`RECORD_FILE`) into `output_dir`."""
    from keras_vit.training.callbacks import save_model_atomic

    os.makedirs(output_dir, exist_ok=True)
    record = {"method": "dino", "saved": "the teacher's backbone", **result_facts}
    _atomic.write_text(os.path.join(output_dir, RECORD_FILE), json.dumps(record, indent=1, default=str) + "\n")
    # The model last: a run killed between the two files left no checkpoint, and its resumed run writes both.
    save_model_atomic(model.teacher, os.path.join(output_dir, MODEL_FILE))
    return os.path.abspath(output_dir)

