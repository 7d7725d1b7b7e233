"""The child process of a training precision trial: `python -m keras_vit.training.precision_child JOB`.

`keras_vit.precision_trial.measure_training` starts it with a JSON job (the workload, the
policies, the cap in seconds) and reads what it prints: a line per candidate's label, then a line
per warm-up, per first validation call (its compilation, which a budgeted run pays too) and per
timed step. It lives with the training code because it compiles each
candidate as a run compiles its model: with the run's recipe's optimizer (`recipes.make_optimizer`:
keras_vit's fused AdamW with its layer rates, or SGD), whose graph is part of each step's time and
of its first step's tracing.

Example (one tiny model, XLA off, on random data):

>>> from keras_vit import precision_workloads
>>> tiny = precision_workloads.training_workload({"patch_size": 4, "hidden_size": 8, "num_layers": 1, "num_heads": 2,
...                                               "mlp_dim": 16}, 8, 1, 2, jit_compile=False, recipe="lpft")
>>> steps, labels, validations = training_steps(tiny, ["float32"])
>>> labels, type(steps["float32"].__defaults__[0].optimizer).__name__, sorted(validations)
({'float32': 'float32'}, 'LayerDecayAdamW', ['float32'])
"""

from __future__ import annotations

import json
import sys
import time

import keras
import numpy as np

from keras_vit.choices import MODEL_FIELDS
from keras_vit.precision_trial import time_alternating
from keras_vit.training import recipes
from keras_vit.training.plan import DEFAULT_RECIPE  # what a workload without a recipe stands for

# The schedule's length does not change a step's cost; a few epochs of a few steps.
SCHEDULE_STEPS = 10


def training_steps(workload: dict, policies) -> tuple[dict, dict, dict]:
    """({policy: one train step}, {policy: label}, {policy: one validation call}): `workload`'s ViT (its stem too)
    under each policy, on random data.

    Each model is built under its policy (the global policy is restored), compiled with the
    workload's recipe's optimizer (`keras-vit train`'s default recipe's without one) and with XLA (or torch.compile)
    as the run would: `workload["jit_compile"]`, else the backend's default for that policy on CPU.
    The validation call evaluates one batch, as a run's validation pass does (`fit(validation_data=...)`).
    """
    import keras_vit
    from keras_vit import backends

    backend = backends.current()
    recipe = recipes.get_recipe(workload.get("recipe") or DEFAULT_RECIPE)
    shape = (workload["image_size"], workload["image_size"], workload["channels"])
    rng = np.random.default_rng(0)
    images = rng.random((workload["batch_size"], *shape), dtype="float32")
    labels_ = rng.integers(0, 10, workload["batch_size"])
    steps, labels, validations = {}, {}, {}
    previous = keras.config.dtype_policy()
    for policy in policies:
        jit = workload.get("jit_compile")
        jit = backend.default_jit_compile("cpu", policy, False) if jit is None else bool(jit)
        keras.config.set_dtype_policy(policy)
        try:
            model = keras_vit.ViT(
                **{field: workload[field] for field in MODEL_FIELDS}, backbone=_stem(workload),
                input_shape=shape, num_classes=10, classifier_activation=None)
        finally:
            keras.config.set_dtype_policy(previous)
        schedule = recipes.make_schedule(recipe, workload["batch_size"], SCHEDULE_STEPS, SCHEDULE_STEPS)
        model.compile(optimizer=recipes.make_optimizer(recipe, model, schedule),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=jit)
        steps[policy] = lambda model=model: model.train_on_batch(images, labels_)
        validations[policy] = lambda model=model: model.test_on_batch(images, labels_)
        labels[policy] = f"{policy} + {backend.COMPILER}" if jit else policy
    return steps, labels, validations


def _stem(workload: dict):
    """The workload's stem (a hybrid's BiT ResNet, the conv stem), built under the current policy; None without one."""
    stem = workload.get("stem")
    if stem is None:
        return None
    from keras_vit.models import resnet, stems

    if "resnet" in stem:
        return resnet.BiTResNet(stem["resnet"], stem["width"], channels=workload["channels"])
    return stems.conv_stem(channels=workload["channels"], **stem)


def main(argv=None) -> int:
    """Times the job given as JSON: a JSON line per label, per warm-up, per first validation call and per timed step."""
    job = json.loads((sys.argv[1:] if argv is None else argv)[0])
    start = time.perf_counter()
    steps, labels, validations = training_steps(job["workload"], job["policies"])
    for policy in job["policies"]:
        print(json.dumps({"policy": policy, "label": labels[policy]}), flush=True)

    def report(policy, seconds, kind):
        marks = {"warmup": {"warmup": True}, "once": {"validation": True}}.get(kind, {})
        print(json.dumps({"policy": policy, "seconds": seconds, **marks}), flush=True)

    # The cap counts from the start of work (importing Keras and TensorFlow is the child's start-up,
    # outside it): building the models is part of it.
    time_alternating(steps, job["seconds"] - (time.perf_counter() - start), once=validations, report=report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
