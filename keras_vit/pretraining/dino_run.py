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
import math
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
# DINO's multi-crop: 2 global crops of 224 px and 6 to 10 local ones of 96 px. Caron et al. 2021, Table 8
# (ViT-S/16 on ImageNet, linear top-1): 2x224 alone 67.8% after 100 epochs (15.3 h), 72.5% after 300
# (45.9 h); 2x224 + 6x96 73.8% after 100 epochs (20.3 h): more per hour than more epochs of global views.
# Not by default here: on a 2-core CPU, 20 minutes of the conv stem + ViT with 6 local views of 16 px beside
# the 2 global ones of 32 px made 9.2 passes over 25,000 images against 15.7 without (a step cost 1.7x), and
# adapted to 61.80% against 62.92%, 20-NN 52.8% against 55.8% (benchmarks/RESULTS.md, "DINO's local views").
# `--local-views N` asks for them.
LOCAL_VIEWS = 0
LOCAL_SIDE_FRACTION = 96 / 224


def recipe(peak_learning_rate):
    """DINO's recipe as a `keras_vit.training.recipes.Recipe` at `peak_learning_rate` per 256 images."""
    from keras_vit.training.recipes import Recipe

    return Recipe("dino", "adamw", peak_learning_rate, 256, weight_decay=WEIGHT_DECAY, warmup_epochs=1,
                  clip_norm=CLIP_NORM, batch_size=256, augment=AUGMENT)


def build(config, name, source, num_train, data_channels):
    """(`dino.SelfDistillation`, reasons for the header) of the run: from `weights`, or the budget's backbone."""
    student, reasons = backbone(config, name, source, num_train, data_channels)
    head = config.head or dino.head_for(student.vit_config["hidden_size"])
    local_views, local_size, local_reason = local_crops(config.local_views, student, name)
    reasons.append(local_reason)
    return dino.SelfDistillation(student, head=head, local_views=local_views, local_size=local_size), reasons


def local_crops(local_views, student, name=lambda field: field):
    """(local views, their side, why) for `student`: `local_views` at `LOCAL_SIDE_FRACTION` of its side.

    None takes `LOCAL_VIEWS` (none); a count where the image holds no local view of whole tokens
    smaller than itself is refused.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT(patch_size=16, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, image_size=224,
    ...                       include_top=False)
    >>> local_crops(6, model)[:2], local_crops(None, model)[:2]
    ((6, 96), (0, None))
    """
    side = student.inputs[0].shape[1]
    multiple = token_pixels(student)
    local_side = max(1, round(side * LOCAL_SIDE_FRACTION / multiple)) * multiple
    fits = local_side < side and student.inputs[0].shape[2] == side
    count = LOCAL_VIEWS if local_views is None else int(local_views)
    if not count:
        return 0, None, ("no local views (" + ("given: 0" if local_views == 0 else "the default: on a 2-core CPU they "
                         "cost more passes than they gave back, benchmarks/RESULTS.md") + f"; {name('local_views')} N adds them)")
    if not fits:
        raise ValueError(f"Invalid {name('local_views')}={count} for images of {side} px: a local view must be a whole "
                         f"number of tokens ({multiple} px) and smaller than the image. Pass {name('local_views')} 0.")
    return count, local_side, (f"{count} local views of {local_side} px (given; DINO's multi-crop, crops of "
                               f"{LOCAL_CROP_SCALE_TEXT} of the image, seen by the student only)")


def backbone(config, name, source, num_train, data_channels):
    """(the backbone a view-based method pre-trains, reasons for the header): from `weights`, or the budget's.

    DINO's and SimCLR's (`keras_vit.pretraining.simclr_run`): any keras_vit feature model.
    """
    if config.weights is not None:
        return _loaded(config, name)
    return _budget_backbone(config, name, source, num_train, data_channels)


def token_pixels(student):
    """The pixels a side of one token covers in `student`, through any stem: the image's side over its token grid's."""
    embedding = student.get_layer("embedding")
    grid = math.isqrt(embedding.output.shape[1] - embedding.num_prefix_tokens)
    return student.inputs[0].shape[1] // grid


def view_augments(model):
    """(global views' augmentation, local views' or None): DINO's crop scales, with and without local views."""
    from keras_vit.data.augment import get_preset

    views = get_preset(AUGMENT)
    if not model.local_views:
        return views, None
    return (dataclasses.replace(views, crop_scale=dino.GLOBAL_CROP_SCALE),
            dataclasses.replace(views, crop_scale=dino.LOCAL_CROP_SCALE))


def _loaded(config, name):
    from keras_vit.transfer.pretrained import load_pretrained

    student, info = load_pretrained(config.weights, image_size=config.image_size, scaling=config.scaling,
                                    patch_size=config.model.get("patch_size"))
    if getattr(student, "vit_config", None) is None:
        raise ValueError(f"Invalid {name('weights')}={config.weights!r} for {name('method')}={config.method!r}: it loads as a model "
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
                     f"channel{'s' if channels > 1 else ''}, scaling {scaling}, class-token pooling"]


LOCAL_CROP_SCALE_TEXT = f"{dino.LOCAL_CROP_SCALE[0]:.0%}-{dino.LOCAL_CROP_SCALE[1]:.0%}"


# The backbone's fields a resumed run must share (`fingerprint`).
ENCODER_FIELDS = ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim", "stem", "pooling")


def fingerprint(model):
    """The run's facts that a resumed run must share (beside the data's): the backbone and the head."""
    return {"method": "dino", "encoder": encoder_facts(model.student), "head": dataclasses.asdict(model.head_size),
            "local_views": model.local_views, "local_size": model.local_size}


def encoder_facts(backbone):
    """The backbone's `ENCODER_FIELDS`, for a run's fingerprint."""
    return {field: backbone.vit_config[field] for field in ENCODER_FIELDS}


def backbone_words(backbone):
    """The header's words on a view-based method's backbone: its blocks, width, stem, parameters and pooling."""
    config = backbone.vit_config
    stem = " behind the conv stem" if config.get("backbone") or config.get("stem") else ""
    return (f"backbone {config['num_layers']} block(s) of width {config['hidden_size']}{stem} "
            f"({backbone.count_params():,} parameters), pooled by {config['pooling']}")


def model_line(model):
    """The header's Model line."""
    size = model.head_size
    return (f"DINO (self-distillation): {backbone_words(model.student)}; head {size.hidden_dim} wide to "
            f"{size.out_dim:,} prototypes; teacher an average of the student (momentum {model.teacher_momentum:g}); "
            f"{model.num_views} global views of each image"
            + (f" and {model.local_views} local ones of {model.local_size} px" if model.local_views else "")
            + f"; temperatures {model.student_temperature:g} (student) and "
            f"{model.teacher_temperature:g} (teacher)")


def data_line(model):
    """The header's words on the augmentation."""
    global_views, local = view_augments(model)
    scale = global_views.crop_scale
    crops = f"global crops of {scale[0]:.0%}-{scale[1]:.0%} of the image" + (
        f", local crops of {LOCAL_CROP_SCALE_TEXT}" if local is not None else "")
    return f"augment {AUGMENT} (DINO's {crops}, flips, colour jitter, grey and solarization; each view its own)"


def save(model, output_dir, result_facts):
    """Writes the teacher's backbone (`MODEL_FILE`) and what made it (`RECORD_FILE`) into `output_dir`."""
    return save_backbone(model.teacher, output_dir, {"method": "dino", "saved": "the teacher's backbone", **result_facts})


def save_backbone(backbone, output_dir, record):
    """Writes `backbone` as `MODEL_FILE` and `record` as `RECORD_FILE` into `output_dir`; its absolute path."""
    from keras_vit.training.callbacks import save_model_atomic

    os.makedirs(output_dir, exist_ok=True)
    _atomic.write_text(os.path.join(output_dir, RECORD_FILE), json.dumps(record, indent=1, default=str) + "\n")
    # The model last: a run killed between the two files left no checkpoint, and its resumed run writes both.
    save_model_atomic(backbone, os.path.join(output_dir, MODEL_FILE))
    return os.path.abspath(output_dir)

