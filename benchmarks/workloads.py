"""The workloads every speed benchmark names, their FLOPs, their data, and the models that run them.

One table (`WORKLOADS`) of model sizes, image, batch and whether it trains; one mapping to
keras_vit's builder arguments (`vit_arguments`) and one to timm's (`timm_model`); one
`keras_model(impl, w)` for keras_vit, keras_vit built with `fused_attention` either way, and
keras-hub's ViT.

    >>> round(vit_flops(**architecture(WORKLOADS["infer_b16"])) / 1e9, 2)  # ViT-B/16
    35.13
    >>> vit_arguments(WORKLOADS["train_default"])["input_shape"]
    (28, 28, 1)
"""

from __future__ import annotations

import sys

# patch, hidden (width), layers, heads, mlp, image (side), channels, classes: a class-token ViT.
ARCH = ("patch", "hidden", "layers", "heads", "mlp", "image", "classes", "channels")

WORKLOADS = {
    # ViT-B/16 inference on CPU, batch 8 (compare).
    "infer_b16": dict(patch=16, hidden=768, layers=12, heads=12, mlp=3072, image=224, channels=3, classes=1000,
                      batch=8, train=False),
    # ViT-Ti/4 at 32 px, AdamW (compare, ab-train-step, profile, matmul-bound, torch-threads).
    "train_ti4": dict(patch=4, hidden=192, layers=12, heads=3, mlp=768, image=32, channels=3, classes=10,
                      batch=128, train=True),
    # `keras-vit train`'s default model on its Fashion-MNIST input, batch 256.
    "train_default": dict(patch=7, hidden=128, layers=6, heads=4, mlp=256, image=28, channels=1, classes=10,
                          batch=256, train=True),
    # ViT-B/16 training on one GPU, batch 256 (gpu-compare).
    "train_b16": dict(patch=16, hidden=768, layers=12, heads=12, mlp=3072, image=224, channels=3, classes=1000,
                      batch=256, train=True),
    # backends: the default model with 3 channels, ViT-Ti/4 again, and keras_vit's "tiny" for --quick.
    "default": dict(patch=7, hidden=128, layers=6, heads=4, mlp=256, image=28, channels=3, classes=10, batch=256,
                    train=True),
    "ti4": dict(patch=4, hidden=192, layers=12, heads=3, mlp=768, image=32, channels=3, classes=10, batch=128,
                train=True),
    "tiny": dict(patch=4, hidden=32, layers=2, heads=2, mlp=64, image=32, channels=3, classes=10, batch=8, train=True),
}
TRAINING = tuple(name for name, w in WORKLOADS.items() if w["train"])
# keras_vit_unfused / keras_vit_fused: keras_vit built with fused_attention=False (the explicit
# softmax) or True (keras.ops.dot_product_attention), whatever the builder's default.
KERAS_IMPLS = ("keras_vit", "keras_vit_unfused", "keras_vit_fused", "keras_hub")


def workload(name, overrides=None):
    """WORKLOADS[name] with `overrides` ({field: int}) applied; a clear error for unknown names."""
    if name not in WORKLOADS:
        raise SystemExit(f"workload={name!r}: expected one of {list(WORKLOADS)}")
    w = dict(WORKLOADS[name])
    for key, value in (overrides or {}).items():
        if key not in w:
            raise SystemExit(f"--set {key}={value}: expected one of the workload's fields {list(w)}")
        w[key] = value
    return w


def parse_overrides(text):
    """'patch=4,batch=64' -> {"patch": 4, "batch": 64}."""
    if not text:
        return {}
    try:
        return {k.strip(): int(v) for k, v in (item.split("=") for item in text.split(","))}
    except ValueError:
        raise SystemExit(f"--set {text!r}: expected FIELD=INT[,FIELD=INT...], e.g. patch=4,batch=64") from None


def architecture(w):
    return {k: w[k] for k in ARCH}


def vit_flops(patch, hidden, layers, heads, mlp, image, classes, channels=3):
    """Forward FLOPs of one image through a class-token ViT (2 per multiply-add, matrix products only)."""
    del heads  # attention's FLOPs do not depend on the head count
    grid = (image // patch) ** 2
    tokens = grid + 1
    per_block = (
        2 * tokens * hidden * 3 * hidden  # query, key, value
        + 2 * 2 * tokens * tokens * hidden  # scores and context
        + 2 * tokens * hidden * hidden  # attention output
        + 2 * 2 * tokens * hidden * mlp  # the two MLP layers
    )
    return 2 * grid * patch * patch * channels * hidden + layers * per_block + 2 * hidden * classes


def vit_arguments(w):
    """keras_vit.ViT's arguments for workload `w`, with a logits head (the benchmarks' losses take logits)."""
    return dict(patch_size=w["patch"], hidden_size=w["hidden"], num_layers=w["layers"], num_heads=w["heads"],
                mlp_dim=w["mlp"], input_shape=(w["image"], w["image"], w["channels"]), num_classes=w["classes"],
                classifier_activation=None)


def keras_model(impl, w):
    """(model with a logits head, version) of `impl` in KERAS_IMPLS for workload `w`."""
    import keras

    if impl == "keras_hub":
        import keras_hub

        backbone = keras_hub.models.ViTBackbone(
            image_shape=(w["image"], w["image"], w["channels"]), patch_size=w["patch"], num_layers=w["layers"],
            num_heads=w["heads"], hidden_dim=w["hidden"], mlp_dim=w["mlp"])
        logits = keras.layers.Dense(w["classes"], dtype="float32")(backbone.output[:, 0])
        return keras.Model(backbone.input, logits), keras_hub.__version__
    if impl not in KERAS_IMPLS:
        raise SystemExit(f"impl={impl!r}: expected one of {KERAS_IMPLS}")
    import keras_vit

    # keras_vit as shipped takes the default ("auto"); the other two force the attention path.
    attention = {} if impl == "keras_vit" else {"fused_attention": impl == "keras_vit_fused"}
    return keras_vit.ViT(**vit_arguments(w), **attention), keras_vit.__version__


def compile_for_training(model, jit_compile=True, **kwargs):
    """AdamW 1e-3 and sparse cross-entropy on logits, as every training benchmark compiles."""
    import keras

    model.compile(optimizer=keras.optimizers.AdamW(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=jit_compile, **kwargs)
    return model


def random_batch(w, seed=0, batch=None):
    """(images, labels) of one random float32 batch of workload `w`, channels last."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n = batch or w["batch"]
    x = rng.random((n, w["image"], w["image"], w["channels"]), dtype="float32")
    return x, rng.integers(0, w["classes"], n)


def without_autotuning(dataset):
    """`dataset` without tf.data's autotuning, as keras_vit's own pipelines run.

    Deleting an autotuned iterator waited up to ~10 s after busy steps, and `fit` deletes one per
    epoch: that showed as "fit overhead" or slow epochs (the iterator-teardown benchmark).
    """
    import tensorflow as tf

    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def repeated_batch(w, batch=None):
    """A tf.data pipeline repeating one in-memory batch of workload `w` (random unless given)."""
    import tensorflow as tf

    return without_autotuning(tf.data.Dataset.from_tensors(batch or random_batch(w)).repeat().prefetch(2))


def torchvision_stub():
    # timm imports torchvision's FrozenBatchNorm2d (and data transforms) at import time; a ViT
    # uses neither. Where no torchvision matching torch is installed, empty modules stand in.
    import importlib.abc
    import importlib.machinery
    import types

    def stand_in(name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Anything(name, (), {})

    class Anything(type):
        def __getattr__(cls, name):
            return stand_in(name)

        def __call__(cls, *args, **kwargs):
            return Anything("value", (), {})

    class Loader(importlib.abc.Loader):
        def create_module(self, spec):
            module = types.ModuleType(spec.name)
            module.__path__ = []
            module.__getattr__ = stand_in
            return module

        def exec_module(self, module):
            pass

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "torchvision" or name.startswith("torchvision."):
                return importlib.machinery.ModuleSpec(name, Loader(), is_package=True)
            return None

    sys.meta_path.insert(0, Finder())


def import_timm():
    try:
        import timm
    except (ImportError, RuntimeError):
        for name in [m for m in sys.modules if m.startswith(("timm", "torchvision"))]:
            del sys.modules[name]
        torchvision_stub()
        import timm
    return timm


def timm_model(w, device="cpu"):
    """(timm VisionTransformer of workload `w`, timm version); the same architecture as keras_model's."""
    timm = import_timm()
    from timm.models.vision_transformer import VisionTransformer

    model = VisionTransformer(img_size=w["image"], patch_size=w["patch"], in_chans=w["channels"],
                              num_classes=w["classes"], embed_dim=w["hidden"], depth=w["layers"],
                              num_heads=w["heads"], mlp_ratio=w["mlp"] / w["hidden"])
    return model.to(device), timm.__version__


def available(impl):
    """Whether the library `impl` needs is installed (keras_vit always is)."""
    import importlib.util

    module = {"keras_hub": "keras_hub", "timm": "timm"}.get(impl)
    return module is None or importlib.util.find_spec(module) is not None
