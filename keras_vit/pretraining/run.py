"""One pre-training run (`keras-vit pretrain`): data, MAE, DINO or SimCLR, a crash-safe fit, a checkpoint and a figure.

It behaves as `keras_vit.training.trainer.train` does and reuses its parts: the data sources and
pipeline (`keras_vit.data`), the batch rule (`training.plan.resolve_batch_size`), the precision and
XLA rules (`training.distribute`), AdamW with warm-up and cosine (`training.recipes`), the run
directory (its lock, backup, history, last model: `training.run_dir`, `training.callbacks`) and the
budget's cosine fitted to the measured pace (`training.callbacks.TimeBudget`). What differs: the
model (`method`: the masked autoencoder of `keras_vit.pretraining.mae`, the self-distillation of
`keras_vit.pretraining.dino` or the contrastive learning of `keras_vit.pretraining.simclr`, each
method's model, header lines and output in its `*_run` module), the data need no labels, and the
output folder is a checkpoint that `keras-vit train --weights`, `embed`, `fewshot` and `knn` read
as it is: MAE's a Hugging Face ViT-MAE folder (`keras_vit.pretraining.hf`) with
`reconstructions.png` beside it in the run directory, DINO's a folder holding its teacher's
backbone as `model.keras`, SimCLR's its backbone.

Example (two steps of a tiny model on 32 images of the shipped sample):

>>> import tempfile
>>> out = os.path.join(tempfile.mkdtemp(), "mae")
>>> result = pretrain(PretrainConfig(dataset="sample", max_train_examples=32, batch_size=16, epochs=1,
...                                  model={"patch_size": 7, "hidden_size": 16, "num_layers": 1, "num_heads": 2,
...                                         "mlp_dim": 32}, decoder="test", run_dir=None, output_dir=out,
...                                  verbose=0, jit_compile=False, figure=False))
>>> result["steps_done"], sorted(os.listdir(out))
(2, ['config.json', 'model.safetensors', 'preprocessor_config.json'])
"""

from __future__ import annotations

import dataclasses
import os
import time

import keras
import numpy as np

from keras_vit import _validation, configs
from keras_vit.pretraining import hf, mae, mae_run

# MAE's recipe (He et al. 2022, Table 8) but its peak: AdamW, betas (0.9, 0.95), weight decay 0.05, warm-up
# then cosine. MAE's peak, 1.5e-4 per 256 images, is set for ViT-B/L over 800-1600 epochs; a run of minutes
# on a small ViT takes PEAK_LEARNING_RATE per 256 instead: the compact recipe's (keras_vit.training.recipes,
# the rate this project measured for small ViTs in budgets of minutes: 2e-3 per 512), between the small-data
# MAE runs' rates at batch 256: IcarusWizard/MAE's ViT-T on CIFAR-10, 2.4e-3 at batch 4096 (1.5e-4 x 4096/256),
# is 6e-4 at 256 by Adam's square-root rule, and the keras.io MAE example trains at 5e-3 at 256.
# Not yet compared with MAE's rate in a measured run of minutes (issue 53).
PEAK_LEARNING_RATE = 1e-3
# MAE warms up for 40 of 800 epochs (5%); a budgeted run warms up for its first epoch (`BUDGET_EPOCH_STEPS`).
RECIPE = None  # made on first use (`recipe()`): keras_vit.training imports TensorFlow
DEFAULT_EPOCHS = 10
# A budgeted run's epochs are at most this many steps (the data set repeats across them): `TimeBudget`
# fits the cosine to the measured pace from the first epoch's end, the warm-up is that first epoch, and
# a killed run resumes from a backup at most this many steps old. With whole passes, a step of 256
# images at 2.5-5 s on a loaded 2-core CPU made one pass over 25,000 images (97 steps) outlast budgets
# of minutes: 2 min ran 18 steps, all of them in the warm-up (at most a fifth of the peak rate), and
# the cosine was never fitted.
BUDGET_EPOCH_STEPS = 10
# Under TensorFlow on a CPU, budgets shorter than this pre-train without XLA (`choose_jit_compile`), as
# `keras-vit train --adapt auto` fine-tunes: on a loaded 2-core Xeon the MAE step of the 2-minute budget's
# encoder (4 blocks of width 128, batch 256) took 70 s to its first step under XLA against 39 s without,
# then 3.7 s a step against 4.1 s: the compilation is paid back after ~80 steps, some 6 minutes.
XLA_MIN_BUDGET_SECONDS = 600
# DINO's local views through the conv stem under XLA on a TensorFlow CPU (`python -m benchmarks dino-step`):
# the step of the 20-minute budget's model (conv stem + 4 blocks of width 128, batch 256, 2 global views of
# 32 px and 6 local of 16 px) took a median 1.89 s with XLA and 1.25 s without on a 2-core AMX Xeon (2 global
# views alone: 0.62 and 0.70 s). The stem alone, forward and backward on 1,536 images of 16 px: 0.85 s with
# XLA, 0.13 s without.
XLA_LOCAL_VIEWS_SLOWDOWN = 1.5
# MAE learns its features over hundreds of passes over the images (He et al. 2022: 800-1600 epochs;
# IcarusWizard/MAE's CIFAR-10 ViT-T: 2000). A run of fewer passes says so when it ends: on a 2-core
# CPU, 20 minutes bought about 5 passes over 25,000 images, and the checkpoint adapted below the budget's
# model from scratch (benchmarks/RESULTS.md, "Pre-training on unlabeled images").
FEW_PASSES = 100
# MAE's own augmentation (random resized crops and flips), the closest preset.
AUGMENT = "light"
METHODS = ("mae", "dino", "simclr")


def recipe(method="mae"):
    """The method's recipe as a `keras_vit.training.recipes.Recipe` (MAE's: see `RECIPE`; DINO's: `dino_run.recipe`)."""
    global RECIPE
    if method == "dino":
        from keras_vit.pretraining import dino_run

        return dino_run.recipe(PEAK_LEARNING_RATE)
    if method == "simclr":
        from keras_vit.pretraining import simclr_run

        return simclr_run.recipe(PEAK_LEARNING_RATE)
    if RECIPE is None:
        from keras_vit.training.recipes import Recipe

        RECIPE = Recipe("mae", "adamw", PEAK_LEARNING_RATE, 256, weight_decay=0.05, warmup_epochs=1, beta_2=0.95, batch_size=256,
                        augment=AUGMENT)
    return RECIPE


@dataclasses.dataclass(frozen=True)
class PretrainConfig:
    """A pre-training run. Every field is a `keras-vit pretrain` flag of the same name (dashes for underscores).

    Args:
        dataset: str or array. A folder of images (flat, or sub-folders whose names are ignored; a folder
            with train/ ... sub-folders reads `split`), "sample", a Fashion-MNIST IDX folder or a
            tensorflow-datasets name (as `keras-vit train` takes them), or uint8 images (N, H, W[, C]).
        split: str. The split of a tfds name or split folders. Defaults to "train".
        data_dir, download, on_corrupt: as for `keras-vit train`.
        max_train_examples: int or None. Use only the first N images. Defaults to None.
        image_size: int or None. Square input side; None: the images' own (or the checkpoint's). Defaults to None.
        channels: int or None. 1 or 3; None: the images' own. Defaults to None.
        scaling: str or None. Pixel scaling in the encoder; None: "unit" (or the checkpoint's). Defaults to None.
        model: dict. Encoder fields (patch_size, hidden_size, num_layers, num_heads, mlp_dim); those left out the
            budget's or the default's. Defaults to {}.
        weights: str or None. A checkpoint to continue pre-training (`keras_vit.pretraining.hf.load_mae`). Defaults
            to None.
        mask_ratio: float or None. In (0, 1); None: the checkpoint's, else 0.75. Defaults to None.
        decoder: str or None. A `keras_vit.pretraining.mae.DECODERS` name; None: by the encoder's width. Defaults
            to None.
        epochs, batch_size, budget_seconds, precision, jit_compile, seed: as for `keras-vit train`.
        run_dir: str or None. Logs, crash backup, history, the figure. Defaults to "runs/pretrain".
        output_dir: str or None. The checkpoint folder written at the end. Defaults to "pretrained".
        resume: bool. Resume from the run directory's backup. Defaults to True.
        overwrite: bool. Replace an existing `output_dir`. Defaults to False.
        figure: bool. Write the PNG of originals, masks and reconstructions (needs matplotlib). Defaults to True.
        verbose: int or str. Keras verbosity; 0 prints nothing. Defaults to "auto".
        method: str. "mae" (masked autoencoding, a plain ViT), "dino" (self-distillation) or "simclr"
            (contrastive learning), the last two on any backbone: by default the conv stem + ViT of
            `keras-vit train` on small images. Defaults to "mae".
        head: str or None. DINO's or SimCLR's head (`keras_vit.pretraining.dino.HEADS`,
            `keras_vit.pretraining.simclr.HEADS`); None: by the backbone's width. Defaults to None.
        local_views: int or None. DINO's small local views of each image (multi-crop), at 3/7 of its side
            (`keras_vit.pretraining.dino_run.local_crops`); None: `dino_run.LOCAL_VIEWS` (none). Defaults to None.
        view_size: int or None. SimCLR's views at this side, through the backbone's layers at its own
            (`keras_vit.pretraining.simclr_run.view_side`); None: the backbone's side. Defaults to None.
    """

    dataset: object = "sample"
    split: str = "train"
    data_dir: str | None = None
    download: bool = False
    on_corrupt: str = "skip"
    max_train_examples: int | None = None
    image_size: int | None = None
    channels: int | None = None
    scaling: str | None = None
    model: dict = dataclasses.field(default_factory=dict)
    weights: str | None = None
    mask_ratio: float | None = None
    decoder: str | None = None
    epochs: int | None = None
    batch_size: int | None = None
    budget_seconds: float | None = None
    precision: str = "auto"
    jit_compile: bool | None = None
    seed: int = 0
    run_dir: str | None = os.path.join("runs", "pretrain")
    output_dir: str | None = "pretrained"
    resume: bool = True
    overwrite: bool = False
    figure: bool = True
    verbose: object = "auto"
    method: str = "mae"
    head: str | None = None
    local_views: int | None = None
    view_size: int | None = None


def check_config(config, name=None):
    """Checks what can be checked before any image is read; ValueError naming the argument (`name(field)`)."""
    name = name or (lambda field: field)
    _validation.check_choice(name("method"), config.method, METHODS)
    mae_only = [field for field in ("mask_ratio", "decoder") if getattr(config, field) is not None]
    if config.method != "mae" and mae_only:
        raise ValueError(f"Contradicting {name('method')}={config.method!r} and {name(mae_only[0])}="
                         f"{getattr(config, mae_only[0])!r}: it is masked autoencoding's. Leave it out.")
    if config.local_views is not None:
        if config.method != "dino":
            raise ValueError(f"Contradicting {name('local_views')}={config.local_views!r} and {name('method')}="
                             f"{config.method!r}: local views are self-distillation's. Pass {name('method')} dino or "
                             "leave it out.")
        _validation.check_non_negative_int(name("local_views"), config.local_views)
    if config.head is not None:
        from keras_vit.pretraining import dino, simclr

        if config.method == "mae":
            raise ValueError(f"Contradicting {name('head')}={config.head!r} and {name('method')}={config.method!r}: "
                             f"the head is DINO's and SimCLR's. Pass {name('method')} dino or simclr, or leave it out.")
        _validation.check_choice(name("head"), config.head, tuple((dino if config.method == "dino" else simclr).HEADS))
    if config.view_size is not None:
        if config.method != "simclr":
            raise ValueError(f"Contradicting {name('view_size')}={config.view_size!r} and {name('method')}="
                             f"{config.method!r}: the views' size is SimCLR's. Pass {name('method')} simclr or leave it out.")
        _validation.check_positive_int(name("view_size"), config.view_size)
    for field in ("max_train_examples", "image_size", "epochs", "batch_size"):
        if getattr(config, field) is not None:
            _validation.check_positive_int(name(field), getattr(config, field))
    if config.mask_ratio is not None:
        _validation.check_number_in(name("mask_ratio"), config.mask_ratio, 0, 1, include_low=False, include_high=False)
    if config.budget_seconds is not None:
        _validation.check_positive_number(name("budget_seconds"), config.budget_seconds)
    if config.channels is not None:
        _validation.check_choice(name("channels"), config.channels, (1, 3))
    if config.scaling is not None:
        _validation.check_choice(name("scaling"), config.scaling, tuple(configs.SCALINGS))
    if config.decoder is not None:
        _validation.check_choice(name("decoder"), config.decoder, tuple(mae.DECODERS))
    for field, value in config.model.items():
        if value is not None:
            _validation.check_positive_int(name(field), value)
    _validation.check_seed(name("seed"), config.seed)
    for field in ("run_dir", "output_dir"):
        if getattr(config, field):
            _validation.check_writable_folder(name(field), getattr(config, field))
    if config.weights is not None and any(v is not None for k, v in config.model.items() if k != "patch_size"):
        raise ValueError(f"Contradicting {name('weights')}={config.weights!r} and the model flags: the checkpoint "
                         f"states the encoder (only {name('patch_size')} may resize its patch). Leave them out.")


def load_images(config, name):
    """The `keras_vit.data.sources.Source` of the run's images (labels ignored), the first `max_train_examples`."""
    from keras_vit.data import sources, unlabeled

    dataset = config.dataset
    if isinstance(dataset, np.ndarray):
        source = sources.from_arrays(dataset, np.zeros(len(dataset), "int32"), class_names=unlabeled.UNLABELED)
    elif isinstance(dataset, str) and os.path.isdir(dataset) and not sources.has_idx_files(dataset):
        root = os.path.join(dataset, config.split) if sources.split_dirs(dataset) else dataset
        source = unlabeled.from_unlabeled_folder(root, config.on_corrupt, config.channels, name=name("dataset"))
    else:
        source = sources.load_source(dataset, config.split, config.data_dir, config.on_corrupt, config.download)
    return source.take(config.max_train_examples)


def pretrain(config: PretrainConfig, *, name=None) -> dict:
    """Runs one pre-training run (see the module docstring) and returns its results.

    Args:
        config: `PretrainConfig`.
        name: callable or None. How messages name a field (`keras-vit pretrain` passes its flags). Defaults to None.

    Returns:
        dict: epochs_done, steps_done, train_seconds, loss (the last epoch's), settings, reasons, and the paths
        written ("checkpoint", "figure"), the model ("model").
    """
    from keras_vit.training import callbacks as callbacks_lib, distribute, recipes
    from keras_vit.training.plan import resolve_batch_size
    from keras_vit.training.run_dir import RunLock, RunProgress

    name = name or (lambda field: field)
    check_config(config, name)
    keras.utils.set_random_seed(config.seed)
    source = load_images(config, name)
    num_train = source.count()
    if num_train < 2:
        raise ValueError(f"Invalid {name('dataset')}={_shown(config.dataset)}: it holds {num_train} image; "
                         "pre-training learns from many images of the kind to adapt to.")
    run_recipe = recipe(config.method)
    batch_size, batch_reason = resolve_batch_size(config.batch_size, run_recipe.batch_size, num_train)
    if num_train < batch_size:
        raise ValueError(f"Invalid {name('batch_size')}={batch_size}: more than the {num_train} images of "
                         f"{name('dataset')}={_shown(config.dataset)}. Pass a smaller batch or more images.")
    data_channels = source.dataset.element_spec[0].shape[-1] or 3
    model, reasons = _model(config, name, source, num_train, data_channels)
    facts = _method_facts(model)
    if config.method == "mae":
        hf.check_hf_holds(model.encoder, name("weights"))
    if config.output_dir and not config.overwrite:
        _check_new_output(config.output_dir, facts["output_files"])
    image_size, channels = facts["image_size"], facts["channels"]
    precision, precision_reason = distribute.choose_precision(config.precision, width=facts["backbone"].vit_config[
        "hidden_size"])
    jit_compile, jit_reason = choose_jit_compile(config.jit_compile, precision, config.budget_seconds,
                                                 getattr(model, "local_views", 0))
    steps_per_epoch = num_train // batch_size
    if config.budget_seconds is not None:
        steps_per_epoch = min(steps_per_epoch, BUDGET_EPOCH_STEPS)
    epochs = config.epochs or (BUDGET_EPOCHS() if config.budget_seconds is not None else DEFAULT_EPOCHS)
    fingerprint = {"dataset": _shown(config.dataset), "split": config.split, "num_train_examples": num_train,
                   "image_size": image_size, "channels": channels, "batch_size": batch_size, "precision": precision,
                   "weights": config.weights, "seed": config.seed, "steps_per_epoch": steps_per_epoch,
                   **facts["fingerprint"]}
    lock = RunLock(config.run_dir, name=name) if config.run_dir else None
    previous_policy = keras.config.dtype_policy()
    try:
        keras.config.set_dtype_policy(precision)
        if precision != "float32":  # the model was built to read the facts: built again under the policy
            model, _ = _model(config, name, source, num_train, data_channels)
        schedule = recipes.make_schedule(run_recipe, batch_size, steps_per_epoch, epochs)
        optimizer = recipes.make_optimizer(run_recipe, model, schedule)  # the mask token among the undecayed
        optimizer.beta_1 = 0.9
        model.compile(optimizer=optimizer, jit_compile=jit_compile)
        recipes.build_optimizer_variables(model)
        progress = RunProgress.open(config.run_dir, fingerprint, config.resume)
        if config.verbose != 0:
            print(_header(config, facts, source, reasons, dict(
                batch=f"{batch_size} ({batch_reason})", precision=f"{precision} ({precision_reason})",
                jit=f"{'XLA' if jit_compile else 'no XLA'} ({jit_reason})", epochs=epochs,
                steps_per_epoch=steps_per_epoch, num_train=num_train, peak=run_recipe.learning_rate_for(batch_size)), progress), flush=True)
        callbacks = callbacks_lib.make_callbacks(config.run_dir, fingerprint)
        backup = callbacks[-1] if callbacks else None
        if config.budget_seconds is not None and not progress.finished:
            spent = progress.seconds_before
            if config.budget_seconds <= spent:
                progress.finished = True
            else:
                callbacks.insert(len(callbacks) - 1 if backup else 0,
                                 callbacks_lib.TimeBudget(config.budget_seconds - spent, steps_per_epoch, schedule))
        from keras_vit.data.pipeline import make_pipeline

        train_ds = make_pipeline(source, image_size=image_size, channels=channels, scaling=None, batch_size=batch_size,
                                 training=True, seed=config.seed, drop_remainder=True,
                                 cache=source.keys is None and num_train <= 200_000, repeat=True,
                                 **facts["pipeline"]).map(lambda images, labels: images)
        start = time.perf_counter()
        history = None
        if progress.state:
            backup.restore(model)
        if not progress.finished:
            history = model.fit(train_ds, epochs=epochs, initial_epoch=backup.restored_epoch if backup else 0,
                                steps_per_epoch=steps_per_epoch, callbacks=callbacks, verbose=config.verbose, shuffle=False)
        seconds = time.perf_counter() - start
        steps = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
        if backup is not None and not progress.finished:
            backup.commit(finished=True, train_seconds=round(backup.train_seconds(), 1), steps=steps)
        result = {
            "epochs_done": backup.state["epoch"] if backup is not None and backup.state else len(history.epoch),
            "steps_done": steps, "train_seconds": round(backup.state["train_seconds"] if backup and backup.state
                                                        else seconds, 1),
            "loss": float(history.history["loss"][-1]) if history is not None and history.history.get("loss") else None,
            "num_train_examples": num_train, "passes": steps * batch_size / num_train, "reasons": reasons, "model": model,
            "settings": {**fingerprint, "precision": precision, "jit_compile": jit_compile, "epochs": epochs},
            "artifacts": {},
        }
        if config.figure and config.run_dir and facts["figure"]:
            result["artifacts"]["figure"] = mae_run.write_figure(model, source, image_size, channels,
                                                                 os.path.join(config.run_dir, mae_run.FIGURE), config.seed)
        if config.output_dir:
            result["artifacts"]["checkpoint"] = _save(config, model, result)
        if progress.directory is not None:
            progress.directory.remove_backup()
        return result
    finally:
        keras.config.set_dtype_policy(previous_policy)
        if lock is not None:
            lock.release()


def few_passes_note(passes, method="mae"):
    """What a run of fewer than `FEW_PASSES` passes over its images should expect; None for longer runs.

    Example:

    >>> few_passes_note(500) is None, few_passes_note(4.6).startswith("Few passes")
    (True, True)
    """
    if passes >= FEW_PASSES:
        return None
    if method == "simclr":
        return (f"Few passes: {passes:.3g} over the images, where SimCLR's features come with hundreds (Chen et al.: "
                "100-800 over ImageNet). On a 2-core CPU, 20 minutes (34 passes over 25,000 CIFAR images) adapted 7 points "
                "above a model trained from scratch on 250 labelled images, and 1 point on Fashion-MNIST, where scratch is "
                "near the ceiling (benchmarks/RESULTS.md, \"Contrastive pre-training (SimCLR)\"): compare both on your "
                "own images before relying on it.")
    if method == "dino":
        return (f"Few passes: {passes:.3g} over the images, where DINO's features come with hundreds (Caron et al.: "
                "100-800 over ImageNet). Compare the checkpoint with a model trained from scratch on the labelled images "
                "alone before relying on it (benchmarks/RESULTS.md, \"Pre-training on unlabeled images\").")
    return (f"Few passes: {passes:.3g} over the images, where MAE's features come with hundreds (He et al.: 800-1600). "
            "On a 2-core CPU, 20 minutes (about 5 passes over 25,000 images) adapted below a model trained from scratch on "
            "the labelled images alone (benchmarks/RESULTS.md, \"Pre-training on unlabeled images\"): compare both "
            "before relying on it, and give it a longer budget or a GPU.")


def BUDGET_EPOCHS():  # noqa: N802  (the trainer's epoch limit of a budgeted run)
    from keras_vit.training import budget

    return budget.BUDGET_EPOCHS


def _shown(dataset):
    return f"<{len(dataset)} images>" if isinstance(dataset, np.ndarray) else dataset


def _method_facts(model):
    """What the run needs of its model, by method: the backbone, input, pipeline arguments, fingerprint, header and output."""
    from keras_vit.pretraining import dino_run, simclr, simclr_run

    if isinstance(model, mae.MaskedAutoencoder):
        return {"backbone": model.encoder, "image_size": model.grid_size[0] * model.patch_size,
                "channels": model.channels, "pipeline": {"augment": AUGMENT}, "output_files": None,
                "fingerprint": {"mask_ratio": model.mask_ratio,
                                "encoder": {k: model.encoder.vit_config[k] for k in configs.CORE_FIELDS},
                                "decoder": dataclasses.asdict(model.decoder_size)},
                "model_line": mae_run.model_line(model), "data_line": f"augment {AUGMENT} (MAE's crops and flips)",
                "figure": True}
    if isinstance(model, simclr.ContrastiveLearning):
        height, _, channels = model.image_shape
        return {"backbone": model.backbone, "image_size": height, "channels": channels,
                "pipeline": {"views": simclr.NUM_VIEWS, "augment": simclr_run.view_augment()}, "output_files": (simclr_run.MODEL_FILE,),
                "fingerprint": simclr_run.fingerprint(model), "model_line": simclr_run.model_line(model),
                "data_line": simclr_run.data_line(model), "figure": False}
    height, _, channels = model.image_shape
    global_views, local = dino_run.view_augments(model)
    pipeline = {"views": model.num_views, "augment": global_views}
    if local is not None:
        pipeline.update(local_views=model.local_views, local_size=model.local_size, local_augment=local)
    return {"backbone": model.student, "image_size": height, "channels": channels, "pipeline": pipeline,
            "output_files": (dino_run.MODEL_FILE,), "fingerprint": dino_run.fingerprint(model),
            "model_line": dino_run.model_line(model), "data_line": dino_run.data_line(model), "figure": False}


def _check_new_output(output_dir, files):
    """FileExistsError before any work where the checkpoint would replace what is there (the run has no --overwrite).

    `files`: the names written into `output_dir`; None for a folder written whole (MAE's Hugging
    Face folder replaces `output_dir`), which must then be missing or empty.
    """
    if files is not None:
        _validation.check_new_files([os.path.join(output_dir, name) for name in files], False)
    elif os.path.isfile(output_dir) or (os.path.isdir(output_dir) and os.listdir(output_dir)):
        raise FileExistsError(f"{os.path.abspath(output_dir)!r} already exists and is not empty: the checkpoint "
                              "folder replaces it whole; pass overwrite=True (--overwrite) to replace it.")


def _save(config, model, result):
    """Writes the run's checkpoint folder; its absolute path."""
    if config.method == "mae":
        hf.save_mae_hf(model, config.output_dir, overwrite=True)
        return os.path.abspath(config.output_dir)
    from keras_vit.pretraining import dino_run, simclr_run

    saver = simclr_run.save if config.method == "simclr" else dino_run.save
    return saver(model, config.output_dir, {k: result[k] for k in (
        "epochs_done", "steps_done", "train_seconds", "loss", "num_train_examples", "passes", "settings")})


def _model(config, name, source, num_train, data_channels):
    """(the method's model, reasons for the header) of the run: from `weights`, or built for the data."""
    if config.method in ("dino", "simclr"):
        from keras_vit.pretraining import dino_run, simclr_run

        return (dino_run if config.method == "dino" else simclr_run).build(config, name, source, num_train, data_channels)
    return mae_run.build(config, name, source, num_train, data_channels)


def image_side(config, name, source):
    """(the square input side, why): `image_size` given, else the images' own; ValueError where they have none."""
    if config.image_size is not None:
        return config.image_size, "given"
    own = source.image_size
    if own is None or own[0] != own[1]:
        raise ValueError(f"{name('dataset')}={_shown(config.dataset)} has images of several sizes or not square "
                         f"({own}): pass {name('image_size')}.")
    return own[0], "the images' own"


def _header(config, method_facts, source, reasons, facts, progress):
    """The lines printed before the first step: every choice and why."""
    if progress.state is None:
        resume = "new run"
    elif progress.finished:
        resume = f"pre-training had finished (epoch {progress.state['epoch']}); writing the outputs only"
    else:
        resume = f"resuming from epoch {progress.state['epoch']} (backup in {progress.directory.backup_dir})"
    budget = f", budget {config.budget_seconds / 60:g} min (the cosine fitted to the measured pace)" \
        if config.budget_seconds is not None else ""
    optimizer = ("AdamW (MAE's weight decay 0.05, betas 0.9/0.95" if config.method == "mae" else
                 "AdamW (DINO's weight decay 0.04, gradients clipped at norm 3")
    lines = [
        ("Model", method_facts["model_line"]),
        ("Data", f"{source.description} (labels ignored), {method_facts['data_line']}"),
        ("Training", f"{optimizer}, warm-up then cosine; peak learning rate "
                     f"{facts['peak']:g}, the short-run rate), batch {facts['batch']}, {_epochs_text(facts)}, precision {facts['precision']}, "
                     f"{facts['jit']}{budget}"),
        ("Choices", "; ".join(reasons)),
        ("Outputs", f"checkpoint {os.path.abspath(config.output_dir) if config.output_dir else 'none'} ("
                    + {"mae": "a Hugging Face ViT-MAE folder", "dino": "the teacher's backbone as model.keras",
                       "simclr": "the backbone as model.keras"}[config.method]
                    + f": keras-vit train --weights DIR adapts it); run dir "
                    f"{os.path.abspath(config.run_dir) if config.run_dir else 'none'}"
                    + ("" if method_facts["figure"] else " (no figure: reconstructions are MAE's)")),
        ("Resume", resume),
    ]
    return "\n".join(f"{label + ':':<10}{text}" for label, text in lines)


def _epochs_text(facts):
    full = facts["num_train"] // int(str(facts["batch"]).split()[0])
    if facts["steps_per_epoch"] == full:
        return f"epochs {facts['epochs']}"
    return (f"epochs of {facts['steps_per_epoch']} steps, at most {facts['epochs']} (a budget's: a pass is {full} steps; "
            "the first epoch warms up)")


def choose_jit_compile(jit_compile, precision, budget_seconds=None, local_views=0):
    """(XLA or not, why) for the pre-training step: `keras-vit train`'s default, but off on TensorFlow CPUs for
    short budgets and for DINO's local views.

    Example:

    >>> choose_jit_compile(True, "float32")
    (True, 'given')
    """
    if jit_compile is not None:
        return bool(jit_compile), "given"
    from keras_vit import machine
    from keras_vit.training import distribute

    tensorflow_cpu = keras.backend.backend() == "tensorflow" and machine.detect().accelerator == "cpu"
    if tensorflow_cpu and budget_seconds is not None and budget_seconds < XLA_MIN_BUDGET_SECONDS:
        return False, (f"TensorFlow on a CPU, a budget under {XLA_MIN_BUDGET_SECONDS // 60:g} min: XLA's compilation "
                       "costs more than its faster steps give back")
    if tensorflow_cpu and local_views:
        return False, ("TensorFlow on a CPU with local views: XLA's CPU convolutions on their small maps made the "
                       f"step {XLA_LOCAL_VIEWS_SLOWDOWN:g}x slower than TensorFlow's own")
    return distribute.default_jit_compile(precision), "the backend's and machine's default"
