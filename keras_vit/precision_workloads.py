"""The model shapes a precision trial times, each a small dict that is also its cache key (`keras_vit.precision_trial`).

A training workload holds the core fields of the run's ViT, its stem, its input, batch, recipe
and XLA setting, and the tokens behind the stem; an inference workload the loaded model's size
and input; a bare token width stands for the default `keras-vit train` model at that width.
Imports no Keras: a trial's parent describes what its child builds.

Example:

>>> workload = training_workload({"patch_size": 4, "hidden_size": 192, "num_layers": 12, "num_heads": 3,
...                               "mlp_dim": 768}, image_size=32, channels=3, batch_size=128)
>>> describe(workload)
'width 192, 12 layers, 64 tokens, batch 128'
"""

from __future__ import annotations

import math

from keras_vit import configs  # a hybrid's ResNet stride
from keras_vit.choices import MODEL_FIELDS  # the core fields of the ViT a training trial builds

# Images per step of an inference trial: `keras-vit predict` runs a few photos at a time.
INFERENCE_BATCH = 8
# A bare token width (`keras_vit.machine.default_precision(machine, backend, width)`) is timed on
# the default `keras-vit train` model (28 px grey images, patch 7, 6 layers) at that width.
WIDTH_MODEL = {"patch_size": 7, "num_layers": 6, "image_size": 28, "channels": 1, "batch_size": 256}


def training_workload(architecture: dict, image_size: int, channels: int, batch_size: int, jit_compile=None,
                      recipe: str | None = None, stem: dict | None = None) -> dict:
    """The model shape a training trial times (and its cache key): the core fields, the input, the batch and the recipe.

    Args:
        architecture: dict. `patch_size`, `hidden_size`, `num_layers`, `num_heads`, `mlp_dim`.
        image_size: int. Input height and width.
        channels: int. Input channels.
        batch_size: int. The global batch.
        jit_compile: bool or None. The run's; None: each candidate's default (`keras_vit.backends`).
            Defaults to None.
        recipe: str or None. The run's recipe (a `keras_vit.training.recipes.RECIPES` name), whose
            optimizer the trial compiles; None: `keras-vit train`'s default. Defaults to None.
        stem: dict or None. The model's stem: the `filters` and `strides` of a conv stem
            (`keras_vit.models.stems.conv_stem`), or a hybrid's BiT ResNet as {"resnet": units per
            stage, "width": root width} (`keras_vit.models.resnet.BiTResNet`); None for a model
            without one. The encoder then reads the stem's cells as its patches: a 32 px image is
            16 tokens behind the default conv stem, not the 1,024 of 1 px patches. Defaults to None.

    >>> training_workload({"patch_size": 4, "hidden_size": 192, "num_layers": 12, "num_heads": 3,
    ...                    "mlp_dim": 768}, 32, 3, 128)["tokens"]
    64
    >>> stem = {"filters": (32, 64, 128, 128), "strides": (2, 2, 2, 1)}  # 8 px a cell
    >>> training_workload({"patch_size": 1, "hidden_size": 128, "num_layers": 4, "num_heads": 4,
    ...                    "mlp_dim": 256}, 32, 3, 32, stem=stem)["tokens"]
    16
    >>> r50 = {"resnet": (3, 4, 9), "width": 64}  # R50+ViT-B/16: 16 px a cell
    >>> training_workload({"patch_size": 1, "hidden_size": 768, "num_layers": 12, "num_heads": 12,
    ...                    "mlp_dim": 3072}, 224, 3, 8, stem=r50)["tokens"]
    196
    """
    workload = {"mode": "train", **{field: _int(architecture.get(field)) for field in MODEL_FIELDS},
                "image_size": int(image_size), "channels": int(channels), "batch_size": int(batch_size),
                "jit_compile": jit_compile, "recipe": recipe}
    side = workload["image_size"]
    # Only a model with a stem has the key, so the cache keys of the others stay as they were.
    if stem is not None and "resnet" in stem:
        workload["stem"] = resnet_stem(stem["resnet"], stem["width"])
        side = -(-side // configs.stem_stride(workload["stem"]["resnet"]))
    elif stem is not None:
        workload["stem"] = {"filters": [int(f) for f in stem["filters"]], "strides": [int(s) for s in stem["strides"]]}
        # The stem's stride (`stems.stem_stride`, which this module sits below); "same" padding rounds up.
        side = -(-side // math.prod(workload["stem"]["strides"]))
    # None where the architecture has no patch size: its trial fails and the table answers.
    workload["tokens"] = (side // workload["patch_size"]) ** 2 if workload["patch_size"] else None
    return workload


def resnet_stem(units, width) -> dict:
    """`training_workload`'s `stem` for a hybrid's BiT ResNet of `units` per stage and root `width`.

    >>> resnet_stem((3, 4, 9), 64)
    {'resnet': [3, 4, 9], 'width': 64}
    """
    return {"resnet": [int(count) for count in units], "width": int(width)}


def _int(value):
    return None if value is None else int(value)


def inference_workload(name: str, params: int, input_shape, width: int | None, num_layers: int) -> dict:
    """The model shape an inference trial times (and its cache key), at `INFERENCE_BATCH` images a step.

    Args:
        name: str. The model's class name.
        params: int. Its parameter count.
        input_shape: sequence of int. One image's shape.
        width: int or None. Its token width.
        num_layers: int. Its encoder blocks.

    >>> describe(inference_workload("VisionTransformer", 86_000_000, (224, 224, 3), 768, 12))
    'width 768, 12 layers, batch 8'
    """
    return {"mode": "predict", "model": name, "params": int(params), "input_shape": [int(n) for n in input_shape],
            "hidden_size": width, "num_layers": int(num_layers), "batch_size": INFERENCE_BATCH}


def width_workload(width: int | None) -> dict:
    """The training workload a bare token width stands for: `WIDTH_MODEL` at `width` (None: 128).

    Heads of 32 channels, as the default model's (4 of width 128), and an MLP twice the width.

    >>> w = width_workload(768)
    >>> w["hidden_size"], w["num_heads"], w["mlp_dim"], w["tokens"], w["batch_size"]
    (768, 24, 1536, 16, 256)
    """
    width = 128 if width is None else int(width)
    heads = max([h for h in range(1, width + 1) if width % h == 0 and width // h >= 32] or [1])
    model = dict(WIDTH_MODEL)
    return training_workload({"patch_size": model.pop("patch_size"), "num_layers": model.pop("num_layers"),
                              "hidden_size": width, "num_heads": heads, "mlp_dim": 2 * width}, **model)


def describe(workload: dict) -> str:
    """The workload in a few words, for the header.

    >>> describe(width_workload(128))
    'width 128, 6 layers, 16 tokens, batch 256'
    """
    what = [f"width {workload['hidden_size']}", f"{workload['num_layers']} layers"]
    stem = workload.get("stem")
    if stem is not None:
        what.append(f"the ResNet stem {tuple(stem['resnet'])}" if "resnet" in stem else "the conv stem")
    if workload.get("tokens"):
        what.append(f"{workload['tokens']} tokens")
    return ", ".join(what + [f"batch {workload['batch_size']}"])
