"""transfer pretrain-timm: pre-trains the transfer benchmark's backbone with timm and PyTorch (a GPU when there is one).

`python -m benchmarks transfer pretrain` trains the backbone with keras_vit on this machine's CPU;
this step trains the same kind of backbone with another program, timm, on whatever device torch
finds, and publishes it with timm's own `save_for_hf`: the timm Hub folder the adaptation then
loads is a checkpoint keras_vit did not write. It needs torch and timm only (no TensorFlow, no
keras_vit), so it runs on a lent GPU machine:

    python -m benchmarks transfer prepare --tar ../shared/data/cifar10-train/cifar10-train-jpg.tar.gz --work /tmp/xfer3
    python -m benchmarks transfer pretrain-timm --work /tmp/xfer3 --budget-minutes 6
    python -m benchmarks transfer folders --work /tmp/xfer3   # the Hugging Face folder, by keras_vit

The recipe is DeiT's for small data, on the GPU: AdamW, linear warm-up then cosine decay, label
smoothing, mixup and cutmix, stochastic depth, random 4 px shifts and flips; bfloat16 autocast
on CUDA. The number of steps is set from the speed of the first steps so that the schedule ends
with the budget.
"""

from __future__ import annotations

import json
import math
import os
import time

import numpy as np

# The timm name the backbone is built from; model_args (`timm_model_args`) make it one of
# `benchmarks.transfer.BACKBONES` at 32 px ("ti4" is this name's own ViT-Ti on 4 px patches).
TIMM_ARCHITECTURE = "vit_tiny_patch16_224"
MEAN = STD = (0.5, 0.5, 0.5)
RECIPE = {"batch_size": 512, "learning_rate": 1e-3, "weight_decay": 0.05, "warmup_fraction": 0.05,
          "label_smoothing": 0.1, "mixup_alpha": 0.8, "cutmix_alpha": 1.0, "drop_path_rate": 0.1, "shift": 4}


def timm_model_args(fields, image_size=32):
    """timm VisionTransformer arguments for a `benchmarks.transfer.BACKBONES` entry."""
    return {"img_size": image_size, "patch_size": fields["patch_size"], "embed_dim": fields["hidden_size"],
            "depth": fields["num_layers"], "num_heads": fields["num_heads"],
            "mlp_ratio": fields["mlp_dim"] / fields["hidden_size"], **fields.get("timm", {})}


def load_folder(folder, classes):
    """A class folder of 32 px images as uint8 NCHW and int64 labels, classes in the given order."""
    from PIL import Image

    images, labels = [], []
    for label, name in enumerate(classes):
        for file in sorted(os.listdir(os.path.join(folder, name))):
            with Image.open(os.path.join(folder, name, file)) as image:
                images.append(np.asarray(image.convert("RGB"), dtype=np.uint8))
            labels.append(label)
    return np.stack(images).transpose(0, 3, 1, 2), np.asarray(labels, np.int64)


def _augment(torch, batch, shift, generator):
    """Random shifts (reflect-padded crops) and horizontal flips of a uint8 NCHW batch, on its device."""
    n, _, h, w = batch.shape
    padded = torch.nn.functional.pad(batch.float(), (shift,) * 4, mode="reflect")
    dy = torch.randint(0, 2 * shift + 1, (n,), device=batch.device, generator=generator)
    dx = torch.randint(0, 2 * shift + 1, (n,), device=batch.device, generator=generator)
    rows = (dy[:, None] + torch.arange(h, device=batch.device))[:, :, None]
    cols = (dx[:, None] + torch.arange(w, device=batch.device))[:, None, :]
    crops = padded[torch.arange(n, device=batch.device)[:, None, None], :, rows, cols].permute(0, 3, 1, 2)
    flip = torch.rand(n, device=batch.device, generator=generator) < 0.5
    return torch.where(flip[:, None, None, None], crops.flip(3), crops)


def _normalise(torch, images):
    mean = torch.tensor(MEAN, device=images.device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=images.device).view(1, 3, 1, 1)
    return (images / 255.0 - mean) / std


def pretrain_timm(work, classes, budget_seconds, backbone, fields, seed=0, holdout=0.04, compile_model=None,
                  max_steps=None, batch_size=None):
    """Trains timm's ViT (`backbone`, its `fields`) on `work`/pretrain for `budget_seconds`; writes `work`/backbone/timm with save_for_hf.

    Returns the summary also written to `work`/backbone/pretrain.json.
    """
    from benchmarks.workloads import import_timm

    timm = import_timm()  # beside a placeholder torchvision where the CPU build of torch has none
    import torch
    from timm.data import Mixup
    from timm.loss import SoftTargetCrossEntropy
    from timm.models import save_for_hf

    torch.manual_seed(seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    images, labels = load_folder(os.path.join(work, "pretrain"), classes)
    order = np.random.default_rng(seed).permutation(len(labels))
    held = order[: int(round(holdout * len(labels)))]
    kept = order[len(held):]
    train_x = torch.from_numpy(images[kept]).to(device)
    train_y = torch.from_numpy(labels[kept]).to(device)
    held_x = torch.from_numpy(images[held]).to(device)
    held_y = torch.from_numpy(labels[held]).to(device)

    model_args = timm_model_args(fields)
    model = timm.create_model(TIMM_ARCHITECTURE, pretrained=False, num_classes=len(classes),
                              drop_path_rate=RECIPE["drop_path_rate"], **model_args).to(device)
    if compile_model is None:
        compile_model = device.type == "cuda"
    step_model = torch.compile(model) if compile_model else model
    decay, no_decay = [], []
    for name, parameter in model.named_parameters():  # DeiT's: no decay on biases, norms, positions, tokens
        decays = parameter.ndim > 1 and "pos_embed" not in name and "token" not in name
        (decay if decays else no_decay).append(parameter)
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": RECIPE["weight_decay"]},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=RECIPE["learning_rate"],
                                  fused=device.type == "cuda")
    mixup = Mixup(mixup_alpha=RECIPE["mixup_alpha"], cutmix_alpha=RECIPE["cutmix_alpha"],
                  label_smoothing=RECIPE["label_smoothing"], num_classes=len(classes))
    loss_fn = SoftTargetCrossEntropy()
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    batch_size = min(batch_size or RECIPE["batch_size"], len(kept) // 2 * 2)

    def step(batch_x, batch_y, lr):
        for group in optimizer.param_groups:
            group["lr"] = lr
        x = _normalise(torch, _augment(torch, batch_x, RECIPE["shift"], generator))
        x, y = mixup(x, batch_y)
        with autocast:
            loss = loss_fn(step_model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss

    def held_out_accuracy():
        model.eval()
        correct = 0
        with torch.no_grad(), autocast:
            for start in range(0, len(held_y), 1000):
                logits = model(_normalise(torch, held_x[start:start + 1000].float()))
                correct += int((logits.argmax(-1) == held_y[start:start + 1000]).sum())
        model.train()
        return correct / max(1, len(held_y))

    # Steps until the schedule is known run at a warm-up learning rate that the schedule continues.
    calibration, first_warmup = (60, 500) if max_steps is None else (2, 10)
    start = time.perf_counter()
    steps_done, epoch, total_steps, losses = 0, 0, None, []
    calibrated_at = None
    while total_steps is None or steps_done < total_steps:
        permutation = torch.randperm(len(train_y), device=device, generator=generator)
        for begin in range(0, len(permutation) - batch_size + 1, batch_size):
            if total_steps is not None and steps_done >= total_steps:
                break
            warmup = first_warmup if total_steps is None else max(1, int(RECIPE["warmup_fraction"] * total_steps))
            if steps_done < warmup or total_steps is None:
                lr = RECIPE["learning_rate"] * min(1.0, (steps_done + 1) / warmup)
            else:
                progress = (steps_done - warmup) / max(1, total_steps - warmup)
                lr = RECIPE["learning_rate"] * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
            index = permutation[begin:begin + batch_size]
            try:
                loss = step(train_x[index], train_y[index], lr)
            except Exception as error:  # a compiler that fails here: the run goes on eagerly
                if step_model is model or steps_done:
                    raise
                print(f"torch.compile failed ({type(error).__name__}: {error}); eager from here", flush=True)
                step_model = model
                loss = step(train_x[index], train_y[index], lr)
            steps_done += 1
            if steps_done == 10:  # compiled and warm
                if device.type == "cuda":
                    torch.cuda.synchronize()
                calibrated_at = time.perf_counter()
            if steps_done == 10 + calibration and total_steps is None:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                per_step = (time.perf_counter() - calibrated_at) / calibration
                left = budget_seconds - (time.perf_counter() - start)
                total_steps = steps_done + max(0, int(left / per_step))
                if max_steps is not None:
                    total_steps = min(total_steps, max_steps)
                total_steps = max(total_steps, steps_done)
                print(f"{per_step * 1000:.1f} ms a step of {batch_size}: {total_steps} steps in the budget", flush=True)
            if steps_done % 500 == 0:
                losses.append(float(loss.detach()))
        epoch += 1
        if epoch % 25 == 0:
            print(f"epoch {epoch} step {steps_done} loss {float(loss.detach()):.3f} held-out {held_out_accuracy():.4f} "
                  f"{time.perf_counter() - start:.0f} s", flush=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    train_seconds = time.perf_counter() - start
    accuracy = held_out_accuracy()

    folder = os.path.join(work, "backbone", "timm")
    os.makedirs(os.path.dirname(folder), exist_ok=True)
    model = model.float().cpu().eval()
    # What the checkpoint says of its own preprocessing: timm reads these for its data pipeline.
    model.pretrained_cfg = {**model.pretrained_cfg, "mean": MEAN, "std": STD, "input_size": (3, 32, 32),
                            "num_classes": len(classes), "crop_pct": 1.0, "interpolation": "bicubic",
                            "label_names": list(classes), "hf_hub_id": None, "url": None, "tag": "cifar5"}
    try:
        save_for_hf(model, folder, model_args=model_args, safe_serialization=True)
    except Exception:  # keep the trained weights even if this timm's writer differs
        import safetensors.torch

        safetensors.torch.save_file(model.state_dict(), os.path.join(work, "backbone", "state_dict.safetensors"))
        raise
    summary = {
        "engine": f"timm {timm.__version__}, torch {torch.__version__}",
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "backbone": backbone, "architecture": TIMM_ARCHITECTURE, "model_args": model_args, "recipe": RECIPE,
        "params": sum(p.numel() for p in model.parameters()), "validation_accuracy": accuracy,
        "num_validation": int(len(held)), "epochs_done": epoch, "steps_done": steps_done,
        "train_seconds": round(train_seconds, 1), "images_per_second": round(steps_done * batch_size / train_seconds, 1),
        "losses_every_500_steps": [round(v, 4) for v in losses],
    }
    with open(os.path.join(work, "backbone", "pretrain.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return summary
