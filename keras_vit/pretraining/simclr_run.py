"""What `keras-vit pretrain --method simclr` does differently from MAE and DINO: its model, recipe, header and checkpoint.

The run itself (data, budget, crash-safe fit, run directory) is `keras_vit.pretraining.run.pretrain`'s;
the backbone is DINO's (`keras_vit.pretraining.dino_run.backbone`: the model `keras-vit train`
builds from scratch for the images and budget, or a loaded checkpoint), and so are the views'
augmentation and the optimizer's settings. The checkpoint is a folder holding the backbone as
`model.keras`, which `keras-vit train --weights DIR`, `embed`, `fewshot` and `knn` read.
"""

from __future__ import annotations

import dataclasses

from keras_vit.pretraining import dino_run, simclr

RECORD_FILE = dino_run.RECORD_FILE
MODEL_FILE = dino_run.MODEL_FILE


def recipe(peak_learning_rate):
    """SimCLR's recipe as a `keras_vit.training.recipes.Recipe`: DINO's optimizer settings at `peak_learning_rate`.

    SimCLR trains with LARS at large batches; AdamW as MoCo v3 trains ViTs, with DINO's weight
    decay and clipping (`dino_run.recipe`), which the measured runs used.
    """
    return dataclasses.replace(dino_run.recipe(peak_learning_rate), name="simclr")


def build(config, name, source, num_train, data_channels):
    """(`simclr.ContrastiveLearning`, reasons for the header) of the run: from `weights`, or the budget's backbone."""
    backbone, reasons = dino_run.backbone(config, name, source, num_train, data_channels)
    head = config.head or simclr.head_for(backbone.vit_config["hidden_size"])
    view_size, view_reason = view_side(config.view_size, backbone, name)
    reasons.append(view_reason)
    return simclr.ContrastiveLearning(backbone, head=head, view_size=view_size), reasons


def view_side(view_size, backbone, name=lambda field: field):
    """(the views' side or None for the backbone's, why): given, else the backbone's own.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT("tiny", image_size=32, include_top=False)
    >>> view_side(None, model)[0], view_side(16, model)[0]
    (None, 16)
    >>> print(view_side(16, model)[1])
    views of 16 px (given), through the backbone's layers at its 32 px
    """
    side = backbone.inputs[0].shape[1]
    if view_size is None or view_size == side:
        return None, f"views of {side} px, the backbone's own"
    multiple = getattr(backbone, "pixel_multiple", None)
    if view_size > side or (multiple and view_size % multiple):
        raise ValueError(f"Invalid {name('view_size')}={view_size!r}: expected a side up to the backbone's {side} px"
                         + (f" and a multiple of the {multiple} px a token covers" if multiple else "") + ".")
    return view_size, f"views of {view_size} px (given), through the backbone's layers at its {side} px"


def view_augment():
    """The views' augmentation: DINO's (`dino_run.AUGMENT`), crops of 14-100% of the image, colour jitter and the rest."""
    from keras_vit.data.augment import get_preset

    return get_preset(dino_run.AUGMENT)


def fingerprint(model):
    """The run's facts that a resumed run must share (beside the data's): the backbone, the head and the views."""
    return {"method": "simclr", "encoder": dino_run.encoder_facts(model.backbone),
            "head": dataclasses.asdict(model.head_size), "temperature": model.temperature, "view_size": model.view_size}


def model_line(model):
    """The header's Model line."""
    size = model.head_size
    return (f"SimCLR (contrastive): {dino_run.backbone_words(model.backbone)}; projection head {size.hidden_dim} wide "
            f"to {size.out_dim}; {simclr.NUM_VIEWS} views of each image, each told apart from the batch's other views "
            f"at temperature {model.temperature:g}")


def data_line(model):
    """The header's words on the augmentation."""
    scale = view_augment().crop_scale
    return (f"augment {dino_run.AUGMENT} (crops of {scale[0]:.0%}-{scale[1]:.0%} of the image at "
            f"{model.image_shape[0]} px, flips, colour jitter, grey and solarization; each view its own)")


def save(model, output_dir, result_facts):
    """Writes the backbone (`MODEL_FILE`) and what made it (`RECORD_FILE`) into `output_dir`."""
    return dino_run.save_backbone(model.backbone, output_dir, {"method": "simclr", "saved": "the backbone", **result_facts})
