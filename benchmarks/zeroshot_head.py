"""zeroshot-head: does fine-tuning from an image-text checkpoint's zero-shot head beat the zero head and the probe?

No CLIP weights can be downloaded here, so the benchmark makes a checkpoint that knows something:
a tiny CLIP (`TOWERS`; image 32 px, patch 4) trained contrastively by transformers' `CLIPModel`
in PyTorch on CIFAR-10 training images, each paired with its class name in one of `TEMPLATES`,
and saved as a user's folder would be (`save_pretrained`, CLIP's real tokenizer files, the image
processor; the makers of tests/_image_text_fixtures.py). All ten classes: a text tower that never
read a class name could not place it, and the zero-shot head is what is measured. The images are
disjoint: per class, the first 50 of the training split's sorted files are the adaptation
images, the last 500 the scoring images (the CIFAR-10 test split is kept apart on purpose), and
the 4,450 between them pre-train the towers.

Steps (each reuses what the earlier ones wrote under --work):

    python -m benchmarks zeroshot-head prepare --tar ../shared/data/cifar10-train/cifar10-train-jpg.tar.gz --work /tmp/zsh
    python -m benchmarks zeroshot-head pretrain --work /tmp/zsh --budget-minutes 15 --threads 2
    python -m benchmarks zeroshot-head adapt --work /tmp/zsh --budget-minutes 3 --seeds 0,1 --out benchmarks/results

`adapt` scores the checkpoint with no training (`keras-vit zeroshot --weights DIR --dataset
TEST`), then runs `keras-vit train --weights DIR --dataset ADAPT --budget-minutes N` with each of
`ARMS`' flags, one after another, each in a fresh worker process, per seed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import math
import os
import re
import shutil
import time

import numpy as np

from benchmarks import transfer

CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
TRAIN_PER_CLASS = 50
TEST_PER_CLASS = 500
# Captions of the pre-training images: the class name in one of these, drawn per image and step.
TEMPLATES = ("a photo of a {}.", "a blurry photo of a {}.", "a low resolution photo of a {}.",
             "a close-up photo of the {}.", "a photo of the small {}.", "This is a photo of {}.")
# The towers, as tests/_image_text_fixtures.py's SIZES state them: text and vision (width, layers,
# heads, MLP), the projection, the image side and patch ("noise": the maker's redraw, replaced here
# by transformers' own initialisation before training).
TOWERS = {
    "tiny": dict(text=(64, 3, 4, 256), vision=(128, 4, 4, 512), projection=64, image=32, patch=4, noise=0.02),
    "smoke": dict(text=(16, 1, 2, 32), vision=(16, 1, 2, 32), projection=16, image=32, patch=8, noise=0.02),
}
# The contrastive recipe: AdamW, linear warm-up over this share of the budget, then a cosine to 0 at its end.
RECIPE = dict(learning_rate=1e-3, weight_decay=0.1, betas=(0.9, 0.98), eps=1e-6, warmup=0.05, batch_size=128,
              clip_norm=1.0)
# The adaptation arms: `keras-vit train --weights DIR --budget-minutes N` flags on top.
ARMS = {
    "zeroshot_head": ("--head", "zeroshot"),  # fine-tuned from the folded text head (--adapt auto: finetune)
    "zero_head": ("--adapt", "finetune"),  # fine-tuned from a new zero head
    "probe": ("--probe",),  # a linear probe of the frozen tower
    "auto": (),  # the default: a probe, then fine-tuning from it when the budget buys it
    # The zero-shot head under the recipe LP-FT fine-tunes a fitted head with (lower rate, one warm-up epoch).
    "zeroshot_head_lpft": ("--head", "zeroshot", "--recipe", "lpft"),
}


def prepare(work, tar=None, source=None, train_per_class=TRAIN_PER_CLASS, test_per_class=TEST_PER_CLASS):
    """Lays out pretrain/, adapt/train/ and adapt/test/ (disjoint hard links of each class's sorted files)."""
    layout = {"pretrain": {c: slice(train_per_class, -test_per_class) for c in CLASSES},
              "adapt/train": {c: slice(0, train_per_class) for c in CLASSES},
              "adapt/test": {c: slice(-test_per_class, None) for c in CLASSES}}
    return transfer.lay_out(work, layout, tar, source)


def _read_folder(folder, side):
    """(uint8 images (n, side, side, 3), int labels, class names) of a folder of class sub-folders, names sorted."""
    from PIL import Image

    names = sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())
    images, labels = [], []
    for label, name in enumerate(names):
        for file in sorted(os.listdir(os.path.join(folder, name))):
            with Image.open(os.path.join(folder, name, file)) as image:
                image = image.convert("RGB")
                if image.size != (side, side):
                    image = image.resize((side, side), Image.BICUBIC)
                images.append(np.asarray(image))
            labels.append(label)
    return np.stack(images), np.asarray(labels), names


def _augment(batch, rng, pad=4):
    """Random horizontal flips and random crops of the images padded by `pad` (reflected)."""
    side = batch.shape[1]
    padded = np.pad(batch, ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="reflect")
    rows, cols = rng.integers(0, 2 * pad + 1, (2, len(batch)))
    out = np.stack([padded[i, r:r + side, c:c + side] for i, (r, c) in enumerate(zip(rows, cols))])
    flip = rng.random(len(batch)) < 0.5
    out[flip] = out[flip, :, ::-1]
    return out


def _fixtures():
    from benchmarks.image_text import fixtures

    return fixtures()


def pretrain(work, budget_minutes, towers="tiny", seed=0, threads=2, max_steps=None, batch_size=None):
    """Trains a CLIP contrastively on work/pretrain; writes the folder work/clip and work/pretrain.json.

    A folder there already is kept (its pretrain.json returned). `max_steps`: a step limit (smoke runs).
    """
    import torch
    import transformers

    from keras_vit.text.zeroshot import DEFAULT_TEMPLATE

    folder, summary_file = os.path.join(work, "clip"), os.path.join(work, "pretrain.json")
    if os.path.isdir(folder):
        with open(summary_file) as f:
            return json.load(f)
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    fx = _fixtures()
    fx.SIZES[f"zeroshot_{towers}"] = TOWERS[towers]
    partial = folder + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    model = fx.make_clip(partial, f"zeroshot_{towers}")  # the tokenizer and processor files, as a user's folder holds them
    model = transformers.CLIPModel(model.config)  # transformers' own initialisation, not the maker's redraw
    tokenizer = transformers.AutoTokenizer.from_pretrained(partial)
    processor = transformers.CLIPImageProcessor.from_pretrained(partial)
    mean = torch.tensor(processor.image_mean).view(1, 3, 1, 1)
    std = torch.tensor(processor.image_std).view(1, 3, 1, 1)

    def pixels(batch):
        return (torch.from_numpy(np.ascontiguousarray(batch)).permute(0, 3, 1, 2).float() / 255.0 - mean) / std

    side = TOWERS[towers]["image"]
    images, labels, names = _read_folder(os.path.join(work, "pretrain"), side)
    captions = [template.format(name) for name in names for template in TEMPLATES]
    tokens = tokenizer(captions, padding=True, return_tensors="pt")
    batch_size = min(batch_size or RECIPE["batch_size"], len(images))
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": RECIPE["weight_decay"]},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=RECIPE["learning_rate"], betas=RECIPE["betas"], eps=RECIPE["eps"])
    budget = budget_minutes * 60
    model.train()
    start, steps, losses, last_print = time.perf_counter(), 0, [], 0.0
    while True:
        elapsed = time.perf_counter() - start
        if elapsed >= budget or (max_steps is not None and steps >= max_steps):
            break
        done = elapsed / budget
        for group in optimizer.param_groups:
            group["lr"] = RECIPE["learning_rate"] * min(1.0, done / RECIPE["warmup"]) * 0.5 * (1 + math.cos(math.pi * done))
        chosen = rng.choice(len(images), batch_size, replace=False)
        caption = labels[chosen] * len(TEMPLATES) + rng.integers(0, len(TEMPLATES), batch_size)
        out = model(input_ids=tokens["input_ids"][caption], attention_mask=tokens["attention_mask"][caption],
                    pixel_values=pixels(_augment(images[chosen], rng)), return_loss=True)
        optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), RECIPE["clip_norm"])
        optimizer.step()
        with torch.no_grad():
            model.logit_scale.clamp_(0, math.log(100))  # CLIP's cap on the temperature
        steps += 1
        losses.append(out.loss.item())
        if elapsed - last_print >= 30:
            last_print = elapsed
            print(f"step {steps}, {elapsed:.0f} s, loss {np.mean(losses[-20:]):.3f}, "
                  f"scale {model.logit_scale.exp().item():.1f}", flush=True)
    seconds = time.perf_counter() - start
    model.eval()
    model.save_pretrained(partial)
    summary = {"towers": towers, "tower_sizes": TOWERS[towers], "recipe": RECIPE, "templates": TEMPLATES,
               "seed": seed, "threads": threads, "steps": steps, "train_seconds": round(seconds, 1),
               "images_per_second": round(steps * batch_size / seconds, 1), "pretrain_images": len(images),
               "epochs": round(steps * batch_size / len(images), 2), "final_loss": round(float(np.mean(losses[-20:])), 4),
               "logit_scale": round(model.logit_scale.exp().item(), 2),
               "params": sum(p.numel() for p in model.parameters())}
    # transformers' own zero-shot accuracy on the scoring images (keras_vit's is `adapt`'s first line).
    test_images, test_labels, test_names = _read_folder(os.path.join(work, "adapt", "test"), side)
    with torch.no_grad():
        texts = tokenizer([DEFAULT_TEMPLATE.format(name) for name in test_names], padding=True, return_tensors="pt")
        text = model.get_text_features(**texts)
        text = getattr(text, "pooler_output", text)
        text = text / text.norm(dim=-1, keepdim=True)
        predictions = []
        for begin in range(0, len(test_images), 500):
            image = model.get_image_features(pixel_values=pixels(test_images[begin:begin + 500]))
            image = getattr(image, "pooler_output", image)
            predictions.append((image @ text.T).argmax(-1).numpy())
    summary["transformers_zeroshot_accuracy"] = round(float((np.concatenate(predictions) == test_labels).mean()), 4)
    os.replace(partial, folder)
    with open(summary_file, "w") as f:
        json.dump(summary, f, indent=1)
    return summary


def zeroshot_only(work):
    """`keras-vit zeroshot --weights work/clip --dataset work/adapt/test`: the checkpoint's accuracy with no training."""
    from keras_vit import cli

    argv = ["zeroshot", "--weights", os.path.join(work, "clip"), "--dataset", os.path.join(work, "adapt", "test")]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = cli.main(argv)
    found = re.search(r"top-1 accuracy ([\d.]+)% \((\d+)/(\d+) images", printed.getvalue())
    if code != 0 or found is None:
        return {"arm": "zeroshot_only", "error": f"exit {code}: {printed.getvalue().strip()[-300:]}"}
    return {"arm": "zeroshot_only", "command": "keras-vit " + " ".join(argv), "accuracy": int(found[2]) / int(found[3]),
            "num_test": int(found[3])}


def adapt_one(work, arm, budget_seconds, seed=0, epochs=None):
    """One `keras-vit train` run (in a worker process), its flags parsed by the command's own parser; what it did."""
    from keras_vit import cli, train_options
    from keras_vit.training.trainer import train

    argv = ["train", "--weights", os.path.join(work, "clip"), "--dataset", os.path.join(work, "adapt"),
            "--budget-minutes", f"{budget_seconds / 60:g}", "--seed", str(seed), *ARMS[arm]]
    if epochs is not None:
        argv += ["--epochs", str(epochs)]
    config = train_options.config_from_flags(cli.build_parser().parse_args(argv))
    # Nothing written: the run's score is the result.
    result = train(dataclasses.replace(config, run_dir=None, output_dir=None), name=train_options.flag_name)
    settings = result["settings"]
    probe = result.get("probe") or {}
    return {"arm": arm, "seed": seed, "command": "keras-vit " + " ".join(argv), "accuracy": result["test_accuracy"],
            "num_test": result["num_test_examples"], "num_train": result["num_train_examples"],
            "epochs_done": result["epochs_done"], "steps_done": result["steps_done"],
            "train_seconds": result["train_seconds"], "validation_accuracy": result.get("validation_accuracy"),
            "probe_validation_accuracy": probe.get("validation_accuracy"), "adapt_decision": result.get("adapt_decision"),
            "adapt": settings.get("adapt"), "recipe": settings["recipe"], "batch_size": settings["batch_size"],
            "learning_rate": settings["learning_rate"], "precision": settings.get("precision"),
            "jit_compile": settings.get("jit_compile"), "load": os.getloadavg()}


def adapt(work, budget_minutes, arms, seeds, out=None, argv=None, epochs=None, zeroshot=True):
    """The checkpoint with no training (unless `zeroshot` is False), then every arm per seed, each in a worker; the table."""
    from benchmarks.workers import ResultLog, run_worker

    log = ResultLog("zeroshot-head", out, argv)
    with open(os.path.join(work, "pretrain.json")) as f:
        pretrained = json.load(f)
    log.add({"arm": "pretrain", **pretrained})
    only = run_worker("benchmarks.zeroshot_head:zeroshot_only", dict(work=work)) if zeroshot else None
    if only is not None:
        log.add(only)
    results = {}
    for seed in seeds:
        for arm in arms:
            result = run_worker("benchmarks.zeroshot_head:adapt_one", dict(
                work=work, arm=arm, budget_seconds=budget_minutes * 60, seed=seed, epochs=epochs))
            result.update(arm=arm, seed=seed)
            log.add(result)
            results[arm, seed] = result
    log.summary(table(pretrained, only, results, arms, seeds))
    return results


def _cell(result):
    if "error" in result:
        return f"error: {result['error'][:80]}"
    load = f", load {result['load'][0]:.1f}" if result.get("load") else ""
    return f"{100 * result['accuracy']:.2f}% ({result['epochs_done']} ep, {result['steps_done']} steps{load})"


def table(pretrained, only, results, arms, seeds):
    """The markdown table: the checkpoint with no training, then each arm per seed, and their mean."""
    head = "| arm | flags | " + " | ".join(f"seed {seed}" for seed in seeds) + " | mean |"
    rows = [head, "|" + "---|" * (len(seeds) + 3)]
    if only is not None:
        zs = f"{100 * only['accuracy']:.2f}%" if "accuracy" in only else f"error: {only.get('error')}"
        rows.append(f"| zero-shot only, no training | `keras-vit zeroshot` | {zs} (transformers: "
                    f"{100 * pretrained['transformers_zeroshot_accuracy']:.2f}%) |" + " |" * len(seeds))
    for arm in arms:
        scores = [results[arm, seed].get("accuracy") for seed in seeds]
        mean = f"{100 * np.mean(scores):.2f}%" if None not in scores else ""
        rows.append(f"| {arm} | `{' '.join(ARMS[arm]) or '(none)'}` | "
                    + " | ".join(_cell(results[arm, seed]) for seed in seeds) + f" | {mean} |")
    rows.append(f"\nCheckpoint: CLIP towers `{pretrained['towers']}` ({pretrained['params']:,} parameters), "
                f"{pretrained['steps']} steps of {pretrained['recipe']['batch_size']} in {pretrained['train_seconds']} s "
                f"({pretrained['epochs']} epochs of {pretrained['pretrain_images']:,} images), final loss "
                f"{pretrained['final_loss']}, logit scale {pretrained['logit_scale']}.")
    return "\n".join(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks zeroshot-head", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    transfer.add_prepare_step(sub, TRAIN_PER_CLASS, TEST_PER_CLASS)
    p = sub.add_parser("pretrain", help="a tiny CLIP, trained contrastively by transformers in PyTorch")
    p.add_argument("--work", required=True)
    p.add_argument("--towers", choices=tuple(TOWERS), default="tiny")
    p.add_argument("--budget-minutes", type=float, default=10)
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, help=f"default: {RECIPE['batch_size']}")
    p.add_argument("--max-steps", type=int, help="step limit (smoke runs; default: the budget's)")
    p = sub.add_parser("adapt")
    p.add_argument("--work", required=True)
    p.add_argument("--budget-minutes", type=float, default=3)
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join(ARMS)}")
    p.add_argument("--seeds", default="0", help="comma-separated")
    p.add_argument("--epochs", type=int, help="epoch limit (equal work on a loaded machine, or smoke runs; default: "
                   "the budget's)")
    p.add_argument("--no-zeroshot-only", dest="zeroshot", action="store_false",
                   help="leave out the checkpoint's zero-shot score (scored by an earlier run)")
    p.add_argument("--out", help="folder for the .jsonl and .md")
    args = parser.parse_args(argv)
    if args.step == "prepare":
        transfer.run_prepare_step(parser, args, prepare)
    elif args.step == "pretrain":
        print(pretrain(args.work, args.budget_minutes, args.towers, args.seed, args.threads, args.max_steps,
                       args.batch_size))
    else:
        arms = args.arms.split(",")
        unknown = [arm for arm in arms if arm not in ARMS]
        if unknown:
            parser.error(f"unknown --arms {unknown}; expected some of {list(ARMS)}")
        adapt(args.work, args.budget_minutes, arms, [int(s) for s in args.seeds.split(",")], args.out, argv,
              args.epochs, args.zeroshot)


if __name__ == "__main__":
    main()
