"""first-calls: what a budgeted run pays before its steady steps, and does the precision trial see it? (issue 54)

A run's `--budget-minutes` clock starts with its first step, so each precision's first training
step (tracing; XLA's compilation) and its first validation pass (compiled again, at each batch
shape) come out of the budget. For each workload and round, this times:
- the precision trial as a run makes it (`keras_vit.precision_trial.measure_training`, both
  candidates in one child process): each candidate's first training step and first validation call;
- a fit as a run makes one, each precision in its own process (`benchmarks.workers`): 4 epochs of 7 steps on
  random images with validation on `--validation` images; its first step's seconds beyond the
  median step, and its first validation pass's beyond the median of the later passes.
Then what a budget's weighing charges (`precision_trial.validation_shapes` x the trial's first
validation call) beside what the fit paid. Rounds alternate the order of the precisions.

    python -m benchmarks first-calls [--workloads adapt,train_default,train_ti4] [--validation 500] [--rounds 2] [--out DIR]

`tiny` (a 1-block model on 8 px images) is the smoke run's workload.
"""

from __future__ import annotations

import argparse
import statistics
import time

POLICIES = ("float32", "mixed_bfloat16")
# The scratch run of `keras-vit train --dataset FOLDER --budget-minutes 0.5` on 250 images of 32 px
# (RESULTS section 4, "The trial's model"): the conv stem and 4 blocks of width 128, batch 32.
ADAPT = dict(architecture={"patch_size": 1, "hidden_size": 128, "num_layers": 4, "num_heads": 4, "mlp_dim": 256},
             image_size=32, channels=3, batch_size=32, recipe="compact",
             stem={"filters": (32, 64, 128, 128), "strides": (2, 2, 2, 1)})
# The smallest model with a validation pass, for a smoke run.
TINY = dict(architecture={"patch_size": 4, "hidden_size": 16, "num_layers": 1, "num_heads": 2, "mlp_dim": 32},
            image_size=8, channels=1, batch_size=8)
EPOCHS, STEPS = 4, 7


def training_workload(name):
    """The named workload as a precision trial describes it: "adapt", "tiny", or a `benchmarks.workloads` training row."""
    from keras_vit import precision_workloads

    if name in ("adapt", "tiny"):
        return precision_workloads.training_workload(**(ADAPT if name == "adapt" else TINY))
    from benchmarks.jobs import vit_arguments
    from benchmarks.workloads import workload

    w = workload(name)
    if not w["train"]:
        raise SystemExit(f"--workloads {name!r}: not a training workload")
    return precision_workloads.training_workload(vit_arguments(w), w["image"], w["channels"], w["batch"])


def fit_first_calls(workload, policy, validation):
    """{"first_step_s", "step_s", "first_validation_s", "validation_s"} of a fit of `workload` under `policy`."""
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_vit.training import precision_child

    steps, labels, _ = precision_child.training_steps(workload, [policy])
    model = steps[policy].__defaults__[0]  # the step's model (precision_child builds it as a run does)
    rng = np.random.default_rng(0)
    shape = (workload["image_size"], workload["image_size"], workload["channels"])

    def data(count, repeat):
        images = rng.random((count, *shape), dtype="float32")
        dataset = tf.data.Dataset.from_tensor_slices((images, rng.integers(0, 10, count))).batch(workload["batch_size"])
        return dataset.repeat() if repeat else dataset.cache()

    step_times, validation_times = [], []

    class Clock(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            step_times.append(time.perf_counter() - self.start)

        def on_test_begin(self, logs=None):
            self.start = time.perf_counter()

        def on_test_end(self, logs=None):
            validation_times.append(time.perf_counter() - self.start)

    model.fit(data(workload["batch_size"] * STEPS, True), steps_per_epoch=STEPS, epochs=EPOCHS, verbose=0,
              validation_data=data(validation, False), callbacks=[Clock()])
    return {"label": labels[policy], "first_step_s": step_times[0], "step_s": statistics.median(step_times[1:]),
            "first_validation_s": validation_times[0], "validation_s": statistics.median(validation_times[1:])}


def _child(job):
    """Runs one fit in a process of its own (`benchmarks.workers.run_worker`); returns its figures."""
    from benchmarks.workers import run_worker

    fitted = run_worker("benchmarks.first_calls:fit_first_calls", job)
    if "error" in fitted:
        raise SystemExit(f"the fit of {job['policy']} failed: {fitted['error']}")
    return fitted


def run(names, validation, rounds, log, trial_seconds=90.0, fit=None, trial=None):
    """Adds to `log` (`benchmarks.workers.ResultLog`) a record per workload, round and precision: the trial's
    first calls beside the fit's; returns the records."""
    from keras_vit import precision_trial

    fit = fit or _child
    trial = trial or precision_trial.measure_training
    records = []
    for name in names:
        workload = training_workload(name)
        shapes = precision_trial.validation_shapes(validation, workload["batch_size"])
        for round_ in range(rounds):
            results = trial(workload, POLICIES, trial_seconds)
            if any(not result["seconds"] for result in results):
                raise SystemExit(f"the precision trial of {name} timed too little in its {trial_seconds:g} s")
            timed = {c["policy"]: c for c in precision_trial.candidates_of(results, workload["batch_size"])}
            for policy in (POLICIES if round_ % 2 == 0 else POLICIES[::-1]):
                fitted = fit({"workload": workload, "policy": policy, "validation": validation})
                records.append({
                    "workload": name, "round": round_, "policy": policy, "label": fitted["label"],
                    "batch": workload["batch_size"], "validation_images": validation, "validation_shapes": shapes,
                    "trial_first_step_s": timed[policy]["first_step_s"],
                    "trial_first_validation_s": timed[policy]["first_validation_s"],
                    "charged_s": precision_trial.first_calls(timed[policy], shapes),
                    "fit_first_step_extra_s": fitted["first_step_s"] - fitted["step_s"],
                    "fit_first_validation_extra_s": fitted["first_validation_s"] - fitted["validation_s"],
                })
                log.add(records[-1])
    return records


def table(records):
    """Markdown: per workload and precision, medians over rounds, in seconds; the last two columns are what the
    budget's weighing compares (the charge) and what a fit paid."""
    def median(rows, key):
        values = [row[key] for row in rows if row.get(key) is not None]
        return f"{statistics.median(values):.2f}" if values else "-"

    lines = ["| workload | precision | trial: first step | trial: first validation call | fit: first step beyond "
             "a step | fit: first validation pass beyond a pass | charged (first step + shapes x validation call) "
             "| fit: both firsts |", "|---|---|---|---|---|---|---|---|"]
    for name in dict.fromkeys(row["workload"] for row in records):
        for policy in POLICIES:
            rows = [{**row, "fit_s": row["fit_first_step_extra_s"] + row["fit_first_validation_extra_s"]}
                    for row in records if row["workload"] == name and row["policy"] == policy]
            shapes = rows[0]["validation_shapes"]
            lines.append(f"| {name}, batch {rows[0]['batch']}, {rows[0]['validation_images']} validation images "
                         f"({shapes} shape{'s' if shapes != 1 else ''}) | {rows[0]['label']} | "
                         + " | ".join(median(rows, key) for key in (
                             "trial_first_step_s", "trial_first_validation_s", "fit_first_step_extra_s",
                             "fit_first_validation_extra_s", "charged_s", "fit_s")) + " |")
    return "\n".join(lines)


def main(argv=None):
    from benchmarks.workers import ResultLog

    parser = argparse.ArgumentParser(prog="python -m benchmarks first-calls", description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", default="adapt,train_default,train_ti4")
    parser.add_argument("--validation", type=int, default=500, help="validation images of each fit")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=None, help="folder for first-calls-<hardware>-<time>.jsonl and .md")
    args = parser.parse_args(argv)
    for flag, value in (("--validation", args.validation), ("--rounds", args.rounds)):
        if value < 1:
            raise SystemExit(f"{flag} {value}: expected a positive number")
    names = args.workloads.split(",")
    for name in names:
        training_workload(name)  # a bad name stops here, before any fit
    log = ResultLog("first-calls", args.out, argv)
    log.summary(table(run(names, args.validation, args.rounds, log)))
    return 0


if __name__ == "__main__":
    main()
