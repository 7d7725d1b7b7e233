"""One training run from a config: data, model, recipe, strategy, crash-safe fit, test, artefacts.

`train(TrainConfig(...))` is what `keras-vit train` and the benchmark call. The run directory
keeps the crash backup (`backup/`), the last full model (`checkpoints/last.keras`), TensorBoard
logs (`tensorboard/`), the CSV history (`history.csv`) and the manifest of what the run wrote
(`run_dir.RunDirectory`); running the same config again after a crash resumes from the last
completed epoch, or, when training had finished, writes only the final artefacts. The backup
is deleted only after every final artefact is written (`save_final_artifacts`). `train`'s
docstring has a complete (tiny) run.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import io
import os
import time
import warnings
import zipfile

import keras
import tensorflow as tf

from keras_vit import _atomic, _validation, backends, configs
from keras_vit import machine as machine_lib
from keras_vit._validation import check_positive_int
from keras_vit.data.pipeline import make_pipeline
from keras_vit.data.sources import load_source, load_splits
from keras_vit.models.head import outputs_probabilities
from keras_vit.training import callbacks as callbacks_lib
from keras_vit.training import distribute, memory, recipes
from keras_vit.training.run_dir import RunDirectory

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
        jit_compile: bool or None. None picks by Keras backend, hardware and precision
            (`distribute.default_jit_compile`). Defaults to None.
        strategy: str. "default"; "mirrored", "multi_worker", "tpu" (tf.distribute, TensorFlow
            only); "data_parallel", "model_parallel" (keras.distribution, JAX only). Defaults to
            "default".
        mesh: str or None. "BATCHxMODEL" device mesh of "model_parallel" (and "data_parallel",
            "Nx1"); None uses every device (model parallel: all on the model axis). Defaults to None.
        run_dir: str or None. Logs and crash backups; None keeps none. Defaults to "runs/train".
        output_dir: str or None. Where the final model goes; None saves nothing.
            Defaults to "saved_models".
        name: str. File name stem of the saved model. Defaults to "vit".
        export: bool. Also write the SavedModel (`<output_dir>/<name>/<version>/`) and
            `<name>.tflite`. Defaults to False.
        resume: bool. Resume from the run directory's backup (of the same configuration);
            False moves an existing backup aside and starts anew. Defaults to True.
        seed: int. Defaults to 0.
        budget_seconds: float or None. Wall-clock training budget (> 0), summed over resumed
            parts; None for no budget. Defaults to None.
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
    mesh: str | None = None
    run_dir: str | None = os.path.join("runs", "train")
    output_dir: str | None = "saved_models"
    name: str = "vit"
    export: bool = False
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


def _architecture(config):
    """The resolved patch_size/hidden_size/num_layers/num_heads/mlp_dim of `config`'s model."""
    base = DEFAULT_MODEL if config.variant is None else dataclasses.asdict(configs.get_variant(config.variant))
    arch = {key: base.get(key) for key in MODEL_KEYS}
    arch.update({k: v for k, v in config.model_overrides.items() if v is not None})
    return arch


def _check_config(config):
    """Validates the numbers and output paths of `config` before any data is read."""
    _validation.check_positive_int("epochs", config.epochs)
    for name in ("batch_size", "image_size", "max_train_examples", "max_test_examples"):
        if getattr(config, name) is not None:
            _validation.check_positive_int(name, getattr(config, name))
    if config.budget_seconds is not None:
        _validation.check_positive_number("budget_seconds", config.budget_seconds)
    for name in ("run_dir", "output_dir"):
        if getattr(config, name) is not None:
            _validation.check_writable_folder(name, getattr(config, name))


def _fingerprint(config, recipe, augment, batch_size, image_size, precision, train_source, num_train):
    """What a backup must share with the run resuming from it: data, model, recipe, batch."""
    backbone = config.backbone
    return {
        "dataset": config.dataset, "train_split": config.train_split, "validation_split": config.validation_split,
        "num_train_examples": num_train,
        "num_classes": train_source.num_classes, "variant": config.variant or "default", **_architecture(config),
        "backbone": None if backbone is None else getattr(backbone, "name", None) or getattr(backbone, "__name__", type(backbone).__name__),
        "pooling": config.pooling, "image_size": image_size, "channels": config.channels, "scaling": config.scaling,
        "recipe": recipe.name, "augment": augment if isinstance(augment, str) else repr(augment),
        "epochs": config.epochs, "batch_size": batch_size, "precision": precision, "seed": config.seed,
    }


def _check_memory(model, batch_size, replicas, precision, recipe, config, image_size, mesh=None, host_devices=1):
    """Refuses (ValueError) a run whose training step cannot fit the device; returns the estimate."""
    from keras_vit.layers import TransformerBlock

    blocks = [
        memory.Block(int(layer.input.shape[1]), int(layer.input.shape[2]), layer.num_heads, layer.mlp_dim)
        for layer in model.layers
        if isinstance(layer, TransformerBlock)
    ]
    patch_size = _architecture(config)["patch_size"] if config.backbone is None else None
    return memory.check_training_memory(
        blocks, model.count_params(), max(batch_size // replicas, 1), image_size, patch_size,
        activation_bytes=2 if precision.startswith("mixed") else 4, optimizer_slots=2 if recipe.optimizer == "adamw" else 1,
        mesh=mesh, available=_available_per_device(host_devices),
    )


def _available_per_device(host_devices):
    """The memory figure one device plans with: host CPU devices of a mesh share the machine's."""
    found = machine_lib.detect()
    return memory.shared_memory(found.memory, host_devices if found.accelerator == "cpu" else 1)


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
        pointer = callbacks_lib.AtomicBackupAndRestore(self.backup_dir).read_state()
        initial_epoch = pointer["epoch"] if pointer else 0
        if os.path.exists(self.filename):
            with open(self.filename, newline="") as f:
                rows = list(csv.reader(f))
            if rows:
                kept = [rows[0]] + [r for r in rows[1:] if r and int(r[0]) < initial_epoch]
                text = io.StringIO()
                csv.writer(text).writerows(kept)
                _atomic.write_text(self.filename, text.getvalue())
        super().on_train_begin(logs)


def make_callbacks(run_dir, fingerprint=None):
    """CSV history, last-model checkpoint, TensorBoard and the crash backup in `run_dir`.

    The backup comes last: it is the commit point of an epoch, after everything else of that
    epoch is on disk. Each file or folder is listed in the run's manifest before it is written.

    Args:
        run_dir: str or None. The run folder; None gives no callbacks.
        fingerprint: dict or None. The configuration, stored with each backup. Defaults to None.

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
    run = RunDirectory(run_dir)
    os.makedirs(run_dir, exist_ok=True)
    run.record("history.csv", "checkpoints/last.keras", "tensorboard/")
    callbacks = [
        ResumableCSVLogger(run.history_path, run.backup_dir),
        callbacks_lib.AtomicModelCheckpoint(os.path.join(run_dir, "checkpoints", "last.keras")),
    ]
    if importlib.util.find_spec("tensorboard") is not None:
        callbacks.append(keras.callbacks.TensorBoard(os.path.join(run_dir, "tensorboard")))
    else:  # a dependency of keras_vit, but installs made with --no-deps may lack it
        warnings.warn("tensorboard is not installed: no TensorBoard logs (pip install tensorboard).", stacklevel=2)

    def on_write(path):
        run.record(os.path.relpath(path, run_dir).replace(os.sep, "/"))

    callbacks.append(callbacks_lib.AtomicBackupAndRestore(
        run.backup_dir, delete_checkpoint=False, metadata={"fingerprint": fingerprint}, on_write=on_write,
    ))
    return callbacks


def _score(model, dataset, jit_compile="auto"):
    """Accuracy and mean cross-entropy (no label smoothing) of `model` on `dataset`.

    The one measure of `evaluate` and of the test metrics after `train`, so both report the same
    numbers for the same model; a wrapper model keeps `model`'s own compile state (optimizer,
    training loss) as it is.
    """
    scorer = keras.Model(model.inputs, model.outputs)
    _work_around_multi_worker(scorer, tf.distribute.get_strategy())
    scorer.compile(
        loss=keras.losses.CategoricalCrossentropy(from_logits=not outputs_probabilities(model)),
        metrics=[keras.metrics.CategoricalAccuracy(name="accuracy")],
        jit_compile=jit_compile,
    )
    scores = scorer.evaluate(dataset, return_dict=True, verbose=0)
    return {"accuracy": float(scores["accuracy"]), "loss": float(scores["loss"])}


def train(config: TrainConfig) -> dict:
    """Runs one training run and returns its results.

    Before the first step it checks the arguments and output folders, the test split, the
    memory a step needs, and whether the run directory's backup belongs to this configuration;
    with `verbose` it prints a header of what it is about to do.

    Args:
        config: `TrainConfig`. What to train, on what, how and where to save it.

    Returns:
        dict with test_accuracy, test_loss and num_test_examples (None without a test
        split), epochs_done (including a last partial epoch of a budget), steps_done,
        initial_epoch (> 0 when resumed), train_seconds (of the whole run, including the
        processes it resumed from), images_per_second (of this process), settings, and the
        paths of the saved artefacts.

    Example (two steps on 32 images of the shipped sample; XLA off, as compiling costs more
    than such a run):

    >>> config = TrainConfig(variant="tiny", image_size=28, epochs=1, max_train_examples=32,
    ...                      max_test_examples=32, batch_size=16, jit_compile=False, verbose=0,
    ...                      run_dir=None, output_dir=None)
    >>> result = train(config)
    >>> result["epochs_done"], result["steps_done"], result["num_train_examples"], 0.0 <= result["test_accuracy"] <= 1.0
    (1, 2, 32, True)
    >>> result["settings"]["recipe"], result["model"].input_shape
    ('compact', (None, 28, 28, 3))
    """
    _check_config(config)
    recipe = recipes.get_recipe(config.recipe)
    # First: MultiWorkerMirroredStrategy must be created before anything initialises TF's runtime.
    strategy = distribute.get_strategy(config.strategy, mesh=config.mesh)
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
    if test_source is not None:
        test_source = test_source.take(config.max_test_examples)
    cache = config.cache if config.cache is not None else train_source.keys is None and num_train <= 200_000
    train_ds = make_pipeline(
        train_source, image_size=image_size, channels=config.channels, scaling=None, batch_size=batch_size,
        training=True, augment=augment, seed=config.seed, cache=cache,
    )
    validation_ds = None
    if validation_source is not None:
        validation_source = validation_source.take(config.max_test_examples)
        validation_ds = make_pipeline(
            validation_source, image_size=image_size, channels=config.channels, scaling=None, batch_size=batch_size,
            drop_remainder=distribute.whole_batches_only(strategy),
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
        estimate = _check_memory(model, batch_size, strategy.num_replicas_in_sync, precision, recipe, config, image_size,
                                 getattr(strategy, "mesh", None), getattr(strategy, "local_devices", 1))
        fingerprint = _fingerprint(config, recipe, augment, batch_size, image_size, precision, train_source, num_train)
        run = RunDirectory(config.run_dir) if config.run_dir else None
        state = run.prepare(fingerprint, config.resume) if run else None
        callbacks = make_callbacks(config.run_dir, fingerprint)
        backup = callbacks[-1] if callbacks else None
        seconds_before = state["train_seconds"] if state else 0.0
        finished = bool(state and state.get("finished"))
        budget = None
        if config.budget_seconds is not None and not finished:
            if config.budget_seconds <= seconds_before:
                finished = True  # killed after the budget was spent but before it was recorded
            else:
                budget = callbacks_lib.TimeBudget(config.budget_seconds - seconds_before, steps_per_epoch, schedule)
        # The backup stays last: the commit point of an epoch, after every other callback's work.
        callbacks = callbacks[:-1] + ([budget] if budget else []) + list(config.callbacks) + callbacks[-1:]
        if config.verbose != 0:
            if isinstance(strategy, distribute.MeshStrategy):
                with strategy.scope():  # its slots now, created split, so the header can measure them
                    model.optimizer.build(model.trainable_variables)
            print(_header(config, model, recipe, augment, precision, jit_compile, strategy, batch_size, steps_per_epoch,
                          image_size, image_size_reason, train_source, num_train, validation_source, test_source,
                          estimate, run, state, finished), flush=True)

        _work_around_multi_worker(model, strategy)
        start = time.perf_counter()
        steps_before = 0
        epochs_run = 0
        history = None
        with strategy.scope():
            if finished:
                backup.restore(model)
            else:
                if state:  # the optimizer's step count of the backup, for this process's images/s
                    steps_before = state.get("steps", 0)
                history = model.fit(train_ds, epochs=config.epochs, callbacks=callbacks, verbose=config.verbose,
                                    shuffle=False, validation_data=validation_ds)
                epochs_run = len(history.epoch)
        process_seconds = time.perf_counter() - start
        steps_done = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
        if backup is not None:
            if not finished:
                backup.commit(finished=True, train_seconds=round(backup.train_seconds(), 1), steps=steps_done)
            epochs_done, train_seconds = backup.state["epoch"], backup.state["train_seconds"]
        else:
            epochs_done, train_seconds = epochs_run, process_seconds
        steps_this_process = steps_done - steps_before if not finished else 0
        result = {
            "test_accuracy": None,
            "test_loss": None,
            "num_test_examples": None,
            "epochs_done": epochs_done,
            "steps_done": steps_done,
            "last_epoch_partial": steps_done < epochs_done * steps_per_epoch,
            "initial_epoch": state["epoch"] if state else 0,
            "train_seconds": round(train_seconds, 1),
            "images_per_second": round(steps_this_process * batch_size / process_seconds, 1) if steps_this_process else None,
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
                "epochs": config.epochs, "precision": precision, "jit_compile": jit_compile, "backend": keras.backend.backend(),
                "strategy": config.strategy, "replicas": strategy.num_replicas_in_sync,
                "mesh": "x".join(map(str, strategy.mesh)) if isinstance(strategy, distribute.MeshStrategy) else None,
                "params": model.count_params(), "seed": config.seed,
                "estimated_step_memory_gib": round(estimate.total / memory.GIB, 2),
            },
        }
        if test_source is not None:
            whole = distribute.whole_batches_only(strategy)
            test_ds = make_pipeline(test_source, image_size=image_size, channels=config.channels, scaling=None,
                                    batch_size=batch_size, drop_remainder=whole)
            with strategy.scope():
                scores = _score(model, test_ds, jit_compile)
            result["test_accuracy"], result["test_loss"] = scores["accuracy"], scores["loss"]
            result["num_test_examples"] = _count(test_source)
            if whole:  # what was scored; the summary names the examples left out
                result["unscored_test_examples"] = result["num_test_examples"] % batch_size
                result["num_test_examples"] -= result["unscored_test_examples"]
        if config.output_dir:
            version = None
            if config.export and backup is not None:
                # Fixed before exporting, so a run killed during the export redoes the same version.
                version = backup.state.get("saved_model_version") or _next_saved_model_version(config.output_dir, config.name)
                backup.commit(saved_model_version=version)
            result["artifacts"] = save_final_artifacts(
                model, train_source.class_names, config.output_dir, config.name, result,
                export=config.export, saved_model_version=version, log_dir=config.run_dir,
            )
        if run is not None:
            run.remove_backup()  # every artefact is written and verified: the backup's job is done
        result["model"] = model
        return result
    finally:
        keras.config.set_dtype_policy(previous_policy)


def _last(history, key):
    values = history.history.get(key) if history is not None else None
    return float(values[-1]) if values else None


def _next_saved_model_version(output_dir, name):
    from keras_vit.export.saved_model import _resolve_version

    return _resolve_version(os.path.join(output_dir, name), None)


def _header(config, model, recipe, augment, precision, jit_compile, strategy, batch_size, steps_per_epoch,
            image_size, image_size_reason, train_source, num_train, validation_source, test_source, estimate, run,
            state, finished) -> str:
    """The lines printed before training: model, data, recipe and hardware, memory, outputs, resume state."""
    arch = _architecture(config)
    blocks = [layer for layer in model.layers if layer.name.startswith("encoderblock_")]
    tokens = int(blocks[0].input.shape[1]) if blocks else None
    model_line = (
        f"Model:    {config.variant or 'default ViT'} (patch {arch['patch_size']}, width {arch['hidden_size']}, "
        f"{arch['num_layers']} layers, {arch['num_heads']} heads, MLP {arch['mlp_dim']}), {tokens} tokens, "
        f"{model.count_params():,} parameters, pooling {config.pooling}"
    )
    if test_source is not None:
        test = f"test {test_source.num_examples:,} ({config.test_split})" if test_source.num_examples is not None else f"test ({config.test_split})"
    else:
        test = "no test split"
    validation = f"; validation: {validation_source.description}" if validation_source is not None else ""
    lines = [
        model_line,
        f"Data:     {config.dataset}: train {num_train:,} ({config.train_split}), {test}; {train_source.num_classes} classes; "
        f"images {image_size}x{image_size}x{config.channels} ({image_size_reason}){validation}",
        f"Training: recipe {recipe.name}, augment {augment if isinstance(augment, str) else 'custom'}, {config.epochs} epochs x "
        f"{steps_per_epoch} steps at batch {batch_size}, precision {precision}, {_compilation(jit_compile)}, "
        f"strategy {config.strategy} ({strategy.num_replicas_in_sync} replica{'s' if strategy.num_replicas_in_sync > 1 else ''})"
        + (f", budget {config.budget_seconds / 60:g} min" if config.budget_seconds is not None else ""),
        f"Memory:   about {estimate.total / memory.GIB:.2f} GiB per training step (estimate)"
        + (f" per device; {strategy.describe(model)}" if isinstance(strategy, distribute.MeshStrategy) else ""),
        f"Outputs:  run dir {os.path.abspath(config.run_dir) if config.run_dir else 'none'}; final model "
        + (f"{os.path.abspath(os.path.join(config.output_dir, config.name))}.keras"
           + (" + SavedModel + TFLite" if config.export else "") if config.output_dir else "not saved"),
    ]
    if state is None:
        resume = "new run"
    elif finished:
        resume = (f"training had finished (epoch {state['epoch']} of {config.epochs}); writing the final artefacts "
                  f"only (backup in {run.backup_dir})")
    else:
        resume = f"resuming from epoch {state['epoch']} of {config.epochs} (backup in {run.backup_dir})"
    lines.append(f"Resume:   {resume}")
    lines.extend(f"          moved the previous run's files aside to {path}" for path in (run.moved if run else []))
    return "\n".join(lines)


def _compilation(jit_compile) -> str:
    """How the train step runs, e.g. "XLA on, Keras backend jax"."""
    backend = backends.current()
    return f"{backend.COMPILER} {'on' if jit_compile else 'off'}, Keras backend {backend.NAME}"


def format_summary(result) -> str:
    """The lines printed after a run: what was trained, for how long, and the test metrics."""
    settings = result["settings"]
    partial = ", the last one partial" if result["last_epoch_partial"] else ""
    speed = f", {result['images_per_second']:.0f} images/s in this process" if result["images_per_second"] else ""
    lines = [
        f"Trained {settings['params']:,} parameters for {result['epochs_done']} epochs ({result['steps_done']} steps{partial}) "
        f"in {result['train_seconds']:.0f} s of training{' including the resumed parts' if result['initial_epoch'] else ''}"
        f"{speed} ({settings['precision']}, {_compilation(settings['jit_compile'])})."
    ]
    if result["test_accuracy"] is not None:
        lines.append(
            f"Test accuracy: {result['test_accuracy']:.4f} (loss {result['test_loss']:.4f}, cross-entropy without "
            f"label smoothing as `keras-vit evaluate` reports it) on {result['num_test_examples']} examples"
            + (f" ({result['unscored_test_examples']} beyond the last whole batch not scored: several processes "
               "split whole batches only)" if result.get("unscored_test_examples") else "")
        )
    elif result["validation_accuracy"] is not None:
        lines.append(f"Validation accuracy: {result['validation_accuracy']:.4f} on {result['data']['validation']}")
    skipped = result["skipped_files"]
    if skipped:
        lines.append(f"Skipped {len(skipped)} corrupt image files: {', '.join(skipped[:3])}{', ...' if len(skipped) > 3 else ''}")
    return "\n".join(lines)


def _work_around_multi_worker(model, strategy):
    """Makes `model` fit and evaluate under MultiWorkerMirroredStrategy with Keras 3.15."""
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        # Keras 3.15's symbolic build before fit/evaluate reduces a distributed batch with
        # strategy.reduce, which fails under MultiWorkerMirroredStrategy. Without a stored
        # strategy Keras builds at trace time and takes the strategy of the enclosing scope.
        model._distribute_strategy = None
        _patch_multi_worker_logs(model)


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


def save_final_artifacts(model, class_names, output_dir, name, result, export=False, saved_model_version=None,
                         log_dir=None) -> dict:
    """Writes and verifies the final artefacts of a run; the one place both the CLI and `train` use.

    `<name>.keras`, `<name>.labels.txt`, with `export` the TF Serving SavedModel
    (`<name>/<version>/`) and `<name>.tflite`, and last `<name>.json` (the results, listing the
    other artefacts). Each is written atomically (`keras_vit._atomic`), so a crash leaves no
    half-written artefact, and checked after writing.

    Args:
        model: keras.Model. The trained model.
        class_names: sequence of str. One name per class, written one per line.
        output_dir: str. Folder of the artefacts (created if missing).
        name: str. File name stem.
        result: dict. The run's results (`train`'s), written as JSON without the model.
        export: bool. Also write the SavedModel and the float32 TFLite file. Defaults to False.
        saved_model_version: int or None. SavedModel version folder, replaced if it exists;
            None for the next free version. Defaults to None.
        log_dir: str or None. Where `<name>.export.log` (the converters' output) goes; a failed
            export raises `keras_vit.export.ExportFailed` naming it, the `.keras` file kept.
            Defaults to `output_dir`.

    Returns:
        dict of artefact kind -> path.

    Example:

    >>> import json, tempfile
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
    >>> result = {"test_accuracy": 0.5}
    >>> paths = save_final_artifacts(model, ["cat", "dog"], tempfile.mkdtemp(), "pets", result)
    >>> sorted(os.path.basename(p) for p in paths.values())
    ['pets.json', 'pets.keras', 'pets.labels.txt']
    >>> open(paths["labels"]).read().split(), json.load(open(paths["summary"]))["test_accuracy"]
    (['cat', 'dog'], 0.5)
    """
    paths = {
        "keras": os.path.join(output_dir, f"{name}.keras"),
        "labels": os.path.join(output_dir, f"{name}.labels.txt"),
    }
    callbacks_lib.save_model_atomic(model, paths["keras"])
    _atomic.write_text(paths["labels"], "".join(f"{c}\n" for c in class_names))
    if export:
        paths.update(_export(model, class_names, output_dir, name, saved_model_version, log_dir or output_dir,
                             paths["keras"]))
    paths["summary"] = os.path.join(output_dir, f"{name}.json")
    summary = {k: v for k, v in result.items() if k not in ("model", "artifacts")}
    summary["input"] = "raw pixels in [0, 255]; scaling is inside the model"
    summary["artifacts"] = dict(paths)
    _atomic.write_json(paths["summary"], summary)
    _verify_artifacts(paths, len(class_names))
    return paths


def _export(model, class_names, output_dir, name, saved_model_version, log_dir, keras_path) -> dict:
    """Writes the SavedModel and the float32 TFLite file; a failure raises `ExportFailed`, one paragraph.

    The converters' output goes to `<log_dir>/<name>.export.log` when one fails, not to the
    terminal: a failed TFLite conversion prints the whole MLIR module.
    """
    from keras_vit import export as export_lib
    from keras_vit.export._common import failure_reported

    os.makedirs(log_dir, exist_ok=True)
    log_path = os.path.join(log_dir, f"{name}.export.log")
    saved_model_dir = os.path.join(output_dir, name)
    tflite_path = os.path.join(output_dir, f"{name}.tflite")
    # The model carries its scaling layer, so both exports take raw [0, 255] pixels.
    steps = (
        ("SavedModel", "saved_model", f"--saved-model {saved_model_dir}", lambda: export_lib.saved_model(
            model, saved_model_dir, saved_model_version, class_names=class_names,
            overwrite=saved_model_version is not None)),
        ("TFLite", "tflite", f"--tflite {tflite_path} --overwrite", lambda: export_lib.tflite(
            model, tflite_path, class_names=class_names, overwrite=True).path),
    )
    paths = {}
    with export_lib.shared_process():
        for fmt, kind, flags, write in steps:
            with failure_reported(fmt, keras_path, f"keras-vit export {keras_path} {flags}", log_path):
                paths[kind] = write()
    return paths


def _verify_artifacts(paths, num_classes):
    """Raises OSError unless each artefact is on disk and looks whole."""
    problems = []
    if not zipfile.is_zipfile(paths["keras"]) or "config.json" not in zipfile.ZipFile(paths["keras"]).namelist():
        problems.append(f"{paths['keras']!r} is not a whole .keras archive")
    with open(paths["labels"], encoding="utf-8") as f:
        if len(f.read().splitlines()) != num_classes:
            problems.append(f"{paths['labels']!r} does not hold {num_classes} class names")
    if "saved_model" in paths and not os.path.isfile(os.path.join(paths["saved_model"], "saved_model.pb")):
        problems.append(f"{paths['saved_model']!r} holds no saved_model.pb")
    if "tflite" in paths:
        with open(paths["tflite"], "rb") as f:
            if f.read(8)[4:8] != b"TFL3":
                problems.append(f"{paths['tflite']!r} is not a TFLite flatbuffer")
    if problems:
        raise OSError("Final artefacts failed their check (the run's backup is kept; run again): " + "; ".join(problems))


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
    data = source.description + (" (training data)" if split == "train" else "")
    return dict(_score(model, ds), num_examples=_count(source), data=data)

