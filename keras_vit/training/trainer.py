"""One training run from a config: data, model, recipe, strategy, crash-safe fit, test, artefacts.

`train(TrainConfig(...))` is what `keras-vit train` and the benchmark call. The run directory
keeps the crash backup (`backup/`), the last full model (`checkpoints/last.keras`), TensorBoard
logs (`tensorboard/`) and the CSV history (`history.csv`); running the same config again after
a crash resumes from the last completed epoch. The final model goes to the output directory
(`save_final_artifacts`). `train`'s docstring has a complete (tiny) run.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import json
import os
import shutil
import time
import warnings

import keras
import tensorflow as tf

from keras_vit import configs
from keras_vit._validation import check_positive_int
from keras_vit.data.pipeline import make_pipeline
from keras_vit.data.sources import load_source, load_splits
from keras_vit.models.head import outputs_probabilities
from keras_vit.training import callbacks as callbacks_lib
from keras_vit.training import distribute, recipes

# The default model of `keras-vit train`: a small ViT for 28x28 images that trains in minutes
# on a CPU. Patch 7 gives 16 tokens (+1 class token); chosen by measured throughput and accuracy
# (benchmarks/RESULTS.md).
DEFAULT_MODEL = {"patch_size": 7, "hidden_size": 128, "num_layers": 6, "num_heads": 4, "mlp_dim": 256}
MODEL_KEYS = ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim")


@dataclasses.dataclass
class TrainConfig:
    """Everything one training run needs; `keras-vit train --help` documents each field.

    Args:
        dataset: str. "sample", a folder, or a tfds name. Defaults to "sample".
        data_dir: str or None. tfds data_dir. Defaults to None.
        train_split: str. Defaults to "train".
        test_split: str or None. Split evaluated at the end; None skips it. A flat class folder
            has none (its held-out validation share is reported instead). Defaults to "test".
        validation_split: float or None. Share of the training split held out for per-epoch
            validation, chosen by `seed`; None validates on the test split (a flat class folder
            holds out 0.1). Defaults to None.
        download: bool. Let tfds download. Defaults to False.
        on_corrupt: str. "skip" or "error" for corrupt image files. Defaults to "skip".
        variant: str or None. A `configs.VARIANTS` name; None for `DEFAULT_MODEL`.
        model_overrides: dict. patch_size/hidden_size/num_layers/num_heads/mlp_dim overrides.
        backbone: Keras model or layer, callable or None. A stem for a hybrid ViT (see
            `keras_vit.ViT(backbone=)`); a callable without arguments is called inside the
            distribution strategy's scope to build it. Defaults to None.
        pooling: str. "token" or "gap". Defaults to "token".
        image_size: int or None. Defaults to the images' own size when they all share one
            square size (with the default model; a folder whose images differ needs it),
            else the variant's.
        channels: int. Model input channels. Defaults to 3.
        scaling: str. Pixel scaling put in the model (`configs.SCALINGS`). Defaults to "unit".
        recipe: str. A `recipes.RECIPES` name. Defaults to "compact".
        augment: str or None. Augmentation preset; None for the recipe's. Defaults to None.
        epochs: int. Defaults to 10.
        batch_size: int or None. Global batch size; None for the recipe's. Defaults to None.
        precision: str. "auto", "float32", "mixed_bfloat16", "mixed_float16". Defaults to "auto".
        jit_compile: bool or None. None picks by hardware and precision. Defaults to None.
        strategy: str. "default", "mirrored", "multi_worker", "tpu". Defaults to "default".
        run_dir: str or None. Logs and crash backups; None keeps none. Defaults to "runs/train".
        output_dir: str or None. Where the final model goes; None saves nothing.
            Defaults to "saved_models".
        name: str. File name stem of the saved model. Defaults to "vit".
        resume: bool. Resume from the run directory's backup. Defaults to True.
        seed: int. Defaults to 0.
        budget_seconds: float or None. Wall-clock training budget. Defaults to None.
        max_train_examples: int or None. Use only the first N training examples. Defaults to None.
        max_test_examples: int or None. Use only the first N test (and validation) examples.
            Defaults to None.
        verbose: int or str. Keras verbosity (1 = progress bar). Defaults to "auto".
        cache: bool or None. Cache decoded data in memory; None caches tfds sets of known
            size under 200k examples (folders stream, arrays are in memory). Defaults to None.
        callbacks: list. Extra Keras callbacks. Defaults to [].

    Example:

    >>> config = TrainConfig(variant="tiny", epochs=3, model_overrides={"num_layers": 1})
    >>> config.dataset, config.recipe, config.batch_size, config.precision
    ('sample', 'compact', None, 'auto')
    >>> dataclasses.replace(config, recipe="deit").recipe
    'deit'
    """

    dataset: str = "sample"
    data_dir: str | None = None
    train_split: str = "train"
    test_split: str | None = "test"
    validation_split: float | None = None
    download: bool = False
    on_corrupt: str = "skip"
    variant: str | None = None
    model_overrides: dict = dataclasses.field(default_factory=dict)
    backbone: object = None
    pooling: str = "token"
    image_size: int | None = None
    channels: int = 3
    scaling: str = "unit"
    recipe: str = "compact"
    augment: str | None = None
    epochs: int = 10
    batch_size: int | None = None
    precision: str = "auto"
    jit_compile: bool | None = None
    strategy: str = "default"
    run_dir: str | None = os.path.join("runs", "train")
    output_dir: str | None = "saved_models"
    name: str = "vit"
    resume: bool = True
    seed: int = 0
    budget_seconds: float | None = None
    max_train_examples: int | None = None
    max_test_examples: int | None = None
    verbose: int | str = "auto"
    cache: bool | None = None
    callbacks: list = dataclasses.field(default_factory=list)


def build_model(config: TrainConfig, num_classes: int, image_size: int, drop_path_rate: float = 0.0):
    """Builds the ViT of `config` for `num_classes` and `image_size`, with scaling inside the model.

    Args:
        config: `TrainConfig`. Its variant (or `DEFAULT_MODEL`), model_overrides, pooling,
            channels and scaling.
        num_classes: int. Width of the head.
        image_size: int. Input height and width.
        drop_path_rate: float. Stochastic depth of the last block. Defaults to 0.

    Example:

    >>> config = TrainConfig(variant="tiny", model_overrides={"num_layers": 1}, channels=1)
    >>> model = build_model(config, num_classes=10, image_size=28)
    >>> model.input_shape, model.output_shape, model.layers[1].name
    ((None, 28, 28, 1), (None, 10), 'preprocessing')
    >>> sum(layer.name.startswith("encoderblock_") for layer in model.layers)
    1
    """
    from keras_vit.models import ViT

    unknown = set(config.model_overrides) - set(MODEL_KEYS)
    if unknown:
        raise ValueError(f"Invalid model_overrides keys {sorted(unknown)}. Expected some of {list(MODEL_KEYS)}.")
    overrides = {k: v for k, v in config.model_overrides.items() if v is not None}
    arch = {} if config.variant is not None else dict(DEFAULT_MODEL)
    arch.update(overrides)
    backbone = config.backbone
    if callable(backbone) and not isinstance(backbone, keras.layers.Layer):
        backbone = backbone()
    return ViT(
        config.variant,
        **arch,
        backbone=backbone,
        input_shape=(image_size, image_size, config.channels),
        num_classes=num_classes,
        pooling=config.pooling,
        preprocessing=config.scaling,
        drop_path_rate=drop_path_rate,
    )


def _count(source):
    if source.num_examples is None:
        source.num_examples = int(source.dataset.reduce(0, lambda n, _: n + 1))
    return source.num_examples


def _resolve_image_size(config, source):
    """Returns (image side, why it was chosen), for the run's header."""
    if config.image_size is not None:
        return int(config.image_size), "given"
    if config.variant is not None:
        return configs.get_variant(config.variant).image_size, f"variant {config.variant}'s"
    size = source.image_size
    if size is None:
        raise ValueError(
            f"The images of dataset={config.dataset!r} differ in size (or it is unknown): pass image_size "
            "(--image-size N) to choose the model's input side."
        )
    if size[0] != size[1]:
        raise ValueError(
            f"The images of dataset={config.dataset!r} are {size[0]}x{size[1]}, not square: pass image_size "
            "(--image-size N) to choose the model's input side."
        )
    return int(size[0]), f"the images' own ({size[0]}x{size[1]})"


class ResumableCSVLogger(keras.callbacks.CSVLogger):
    """CSVLogger (append) that, on resume, drops rows of epochs the backup does not hold.

    It reads the epoch from the backup pointer itself, so it can run before the backup
    callback: each epoch's row is written before the backup commits that epoch, and a crash in
    between only repeats a row that this trimming removes.

    Args:
        filename: str. Path of the CSV file.
        backup_dir: str. Folder of the `AtomicBackupAndRestore` backup.
    """

    def __init__(self, filename, backup_dir):
        super().__init__(filename, append=True)
        self.backup_dir = backup_dir

    def on_train_begin(self, logs=None):
        pointer = os.path.join(self.backup_dir, callbacks_lib.AtomicBackupAndRestore.POINTER)
        initial_epoch = 0
        if os.path.exists(pointer):
            with open(pointer) as f:
                initial_epoch = json.load(f)["epoch"]
        if os.path.exists(self.filename):
            with open(self.filename, newline="") as f:
                rows = list(csv.reader(f))
            if rows:
                kept = [rows[0]] + [r for r in rows[1:] if r and int(r[0]) < initial_epoch]
                tmp_path = self.filename + ".tmp"
                with open(tmp_path, "w", newline="") as f:
                    csv.writer(f).writerows(kept)
                os.replace(tmp_path, self.filename)
        super().on_train_begin(logs)


def make_callbacks(run_dir, resume=True):
    """CSV history, last-model checkpoint, TensorBoard and the crash backup in `run_dir`.

    The backup comes last: it is the commit point of an epoch, after everything else of that
    epoch is on disk.

    Args:
        run_dir: str or None. The run folder; None gives no callbacks.
        resume: bool. Keep what `run_dir` holds, to resume from its backup; False deletes the
            folder first. Defaults to True.

    Example:

    >>> import tempfile
    >>> callbacks = make_callbacks(os.path.join(tempfile.mkdtemp(), "run"))
    >>> [type(callback).__name__ for callback in callbacks]
    ['ResumableCSVLogger', 'AtomicModelCheckpoint', 'TensorBoard', 'AtomicBackupAndRestore']
    >>> make_callbacks(None)
    []
    """
    if run_dir is None:
        return []
    backup_dir = os.path.join(run_dir, "backup")
    if not resume and os.path.isdir(run_dir):
        shutil.rmtree(run_dir)
    os.makedirs(run_dir, exist_ok=True)
    callbacks = [
        ResumableCSVLogger(os.path.join(run_dir, "history.csv"), backup_dir),
        callbacks_lib.AtomicModelCheckpoint(os.path.join(run_dir, "checkpoints", "last.keras")),
    ]
    if importlib.util.find_spec("tensorboard") is not None:
        callbacks.append(keras.callbacks.TensorBoard(os.path.join(run_dir, "tensorboard")))
    else:  # a dependency of keras_vit, but installs made with --no-deps may lack it
        warnings.warn("tensorboard is not installed: no TensorBoard logs (pip install tensorboard).", stacklevel=2)
    callbacks.append(callbacks_lib.AtomicBackupAndRestore(backup_dir))
    return callbacks


def train(config: TrainConfig) -> dict:
    """Runs one training run and returns its results.

    Args:
        config: `TrainConfig`. What to train, on what, how and where to save it.

    Returns:
        dict with test_accuracy, test_loss (None without a test split), epochs_done,
        initial_epoch (> 0 when resumed), train_seconds, images_per_second, settings, and the
        paths of the saved artefacts.

    Example (two steps on 32 images of the shipped sample; XLA off, as compiling costs more
    than such a run):

    >>> config = TrainConfig(variant="tiny", image_size=28, epochs=1, max_train_examples=32,
    ...                      max_test_examples=32, batch_size=16, jit_compile=False, verbose=0,
    ...                      run_dir=None, output_dir=None)
    >>> result = train(config)
    >>> result["epochs_done"], result["num_train_examples"], 0.0 <= result["test_accuracy"] <= 1.0
    (1, 32, True)
    >>> result["settings"]["recipe"], result["model"].input_shape
    ('compact', (None, 28, 28, 3))
    """
    recipe = recipes.get_recipe(config.recipe)
    # First: MultiWorkerMirroredStrategy must be created before anything initialises TF's runtime.
    strategy = distribute.get_strategy(config.strategy)
    precision = distribute.resolve_precision(config.precision)
    jit_compile = config.jit_compile
    distribute.check_jit_compile(jit_compile, strategy)
    if jit_compile is None:
        jit_compile = distribute.default_jit_compile(precision=precision, strategy=strategy)
    batch_size = distribute.global_batch_size(config.batch_size or recipe.batch_size, strategy)
    augment = config.augment or recipe.augment
    keras.utils.set_random_seed(config.seed)

    # Every split is found before the first step: a missing one must not cost a training run.
    train_source, validation_source, test_source = load_splits(
        config.dataset, config.train_split, config.test_split, config.validation_split, config.seed,
        config.data_dir, config.on_corrupt, config.download,
    )
    train_source = train_source.take(config.max_train_examples)
    num_train = _count(train_source)
    if num_train < batch_size:
        raise ValueError(f"batch_size={batch_size} is larger than the {num_train} training examples.")
    steps_per_epoch = num_train // batch_size
    image_size, image_size_reason = _resolve_image_size(config, train_source)
    cache = config.cache if config.cache is not None else train_source.keys is None and num_train <= 200_000
    train_ds = make_pipeline(
        train_source, image_size=image_size, channels=config.channels, scaling=None, batch_size=batch_size,
        training=True, augment=augment, seed=config.seed, cache=cache,
    )
    validation_ds = None
    if validation_source is not None:
        validation_source = validation_source.take(config.max_test_examples)
        validation_ds = make_pipeline(
            validation_source, image_size=image_size, channels=config.channels, scaling=None, batch_size=batch_size
        )

    previous_policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy(precision)
    try:
        with strategy.scope():
            model = build_model(config, train_source.num_classes, image_size, recipe.drop_path_rate)
            schedule = recipes.make_schedule(recipe, batch_size, steps_per_epoch, config.epochs)
            optimizer = recipes.make_optimizer(recipe, model, schedule)
            model.compile(
                optimizer=optimizer,
                loss=recipes.make_loss(recipe, model),
                metrics=[keras.metrics.CategoricalAccuracy(name="accuracy")],
                jit_compile=jit_compile,
            )
        callbacks = make_callbacks(config.run_dir, config.resume)
        budget = None
        if config.budget_seconds:
            budget = callbacks_lib.TimeBudget(config.budget_seconds, steps_per_epoch, schedule)
            callbacks.append(budget)
        start = time.perf_counter()
        callbacks.extend(config.callbacks)
        if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
            # Keras 3.15's pre-fit symbolic build reduces a distributed batch with
            # strategy.reduce, which fails under MultiWorkerMirroredStrategy. Without a stored
            # strategy Keras builds at trace time and takes the strategy of the enclosing scope.
            model._distribute_strategy = None
            _patch_multi_worker_logs(model)
        with strategy.scope():
            history = model.fit(train_ds, epochs=config.epochs, callbacks=callbacks, verbose=config.verbose, shuffle=False,
                                validation_data=validation_ds)
        train_seconds = time.perf_counter() - start
        backups = [c for c in callbacks if isinstance(c, callbacks_lib.AtomicBackupAndRestore)]
        initial_epoch = getattr(backups[0], "restored_epoch", 0) if backups else 0
        epochs_run = len(history.epoch)
        if budget is not None:
            epochs_done = initial_epoch + budget.epochs_done
        else:
            epochs_done = initial_epoch + epochs_run
        steps_run = budget.steps_done if budget is not None else steps_per_epoch * epochs_run
        images_per_second = steps_run * batch_size / train_seconds

        result = {
            "test_accuracy": None,
            "test_loss": None,
            "epochs_done": epochs_done,
            "initial_epoch": initial_epoch,
            "train_seconds": round(train_seconds, 1),
            "images_per_second": round(images_per_second, 1),
            "num_train_examples": num_train,
            "class_names": list(train_source.class_names),
            "data": {
                "train": train_source.description,
                "validation": validation_source.description if validation_source is not None else None,
                "test": test_source.description if test_source is not None else None,
                "image_size": image_size_reason,
            },
            "validation_accuracy": _last(history, "val_accuracy"),
            "skipped_files": list(train_source.corrupt_files()),
            "settings": {
                "dataset": config.dataset, "variant": config.variant or "default",
                "image_size": image_size, "channels": config.channels, "recipe": recipe.name,
                "augment": augment if isinstance(augment, str) else repr(augment), "batch_size": batch_size,
                "epochs": config.epochs, "precision": precision, "jit_compile": jit_compile,
                "strategy": config.strategy, "replicas": strategy.num_replicas_in_sync,
                "params": model.count_params(), "seed": config.seed,
            },
        }
        if test_source is not None:
            test_source = test_source.take(config.max_test_examples)
            test_ds = make_pipeline(test_source, image_size=image_size, channels=config.channels, scaling=None, batch_size=batch_size)
            with strategy.scope():
                scores = model.evaluate(test_ds, return_dict=True, verbose=0)
            result["test_accuracy"] = float(scores["accuracy"])
            result["test_loss"] = float(scores["loss"])
        if config.output_dir:
            result["artifacts"] = save_final_artifacts(model, train_source.class_names, config.output_dir, config.name, result)
        result["model"] = model
        return result
    finally:
        keras.config.set_dtype_policy(previous_policy)


def _last(history, key):
    values = history.history.get(key)
    return float(values[-1]) if values else None


def _patch_multi_worker_logs(model):
    """Works around Keras 3.15 reducing scalar step logs with `strategy.reduce(..., axis=0)`
    under MultiWorkerMirroredStrategy: inside replicas the logs are returned with shape (1,)."""
    get_metrics_result = model.get_metrics_result

    def reshaped_metrics_result():
        logs = get_metrics_result()
        if tf.distribute.in_cross_replica_context():
            return logs
        return {k: tf.reshape(v, (1,)) if len(getattr(v, "shape", (0,))) == 0 else v for k, v in logs.items()}

    model.get_metrics_result = reshaped_metrics_result


def save_final_artifacts(model, class_names, output_dir, name, result) -> dict:
    """Writes the final artefacts of a run: `<name>.keras`, `<name>.labels.txt`, `<name>.json`.

    Each file is written to a temporary path and renamed, so a crash leaves no half-written
    artefact. Export formats (SavedModel, TFLite) are meant to be added here.

    Args:
        model: keras.Model. The trained model.
        class_names: sequence of str. One name per class, written one per line.
        output_dir: str. Folder of the artefacts (created if missing).
        name: str. File name stem.
        result: dict. The run's results (`train`'s), written as JSON without the model.

    Returns:
        dict of artefact kind -> path.

    Example:

    >>> import tempfile
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
    >>> result = {"test_accuracy": 0.5}
    >>> paths = save_final_artifacts(model, ["cat", "dog"], tempfile.mkdtemp(), "pets", result)
    >>> sorted(os.path.basename(p) for p in paths.values())
    ['pets.json', 'pets.keras', 'pets.labels.txt']
    >>> open(paths["labels"]).read().split(), json.load(open(paths["summary"]))["test_accuracy"]
    (['cat', 'dog'], 0.5)
    """
    os.makedirs(output_dir, exist_ok=True)
    paths = {
        "keras": os.path.join(output_dir, f"{name}.keras"),
        "labels": os.path.join(output_dir, f"{name}.labels.txt"),
        "summary": os.path.join(output_dir, f"{name}.json"),
    }
    callbacks_lib.save_model_atomic(model, paths["keras"])
    tmp_path = paths["labels"] + ".tmp"
    with open(tmp_path, "w") as f:
        f.write("".join(f"{c}\n" for c in class_names))
    os.replace(tmp_path, paths["labels"])
    summary = {k: v for k, v in result.items() if k not in ("model", "artifacts")}
    summary["input"] = "raw pixels in [0, 255]; scaling is inside the model"
    callbacks_lib.atomic_write_json(paths["summary"], summary)
    return paths


def evaluate(model_path, dataset="sample", split="test", batch_size=256, data_dir=None, on_corrupt="skip",
             download=False, max_examples=None, validation_split=None, seed=0) -> dict:
    """Evaluates a saved .keras model (trained by `train`) on a data set split.

    The model's input shape gives the image size and channels; pixels go in raw ([0, 255]),
    as models from `train` carry their scaling inside.

    Args:
        model_path: str. A `.keras` classifier whose head returns probabilities (softmax) or
            logits (built with `classifier_activation=None`); the loss reads which.
        dataset: str. "sample", a folder or a tfds name, as for `TrainConfig.dataset`.
            Defaults to "sample".
        split: str. Defaults to "test".
        batch_size: int. Defaults to 256.
        data_dir: str or None. tfds data_dir. Defaults to None.
        on_corrupt: str. "skip" or "error" for corrupt image files. Defaults to "skip".
        download: bool. Let tfds download. Defaults to False.
        max_examples: int or None. Evaluate the first N examples only. Defaults to None.
        validation_split: float or None. The training run's held-out share, for split
            "validation" (a flat class folder holds out 0.1). Defaults to None.
        seed: int. The training run's seed, which chose the held-out share. Defaults to 0.

    Returns:
        dict with accuracy, loss, num_examples and data (where the examples came from;
        "training data" for split "train").

    Example (an untrained model: its zero head gives uniform probabilities, loss ln 10):

    >>> import tempfile, keras_vit
    >>> path = os.path.join(tempfile.mkdtemp(), "vit.keras")
    >>> keras_vit.ViT("tiny", num_classes=10, input_shape=(28, 28, 1), preprocessing="unit").save(path)
    >>> scores = evaluate(path, max_examples=16, batch_size=16)
    >>> scores["num_examples"], round(scores["loss"], 4)
    (16, 2.3026)
    """
    if not os.path.isfile(model_path):
        raise FileNotFoundError(f"Model file not found: model={model_path!r}.")
    if max_examples is not None:
        check_positive_int("max_examples", max_examples)
    source = load_source(dataset, split, data_dir, on_corrupt, download, validation_split, seed).take(max_examples)
    model = keras.saving.load_model(model_path, compile=False)
    height, width, channels = model.input_shape[1:]
    num_classes = model.output_shape[-1]
    if source.num_classes != num_classes:
        raise ValueError(
            f"dataset={dataset!r} has {source.num_classes} classes but the model predicts {num_classes}."
        )
    ds = make_pipeline(source, image_size=(height, width), channels=channels, scaling=None, batch_size=batch_size)
    model.compile(
        loss=keras.losses.CategoricalCrossentropy(from_logits=not outputs_probabilities(model)),
        metrics=[keras.metrics.CategoricalAccuracy(name="accuracy")],
    )
    scores = model.evaluate(ds, return_dict=True, verbose=0)
    data = source.description + (" (training data)" if split == "train" else "")
    return {"accuracy": float(scores["accuracy"]), "loss": float(scores["loss"]), "num_examples": _count(source),
            "data": data}

