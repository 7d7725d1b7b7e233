"""One training run from a config: plan, model, crash-safe fit, test, artefacts.

`train(TrainConfig(...))` is what `keras-vit train` and the benchmark call, a pipeline of small
parts: `plan.resolve` settles every choice once (`RunPlan`), the model is built and compiled
under the plan's strategy and precision, `callbacks` make the fit crash-safe, `report` prints
the header and the summary, and `artifacts` writes the final files. The run directory keeps the
crash backup (`backup/`, its pointer owned by `run_state`), the latest full model
(`checkpoints/last.keras`, at most a minute and an epoch old), TensorBoard logs (`tensorboard/`),
the CSV history (`history.csv`) and the manifest of what the run wrote (`run_dir.RunDirectory`), and is held by one process at a
time (`run_dir.RunLock`: a second run there is refused); running the same config again
after a crash resumes from the last completed epoch, or, when training had finished, writes
only the final artefacts. The backup is deleted only after every final artefact is written.
`train`'s docstring has a complete (tiny) run.
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings

import keras
import tensorflow as tf

from keras_vit import _keras_file, machine
from keras_vit._validation import check_fraction, check_positive_int
from keras_vit.data.pipeline import make_pipeline
from keras_vit.data.sources import load_source, naming_corrupt_files
from keras_vit.models.head import outputs_probabilities
from keras_vit.training import batch_norm
from keras_vit.training import callbacks as callbacks_lib
from keras_vit.training import distribute, memory, plan as plan_lib, probe as probe_lib, recipes
from keras_vit.training.artifacts import next_saved_model_version, save_final_artifacts
from keras_vit.training.run_dir import RunLock, RunProgress
from keras_vit.training.callbacks import ResumableCSVLogger, make_callbacks  # noqa: F401  (their old home)
from keras_vit.training.plan import (  # noqa: F401  (public here too: TrainConfig is the trainer's input)
    DEFAULT_MODEL,
    MODEL_KEYS,
    RunPlan,
    TrainConfig,
    build_model,
)
from keras_vit.training import report
from keras_vit.training.report import format_summary  # noqa: F401  (public here too)


def _score(model, dataset, jit_compile="auto"):
    """Accuracy and mean cross-entropy (no label smoothing) of `model` on `dataset`.

    The one measure of `evaluate` and of the test metrics after `train`, so both report the same
    numbers for the same model; a wrapper model keeps `model`'s own compile state (optimizer,
    training loss) as it is.
    """
    scorer = keras.Model(model.inputs, model.outputs)
    distribute.work_around_multi_worker(scorer, tf.distribute.get_strategy())
    scorer.compile(
        loss=keras.losses.CategoricalCrossentropy(from_logits=not outputs_probabilities(model)),
        metrics=[keras.metrics.CategoricalAccuracy(name="accuracy")],
        jit_compile=jit_compile,
    )
    scores = _run_on(dataset, scorer.evaluate, return_dict=True, verbose=0)
    return {"accuracy": float(scores["accuracy"]), "loss": float(scores["loss"])}


def _run_on(dataset, method, **kwargs):
    """`method(dataset, **kwargs)` (a model's fit or evaluate), a corrupt file named in one ValueError."""
    with warnings.catch_warnings():
        # A folder's pipeline has no known length (corrupt files drop out while decoding), so
        # every pass ends by running out of data: Keras' warning about it is noise here.
        warnings.filterwarnings("ignore", message="Your input ran out of data")
        return naming_corrupt_files(method, dataset, **kwargs)


def train(config: TrainConfig, *, name=None) -> dict:
    """Runs one training run and returns its results.

    Before the first step it checks the arguments and output folders, the test split, the
    memory a step needs, and whether the run directory's backup belongs to this configuration;
    it holds the run directory until it returns (another process's run there is refused with
    `run_dir.RunDirectoryInUse`, a ValueError naming its process id); with `verbose` it prints
    a header of what it is about to do.

    Args:
        config: `TrainConfig`. What to train, on what, how and where to save it.
        name: callable or None. How the check names a field in messages (`plan.resolve`).
            Defaults to None.

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
    ('compact', (None, 28, 28, 1))
    """
    plan = plan_lib.resolve(config, name=name)
    # Before anything is written there: a second run in the folder is refused, naming the holder.
    lock = RunLock(config.run_dir, _process_index(plan.strategy), name=name) if config.run_dir else None
    previous_policy = keras.config.dtype_policy()
    try:
        train_ds = _pipeline(plan, plan.train, training=True)
        validation_ds = _validation_pipeline(plan)
        keras.config.set_dtype_policy(plan.precision)
        model, schedule = _compiled_model(plan)
        estimate = _check_memory(model, plan)
        progress = RunProgress.open(config.run_dir, plan.fingerprint(), config.resume)
        if config.verbose != 0:
            print(report.header(plan, model, estimate, progress), flush=True)
        recorded = (progress.state or {}).get("adapt_decision")  # made by the run this one resumes
        prober, probed, finetune = _probe(plan, model, progress, recorded)
        callbacks, backup = _callbacks(plan, progress, schedule, spent=probed.seconds if probed else 0.0)
        midway = None
        if finetune:
            train_ds, midway = _give_back(plan, train_ds, prober, probed, schedule, progress, backup)
            if midway is not None:
                callbacks.insert(len(callbacks) - (backup is not None), midway)  # the backup stays last
            if _gives_back(plan, progress):  # once given back, validation would score images trained on
                validation_ds = None
            history, steps_before, process_seconds = _fit(plan, progress, model, train_ds, validation_ds, callbacks,
                                                                backup)
            # The run's training time (what a budget counts) ends with the fit; the recalibration is reported apart.
            train_seconds = backup.train_seconds() if backup is not None else None
            recalibrated = _precise_batch_norm(plan, model, train_ds)
        else:  # the probe is the result: no fit (a resumed run's backup keeps only its SavedModel version)
            history, steps_before, process_seconds, recalibrated, train_seconds = None, 0, probed.seconds, None, None
            backup = backup if progress.state else None
        result = _results(plan, progress, model, estimate, history, steps_before, process_seconds,
                          backup if finetune else None, train_seconds)
        result["batch_norm"] = recalibrated
        if recalibrated and validation_ds is not None:  # the last epoch's score predates the new statistics
            with plan.strategy.scope():
                result["validation_accuracy"] = _score(model, validation_ds, plan.jit_compile)["accuracy"]
        result["probe"] = dataclasses.asdict(probed) if probed else None
        if probed and not finetune:
            result["validation_accuracy"] = probed.validation_accuracy
        result["adapt_decision"] = _keep_the_better(plan, model, prober, probed, finetune, midway, recorded)
        decision = result["adapt_decision"]
        if decision and decision.get("decided_at_step") is not None:  # the last score the held-out images gave
            result["validation_accuracy"] = decision[f"{decision['kept']}_validation_accuracy"]
        if plan.test is not None:
            _test(plan, model, result)
        if config.output_dir:
            version = None
            if config.export and backup is not None:
                # Fixed before exporting, so a run killed during the export redoes the same version.
                reserved = (backup.state or backup.read_state() or {}).get("saved_model_version")
                version = reserved or next_saved_model_version(config.output_dir, config.name)
                backup.commit(saved_model_version=version)
            result["artifacts"] = save_final_artifacts(
                model, plan.train.class_names, config.output_dir, config.name, result,
                export=config.export, saved_model_version=version, log_dir=config.run_dir,
            )
        if progress.directory is not None:
            progress.directory.remove_backup()  # every artefact is written and verified: the backup's job is done
        result["model"] = model
        return result
    finally:
        keras.config.set_dtype_policy(previous_policy)
        if lock is not None:
            lock.release()


def _process_index(strategy):
    """This process's index in a run of several processes, each of which holds a lock of its own; None for one."""
    if isinstance(strategy, distribute.MeshStrategy) and strategy.processes > 1:
        import jax

        return jax.process_index()
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return getattr(strategy.cluster_resolver, "task_id", None)
    return None


def _probe(plan, model, progress, recorded=None):
    """Fits the linear probe a run from a checkpoint asks for.

    Returns (`probe.LinearProbe` or None, its `ProbeResult` or None, whether to fine-tune). Before
    fine-tuning from the probe (`--adapt auto`) the probed weights are kept on the LinearProbe
    (`weights`), for `_keep_the_better`. A resumed run fits the probe again, on the checkpoint's
    weights (the backup's are restored later, by the fit), so that it decides as the killed run
    would have; unless `recorded`, the decision the killed run made, kept the fine-tuning (nothing
    left to decide). Where it kept the probe, the probe is the result again, with no fine-tuning.
    """
    if plan.adapt not in ("probe", "probe_then_finetune") or (recorded or {}).get("kept") == "finetuned":
        return None, None, True
    with plan.strategy.scope():
        prober = probe_lib.LinearProbe(model, batch_size=plan.batch_size, seed=plan.config.seed)
        probed = prober.fit(plan.train, plan.validation)
    finetune, why = plan_lib.finetune_after_probe(plan, probed)
    if recorded is not None:
        finetune, why = False, (f"the probe was kept after {recorded['decided_at_step']} steps of fine-tuning, "
                                "before the run was resumed")
    elif progress.state:  # the probe's seconds vary: the killed run's choice to fine-tune stands
        finetune, why = True, "the fine-tuning goes on from the backup; the probe is fitted again to decide against"
    if finetune:
        prober.weights = model.get_weights()
    if plan.config.verbose != 0:
        validation = f", validation accuracy {probed.validation_accuracy:.4f}" if probed.validation_accuracy is not None else ""
        flips = "with" if probed.flips else "without"
        print(f"Probe:    {probed.num_features} features of {plan.num_train:,} images in {probed.seconds:.1f} s "
              f"({probed.forward_seconds_per_image * 1e3:.2g} ms per image forward); ridge l2 {probed.l2:.3g} "
              f"{flips} flipped images, chosen on held-out folds ({probed.cv_accuracy:.4f}); train accuracy "
              f"{probed.train_accuracy:.4f}{validation}; {why}", flush=True)
    return prober, probed, finetune


def _gives_back(plan, progress):
    """Whether this run's fine-tuning takes `plan.given_back`: one process, and a decision's own held-out share."""
    return plan.given_back is not None and _process_index(plan.strategy) is None and not progress.finished


def _give_back(plan, train_ds, prober, probed, schedule, progress, backup=None):
    """`--adapt auto`: the fine-tuning's pipeline that takes the held-out images back once it has decided on them.

    Returns (the training pipeline, the `callbacks.DecideMidway` that decides, or None). Without a
    probe to decide against (a run resumed after its decision kept the fine-tuning) it trains on
    every image from its start. The decision goes into the crash backup (`backup`'s metadata,
    written with the epoch that made it), so a run resumed from that epoch on does not decide again.
    """
    if not _gives_back(plan, progress):
        return train_ds, None
    decide_now = prober is not None
    switch = tf.Variable(not decide_now, trainable=False, name="given_back")
    every_image = _pipeline(plan, plan.given_back, training=True)
    # The switch is read for each batch: from the next batches on, they come from every image.
    choice = tf.data.Dataset.from_tensors(0).repeat().map(lambda _: tf.cast(switch, tf.int64))
    dataset = tf.data.Dataset.choose_from_datasets([train_ds, every_image], choice)
    if not decide_now:
        return dataset, None

    def decide(steps):
        figures, keep = _compare(plan, prober, probed)
        decision = {**figures, "decided_at_step": steps, "kept": "finetuned" if keep else "probe"}
        if backup is not None:
            backup.metadata["adapt_decision"] = decision
        if plan.config.verbose != 0:
            then = ("its held-out images join the fine-tuning" if keep
                    else "the probe is clearly better: fine-tuning stops here")
            print(f"\nDecided:  after {steps} steps, validation accuracy {decision['finetuned_validation_accuracy']:.4f} "
                  f"fine-tuned against {probed.validation_accuracy:.4f} for the probe "
                  f"({report.sign_test_words(decision)}): {then}", flush=True)
        return decision, keep

    cosine = schedule if isinstance(schedule, recipes.WarmupCosine) else None
    midway = callbacks_lib.DecideMidway(decide, switch, plan_lib.GIVE_BACK_AT, schedule=cosine,
                                        total_steps=plan.epochs * plan.steps_per_epoch)
    return dataset, midway


def _compare(plan, prober, probed):
    """The probe against the model as it is now on the validation images: (the figures, keep the fine-tuned model?).

    It is kept unless the probe is clearly better: right on enough of the images where exactly one
    of the two is right that a one-sided sign test puts chance below `plan.DECISION_ALPHA` (5%).
    """
    with plan.strategy.scope():
        only_probe, only_tuned, tuned = prober.compare_on_validation()
    p_value = probe_lib.sign_test_p_value(only_probe, only_tuned)
    decision = {"probe_validation_accuracy": probed.validation_accuracy, "finetuned_validation_accuracy": tuned,
                "only_probe_right": only_probe, "only_finetuned_right": only_tuned, "sign_test_p": p_value}
    return decision, p_value >= plan_lib.DECISION_ALPHA


def _keep_the_better(plan, model, prober, probed, finetuned, midway=None, recorded=None):
    """`--adapt auto`: keeps the fine-tuned model unless the probe is clearly better on the validation images.

    Clearly: `_compare`. A draw, or a lead of an image or two on the few images held out, keeps the
    fine-tuned model: LP-FT ends above its probe where it has the time (timm's did on each of
    benchmarks/RESULTS.md's four backbones), and one image of 25 is 4 points of noise. Decided
    after the fine-tuning, or midway by `midway` (`_give_back`), which then gave the held-out
    images to the fine-tuning's rest. `recorded`: that decision as the run this one resumes made
    it (`_give_back`), which stands. Where the probe is the result, its head is fitted again on
    the training and validation images together (the validation share was held out for this
    decision alone). Returns what was decided (a dict for the run's results), or None for runs
    that decide nothing.
    """
    # Decided midway, by this run or by the run it resumes: that decision stands.
    made = ({**recorded, "before_resume": True} if recorded is not None
            else midway.record if midway is not None and midway.decided_at_step is not None else None)
    if plan.adapt != "probe_then_finetune" or (made is None and (prober is None or probed.validation_accuracy is None)):
        return None
    decision = {"probe_validation_accuracy": probed.validation_accuracy if probed else None,
                "finetuned_validation_accuracy": None}
    if made is not None:
        decision, keep = dict(made), made["kept"] == "finetuned"
    elif finetuned:
        decision, keep = _compare(plan, prober, probed)
    if made is not None or finetuned:
        if keep:
            if plan.config.verbose != 0:
                before = " before the run was resumed" if recorded is not None else ""
                when = (f"decided after {decision['decided_at_step']} steps{before}, then fine-tuned on the held-out "
                        "images too; " if made is not None else "")
                print(f"Kept:     the fine-tuned model ({when}validation accuracy "
                      f"{decision['finetuned_validation_accuracy']:.4f} against "
                      f"{decision['probe_validation_accuracy']:.4f} for the probe; {report.sign_test_words(decision)})",
                      flush=True)
            return {**decision, "kept": "finetuned"}
        if finetuned:
            model.set_weights(prober.weights)
    fitted = prober.refit_with_validation()
    decision.update(kept="probe", refit_l2=fitted.l2)
    if plan.config.verbose != 0:
        tuned = decision["finetuned_validation_accuracy"]
        against = f" against {tuned:.4f} fine-tuned; {report.sign_test_words(decision)}" if tuned is not None else ""
        print(f"Kept:     the probe (validation accuracy {probed.validation_accuracy:.4f}{against}), its head fitted "
              f"again on the training and validation images", flush=True)
    return decision


def _pipeline(plan, source, training=False, whole=False):
    """The batched pipeline of `source`; `whole`: only whole batches where several processes must split them.

    Training repeats forever (fit takes `plan.steps_per_epoch`): one iterator for the whole fit,
    where a new one each epoch cost 0.7 s of its start and end on 2 cores, as much as 5 steps of
    a small-data fine-tuning (benchmarks/RESULTS.md section 17, "Epochs without their edges").
    """
    extra = dict(training=True, augment=plan.augment, seed=plan.config.seed, cache=plan.cache,
                 repeat=True) if training else {}
    if whole and distribute.whole_batches_only(plan.strategy):
        extra["drop_remainder"] = True
    return make_pipeline(
        source, image_size=plan.image_size, channels=plan.channels, scaling=None, batch_size=plan.batch_size,
        resize=plan.config.resize, **extra,
    )


def _validation_pipeline(plan):
    """The per-epoch validation pipeline (None without validation), held in memory after its first pass if small."""
    if plan.validation is None:
        return None
    dataset = _pipeline(plan, plan.validation, whole=True)
    if plan.validation.count() * plan.image_size ** 2 * plan.channels * 4 <= plan_lib.VALIDATION_CACHE_BYTES:
        dataset = dataset.cache()
    return dataset


def _compiled_model(plan):
    """The plan's model, compiled with its recipe inside its strategy's scope; and the learning-rate schedule."""
    recipe = plan.recipe
    with plan.strategy.scope():
        model = build_model(plan)
        schedule = recipes.make_schedule(recipe, plan.batch_size, plan.steps_per_epoch, plan.epochs)
        model.compile(
            optimizer=recipes.make_optimizer(recipe, model, schedule),
            loss=recipes.make_loss(recipe, model),
            metrics=[keras.metrics.CategoricalAccuracy(name="accuracy")],
            jit_compile=plan.jit_compile,
        )
        recipes.build_optimizer_variables(model)  # slots split as the strategy says, and one trace of the step
    return model, schedule


def _callbacks(plan, progress, schedule, spent=0.0):
    """The fit's callbacks, the crash backup last (None without a run directory), and the backup.

    `spent`: seconds of the budget this process already used before the fit (a linear probe).
    """
    config = plan.config
    # Processes of one run back up every epoch: each would otherwise put off its backups by its own
    # clock, and a killed run's processes would resume from different epochs.
    several = _process_index(plan.strategy) is not None
    callbacks = make_callbacks(config.run_dir, plan.fingerprint(), backup_seconds=0.0 if several else None)
    backup = callbacks[-1] if callbacks else None
    budget = None
    if config.budget_seconds is not None and not progress.finished:
        if config.budget_seconds <= progress.seconds_before + spent:
            progress.finished = True  # killed after the budget was spent but before it was recorded
        else:
            budget = callbacks_lib.TimeBudget(config.budget_seconds - progress.seconds_before - spent, plan.steps_per_epoch,
                                              schedule)
    # The backup stays last: the commit point of an epoch, after every other callback's work.
    return callbacks[:-1] + ([budget] if budget else []) + list(config.callbacks) + callbacks[-1:], backup


def _fit(plan, progress, model, train_ds, validation_ds, callbacks, backup):
    """Trains (resuming from the plan's backup), or restores a finished run; returns (history, steps before, seconds)."""
    distribute.work_around_multi_worker(model, plan.strategy)
    start = time.perf_counter()
    steps_before = 0
    history = None
    with plan.strategy.scope():
        if progress.finished:
            backup.restore(model)
        else:
            if progress.state:  # the backup's weights and optimizer state; its step count, for this process's images/s
                backup.restore(model)
                steps_before = progress.state.get("steps", 0)
            history = _run_on(
                train_ds, model.fit, epochs=plan.epochs, steps_per_epoch=plan.steps_per_epoch,
                initial_epoch=backup.restored_epoch if backup else 0, callbacks=callbacks, verbose=plan.config.verbose,
                shuffle=False, validation_data=validation_ds,
            )
    return history, steps_before, time.perf_counter() - start


def _precise_batch_norm(plan, model, train_ds):
    """Recomputes the BatchNorm statistics a short run left short of the data (`batch_norm`); what it did
    (layers, images, the steps that left them short, its seconds), or None."""
    steps = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
    layers = batch_norm.short_layers(model, steps)
    if not layers:
        return None
    start = time.perf_counter()
    with plan.strategy.scope():
        images = batch_norm.recalibrate(model, train_ds.take(min(plan.steps_per_epoch, batch_norm.MAX_BATCHES)), layers)
    return {"layers": len(layers), "images": images, "steps": steps, "seconds": round(time.perf_counter() - start, 1)}


def _results(plan, progress, model, estimate, history, steps_before, process_seconds, backup, train_seconds):
    """The run's results (without the test metrics and the artefacts); commits a finished backup.

    `train_seconds`: the whole run's training seconds when its fit ended (the backup's clock), which the backup
    keeps; None without a backup.
    """
    steps_done = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
    if backup is not None:
        if not progress.finished:
            backup.commit(finished=True, train_seconds=round(train_seconds, 1), steps=steps_done)
        epochs_done, train_seconds = backup.state["epoch"], backup.state["train_seconds"]
    else:
        epochs_done, train_seconds = len(history.epoch) if history is not None else 0, process_seconds
    steps_this_process = steps_done - steps_before if not progress.finished else 0
    return {
        "test_accuracy": None,
        "test_loss": None,
        "num_test_examples": None,
        "epochs_done": epochs_done,
        "steps_done": steps_done,
        "last_epoch_partial": steps_done < epochs_done * plan.steps_per_epoch,
        "initial_epoch": progress.state["epoch"] if progress.state else 0,
        "train_seconds": round(train_seconds, 1),
        "images_per_second": round(steps_this_process * plan.batch_size / process_seconds, 1) if steps_this_process else None,
        "num_train_examples": plan.train.num_used() if history is not None else plan.num_train,
        "class_names": list(plan.train.class_names),
        "data": {
            "train": plan.train.description,
            "validation": plan.validation.description if plan.validation is not None else None,
            "test": plan.test.description if plan.test is not None else None,
            "image_size": plan.image_size_reason,
            "channels": plan.channels_reason,
        },
        "validation_accuracy": _last(history, "val_accuracy"),
        "skipped_files": list(plan.train.corrupt_files()),
        "settings": plan.settings(model, estimate),
    }


def _test(plan, model, result):
    """Adds the test split's accuracy and loss to `result`."""
    with plan.strategy.scope():
        scores = _score(model, _pipeline(plan, plan.test, whole=True), plan.jit_compile)
    result["test_accuracy"], result["test_loss"] = scores["accuracy"], scores["loss"]
    plan.test.count()
    result["num_test_examples"] = plan.test.num_used()  # the images scored, not the files listed
    if distribute.whole_batches_only(plan.strategy):  # what was scored; the summary names the examples left out
        result["unscored_test_examples"] = result["num_test_examples"] % plan.batch_size
        result["num_test_examples"] -= result["unscored_test_examples"]


def _check_memory(model, plan):
    """Refuses (ValueError) a run whose training step cannot fit the device; returns the estimate."""
    from keras_vit.layers import TransformerBlock

    blocks = [
        memory.Block(int(layer.input.shape[1]), int(layer.input.shape[2]), layer.num_heads, layer.mlp_dim)
        for layer in model.layers
        if isinstance(layer, TransformerBlock)
    ]
    patch_size = plan.architecture["patch_size"] if plan.config.backbone is None and not plan.stem else None
    return memory.check_training_memory(
        blocks, model.count_params(), max(plan.batch_size // plan.strategy.num_replicas_in_sync, 1), plan.image_size,
        patch_size, activation_bytes=2 if plan.precision.startswith("mixed") else 4,
        optimizer_slots=2 if plan.recipe.optimizer == "adamw" else 1,
        mesh=getattr(plan.strategy, "mesh", None), available=_available_per_device(getattr(plan.strategy, "local_devices", 1)),
    )


def _available_per_device(host_devices):
    """The memory figure one device plans with: host CPU devices of a mesh share the machine's."""
    found = machine.detect()
    return memory.shared_memory(found.memory, host_devices if found.accelerator == "cpu" else 1)


def _last(history, key):
    values = history.history.get(key) if history is not None else None
    return float(values[-1]) if values else None


def check_evaluate_arguments(batch_size=256, max_examples=None, validation_split=None, name=None):
    """Checks `evaluate`'s numbers before any file is read: ValueError naming the argument.

    Args:
        batch_size: int. As for `evaluate`. Defaults to 256.
        max_examples: int or None. As for `evaluate`. Defaults to None.
        validation_split: float or None. As for `evaluate`. Defaults to None.
        name: callable or None. How an argument is spelled in messages (`keras-vit evaluate`
            passes its flags, "--max-examples"). Defaults to None (the argument's own name).

    Example:

    >>> check_evaluate_arguments(max_examples=0, name=lambda field: "--" + field.replace("_", "-"))
    Traceback (most recent call last):
    ...
    ValueError: Invalid --max-examples=0. Expected an integer >= 1.
    """
    name = name or (lambda field: field)
    check_positive_int(name("batch_size"), batch_size)
    if max_examples is not None:
        check_positive_int(name("max_examples"), max_examples)
    if validation_split is not None:
        check_fraction(name("validation_split"), validation_split)


def evaluate(model_path, dataset="sample", split="test", batch_size=256, data_dir=None, on_corrupt="skip",
             download=False, max_examples=None, validation_split=None, seed=0, by_index=False) -> dict:
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
        by_index: bool. Score the data set's labels by index, without matching its class names to
            the model's (`<stem>.labels.txt` beside the file, or the names a zero-shot classifier
            keeps): the same names in another order are matched by name, other names refused.
            Defaults to False.

    Returns:
        dict with accuracy, loss, num_examples, data (where the examples came from;
        "training data" for split "train") and matched_by_name (the labels were reordered to the
        model's classes).

    Example (an untrained model: its zero head gives uniform probabilities, loss ln 10):

    >>> import tempfile, keras_vit
    >>> path = os.path.join(tempfile.mkdtemp(), "vit.keras")
    >>> keras_vit.ViT("tiny", num_classes=10, input_shape=(28, 28, 1), preprocessing="unit").save(path)
    >>> scores = evaluate(path, max_examples=16, batch_size=16)
    >>> scores["num_examples"], round(scores["loss"], 4)
    (16, 2.3026)
    """
    check_evaluate_arguments(batch_size, max_examples, validation_split)
    if os.path.isdir(model_path):
        raise ValueError(f"Invalid model={model_path!r}: a folder; expected a .keras file.")
    if not os.path.isfile(model_path):
        raise FileNotFoundError(f"Model file not found: model={model_path!r}.")
    source = load_source(dataset, split, data_dir, on_corrupt, download, validation_split, seed).take(max_examples)
    model = _keras_file.load(model_path, "model", compile=False)
    # A .keras file of another model (not an image classifier) must be named, not fail in unpacking.
    from keras_vit.export import _common

    try:
        height, width, channels = _common.static_image_shape(model, what="evaluate")
        num_classes = _common.num_classes(model, what="evaluate")
    except ValueError as error:
        raise ValueError(f"Invalid model={model_path!r}: {error}") from None
    if source.num_classes != num_classes:
        raise ValueError(
            f"dataset={dataset!r} has {source.num_classes} classes but the model predicts {num_classes}."
        )
    beside = _common.labels_beside(model_path)
    order = None if by_index else _common.class_order(
        beside or _common.class_names_of(model), source.class_names, argument=f"dataset={dataset!r}",
        names_from="the labels file beside the model" if beside else "kept in the model")
    ds = make_pipeline(source, image_size=(height, width), channels=channels, scaling=None, batch_size=batch_size)
    if order is not None:
        ds = ds.map(lambda images, labels: (images, tf.gather(labels, order, axis=-1)))
    data = source.description + (" (training data)" if split == "train" else "")
    scores = _score(model, ds)
    source.count()
    # After the full pass: the images scored, and the files skipped as corrupt (listing or decoding).
    return dict(scores, num_examples=source.num_used(), data=data, skipped_files=list(source.corrupt_files()),
                matched_by_name=order is not None)

