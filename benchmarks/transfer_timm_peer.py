"""The timm peer of `transfer adapt`: a linear probe with its weight decay chosen by 5-fold
cross-validation, then LP-FT (the probe's head, then every weight), on torch's CPU.

It reads the same timm Hub folder and the same adaptation folders as keras_vit's set-ups, in the
same budget, and reports the probe's and the fine-tuned model's accuracy on the same test images
(issue 50: "timm: LP-FT, AdamW 3e-4, layer decay 0.75, cosine, pad-4 crop + flip, label smoothing
0.1, batch 32"). The probe is scikit-learn's multinomial logistic regression on standardised
features, its weight decay chosen by the folds (`pip install scikit-learn`). Fine-tuning uses timm's
own optimizer factory (`create_optimizer_v2` with `layer_decay`), a 5% linear warm-up and cosine
decay, sized from the speed of its first steps so that it ends with the budget; it also stops at
the budget's wall time, as keras_vit's `TimeBudget` does, should the machine slow down after that
calibration (a calibration on a machine that then got busier once ran 392 s of a 180 s budget).

Run by `python -m benchmarks transfer adapt --setups timm_lpft`; torch, timm and scikit-learn only.
"""

from __future__ import annotations

import json
import math
import os
import time

import numpy as np

from benchmarks.transfer_torch import MEAN, STD, _augment, load_folder

RECIPE = {"learning_rate": 3e-4, "layer_decay": 0.75, "weight_decay": 0.05, "label_smoothing": 0.1,
          "batch_size": 32, "shift": 4, "warmup_fraction": 0.05, "drop_path_rate": 0.1}
PROBE_CS = tuple(10.0 ** (k / 2) for k in range(-6, 9))  # inverse weight decays, 1e-3 .. 1e4
FOLDS = 5


def _normalise(torch, images):
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    return (images.float() / 255.0 - mean) / std


def _features(torch, model, images, batch=250):
    with torch.no_grad():
        return torch.cat([model.forward_head(model.forward_features(_normalise(torch, images[i:i + batch])),
                                             pre_logits=True) for i in range(0, len(images), batch)])


def fit_probe(x, y, seed=0):
    """(weight, bias) on raw features: logistic regression whose L2 is chosen by stratified 5-fold cross-validation.

    scikit-learn's LogisticRegressionCV (L-BFGS, multinomial) on standardised features, as a timm
    user's linear probe usually is; the folds choose C (the inverse of the weight decay).
    """
    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.model_selection import StratifiedKFold

    x = np.asarray(x, np.float64)
    mean, std = x.mean(0), x.std(0) + 1e-6
    folds = min(FOLDS, int(np.bincount(y).min()))  # a smoke test's 2 images per class: 2 folds
    probe = LogisticRegressionCV(Cs=PROBE_CS, cv=StratifiedKFold(folds, shuffle=True, random_state=seed),
                                 max_iter=1000).fit((x - mean) / std, y)
    weight = probe.coef_.T / std[:, None]
    bias = probe.intercept_ - (mean / std) @ probe.coef_.T
    cv_accuracy = float(probe.scores_[1].mean(axis=0).max())  # the same for every class of a multinomial fit
    return weight.astype(np.float32), bias.astype(np.float32), float(1.0 / probe.C_[0]), cv_accuracy


def _accuracy(torch, model, images, labels, batch=250):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(images), batch):
            correct += int((model(_normalise(torch, images[i:i + batch])).argmax(1) == labels[i:i + batch]).sum())
    return correct / len(labels)


def timm_backbone(timm, torch, folder, num_classes, drop_path_rate=0.0):
    """timm's model of a timm folder with a new zero head of `num_classes`; a "conv_stem" in its config.json goes in front.

    The conv stem (`benchmarks.transfer.write_stem_folder`) is `conv_stem_module` inside timm's own
    HybridEmbed, whose 1x1 projection is the ViT's patch embedding of the stem's cells.
    """
    import functools

    import safetensors.torch
    from timm.layers import HybridEmbed

    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    extra = {}
    if "conv_stem" in config:
        stem = conv_stem_module(torch, channels=config["model_args"]["in_chans"], **config["conv_stem"])
        extra["embed_layer"] = functools.partial(HybridEmbed, backbone=stem)
    model = timm.create_model(config["architecture"], **{**config["model_args"], "num_classes": num_classes},
                              drop_path_rate=drop_path_rate, **extra)
    state = safetensors.torch.load_file(os.path.join(folder, "model.safetensors"))
    state = {k: v for k, v in state.items() if not k.startswith("head.")}
    missing = set(model.load_state_dict(state, strict=False).missing_keys)
    missing = {key for key in missing if not key.endswith("num_batches_tracked")}  # BatchNorm's counter
    assert missing == {"head.weight", "head.bias"}, missing
    return model


def conv_stem_module(torch, filters, strides, channels=3, epsilon=1e-3, momentum=0.99):
    """keras_vit's conv stem (`keras_vit.models.stems.conv_stem`) as a torch module: 3x3 Conv2d + BatchNorm2d + ReLU each.

    Keras pads "same" convolutions of stride 2 on an even side at the end only (TensorFlow's rule),
    where torch's padding=1 pads both sides: the padding is computed as Keras does. `momentum` is
    Keras' (the share kept), torch's is its complement.
    """
    nn = torch.nn

    class ConvStem(nn.Module):
        def __init__(self):
            super().__init__()
            widths = (channels, *filters)
            for i, stride in enumerate(strides):
                self.add_module(f"conv{i}", nn.Conv2d(widths[i], widths[i + 1], 3, stride=stride, bias=False))
                self.add_module(f"bn{i}", nn.BatchNorm2d(widths[i + 1], eps=epsilon, momentum=1 - momentum))

        def forward(self, x):
            for i, stride in enumerate(strides):
                x = nn.functional.pad(x, _same_padding(x.shape[-2:], stride))
                x = torch.relu(getattr(self, f"bn{i}")(getattr(self, f"conv{i}")(x)))
            return x

    return ConvStem()


def _same_padding(size, stride, kernel=3):
    """torch.nn.functional.pad's (left, right, top, bottom) for a "same" convolution as TensorFlow pads it."""
    pads = []
    for side in reversed(tuple(size)):
        total = max((-(-side // stride) - 1) * stride + kernel - side, 0)
        pads += [total // 2, total - total // 2]
    return pads


def adapt_timm(work, classes, budget_seconds, seed=0, max_steps=None, threads=None):
    """timm's LP-FT of the timm folder under `work`/backbone on `work`/adapt; its result dict."""
    from benchmarks.workloads import import_timm

    timm = import_timm()
    import timm.optim
    import torch

    start = time.perf_counter()
    torch.manual_seed(seed)
    if threads:
        torch.set_num_threads(threads)
    folder = os.path.join(work, "backbone", "timm")
    if not os.path.isdir(folder):  # a conv stem + ViT (benchmarks.transfer.KERAS_ONLY): its peer's copy
        from benchmarks.transfer import STEM_FOLDER  # a constant: that module imports no Keras at its top

        folder = os.path.join(work, "backbone", STEM_FOLDER)
    model = timm_backbone(timm, torch, folder, len(classes), RECIPE["drop_path_rate"])
    train_x, train_y = load_folder(os.path.join(work, "adapt", "train"), classes)
    test_x, test_y = load_folder(os.path.join(work, "adapt", "test"), classes)
    train_x, train_y = torch.from_numpy(train_x), torch.from_numpy(train_y)
    test_x, test_y = torch.from_numpy(test_x), torch.from_numpy(test_y)

    model.eval()
    weight, bias, decay, cv_accuracy = fit_probe(_features(torch, model, train_x).numpy(), train_y.numpy(), seed)
    with torch.no_grad():
        model.head.weight.copy_(torch.from_numpy(weight.T))
        model.head.bias.copy_(torch.from_numpy(bias))
    probe_seconds = time.perf_counter() - start
    probe_accuracy = _accuracy(torch, model, test_x, test_y)
    test_seconds = time.perf_counter() - start - probe_seconds  # not charged to the budget, as keras_vit's test

    optimizer = timm.optim.create_optimizer_v2(model, "adamw", lr=RECIPE["learning_rate"],
                                               weight_decay=RECIPE["weight_decay"], layer_decay=RECIPE["layer_decay"])
    base = [group["lr"] * group.get("lr_scale", 1.0) for group in optimizer.param_groups]
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=RECIPE["label_smoothing"])
    generator = torch.Generator().manual_seed(seed)
    batch = min(RECIPE["batch_size"], len(train_y))
    steps_done, total, calibrated_at = 0, None, None
    model.train()
    stopped_on_time = False
    while (total is None or steps_done < total) and not stopped_on_time:
        order = torch.randperm(len(train_y), generator=generator)
        for begin in range(0, len(order) - batch + 1, batch):
            if total is not None and steps_done >= total:
                break
            if steps_done and time.perf_counter() - start - test_seconds >= budget_seconds:
                stopped_on_time = True
                break
            planned = total or 10_000
            warmup = max(1, int(RECIPE["warmup_fraction"] * planned))
            scale = (steps_done + 1) / warmup if steps_done < warmup else \
                0.5 * (1 + math.cos(math.pi * min(1.0, (steps_done - warmup) / max(1, planned - warmup))))
            for group, peak in zip(optimizer.param_groups, base):
                group["lr"] = peak * scale
            index = order[begin:begin + batch]
            images = _normalise(torch, _augment(torch, train_x[index], RECIPE["shift"], generator))
            loss = loss_fn(model(images), train_y[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            steps_done += 1
            if steps_done == 3:
                calibrated_at = time.perf_counter()
            if steps_done == 13 and total is None:
                per_step = (time.perf_counter() - calibrated_at) / 10
                left = budget_seconds - (time.perf_counter() - start - test_seconds)
                total = max(steps_done, steps_done + int(left / per_step))
                if max_steps is not None:
                    total = min(total, max_steps)
        if max_steps is not None and total is None and steps_done >= max_steps:
            total = steps_done
    train_seconds = time.perf_counter() - start - test_seconds
    return {
        "setup": "timm_lpft", "engine": f"timm {timm.__version__}, torch {torch.__version__}",
        "threads": torch.get_num_threads(), "probe_accuracy": probe_accuracy, "probe_decay": decay,
        "probe_cv_accuracy": cv_accuracy, "probe_seconds": round(probe_seconds, 1),
        "accuracy": _accuracy(torch, model, test_x, test_y), "num_test": len(test_y), "steps_done": steps_done,
        "epochs_done": round(steps_done * batch / len(train_y), 1), "train_seconds": round(train_seconds, 1),
        "planned_steps": total, "stopped_on_time": stopped_on_time, "recipe": RECIPE,
    }
