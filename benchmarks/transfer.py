"""transfer: does a pre-trained backbone adapted to 50 images per class beat training from scratch?

No pre-trained weights can be downloaded here, so the benchmark makes its own: a small plain ViT
pre-trained on half of the CIFAR-10 classes (airplane, automobile, bird, cat, deer), written as a
timm Hub folder and as a Hugging Face folder, then adapted to the other half (dog, frog, horse,
ship, truck) with 50 training images per class; 1,000 other images per class of the training
split are the test folder (the CIFAR-10 test split is kept apart on purpose).

Steps (each reuses what the earlier ones wrote under --work):

    python -m benchmarks transfer prepare --tar ../shared/data/cifar10-train/cifar10-train-jpg.tar.gz --work /tmp/xfer
    python -m benchmarks transfer pretrain --work /tmp/xfer --budget-minutes 20
    python -m benchmarks transfer adapt --work /tmp/xfer --budget-minutes 3 --out benchmarks/results

or, for the backbone, timm on a GPU (`benchmarks/transfer_torch.py`; torch and timm only), then the
Hugging Face folder written from it by keras_vit:

    python -m benchmarks transfer pretrain-timm --work /tmp/xfer --budget-minutes 6
    python -m benchmarks transfer folders --work /tmp/xfer

`adapt` runs, one after another in fresh worker processes and with the same budget: fine-tuning
from the timm Hub folder, a linear probe of it, fine-tuning from the Hugging Face folder, and the
same ViT from scratch; then the linear few-shot and k-NN accuracies of the backbone.
"""

from __future__ import annotations

import argparse
import json
import os
import tarfile

PRETRAIN_CLASSES = ("airplane", "automobile", "bird", "cat", "deer")
ADAPT_CLASSES = ("dog", "frog", "horse", "ship", "truck")
TRAIN_PER_CLASS = 50
TEST_PER_CLASS = 1000
# The pre-trained backbones, by name: plain ViTs with a class token (so that timm's and Hugging
# Face's ViT classes both hold them) on 4 px patches of 32 px images (an 8x8 grid). "ti4" is ViT-Ti;
# "small" is the keras.io example's width and depth (the CPU pre-training of 2026-11-26 morning);
# "smoke" is for the harness's tests.
BACKBONES = {
    "ti4": {"patch_size": 4, "hidden_size": 192, "num_layers": 12, "num_heads": 3, "mlp_dim": 768},
    "small": {"patch_size": 4, "hidden_size": 128, "num_layers": 6, "num_heads": 4, "mlp_dim": 256},
    # Issue 50's backbones that differ: a weak one (width 128, 4 blocks, a short pre-training), a
    # GAP-pooled one and one with registers (TIMM_EXTRAS says how timm builds them).
    "weak": {"patch_size": 4, "hidden_size": 128, "num_layers": 4, "num_heads": 4, "mlp_dim": 512},
    "gap6": {"patch_size": 4, "hidden_size": 192, "num_layers": 6, "num_heads": 3, "mlp_dim": 768},
    "reg6": {"patch_size": 4, "hidden_size": 192, "num_layers": 6, "num_heads": 3, "mlp_dim": 768},
    # The same two at weak's widths: what a 2-core CPU pre-trains in about 20 minutes each.
    "gap4": {"patch_size": 4, "hidden_size": 128, "num_layers": 4, "num_heads": 4, "mlp_dim": 512},
    "reg4": {"patch_size": 4, "hidden_size": 128, "num_layers": 4, "num_heads": 4, "mlp_dim": 512},
    "smoke": {"patch_size": 4, "hidden_size": 16, "num_layers": 1, "num_heads": 2, "mlp_dim": 32},
    # The model `keras-vit train` builds from scratch for the budget (the conv stem + ViT on these
    # 32 px images): what `keras-vit pretrain --method dino` pre-trains without labels, here with them.
    "budget": {},
}
# Backbones that only a .keras file holds (no timm or Hugging Face layout has the conv stem).
KERAS_ONLY = ("budget",)
# The timm peer's copy of a KERAS_ONLY backbone: timm's VisionTransformer behind a HybridEmbed of the
# conv stem in torch (`transfer_timm_peer.conv_stem_module`), the same weights (`write_stem_folder`).
STEM_FOLDER = "timm_stem"
# timm VisionTransformer arguments beyond the widths: GAP (timm then adds fc_norm) and four
# register tokens without position rows (as DINOv2 with registers stores them).
TIMM_EXTRAS = {
    "gap6": {"class_token": False, "global_pool": "avg"},
    "reg6": {"reg_tokens": 4, "no_embed_class": True},
}
TIMM_EXTRAS.update(gap4=TIMM_EXTRAS["gap6"], reg4=TIMM_EXTRAS["reg6"])
DEFAULT_BACKBONE = "ti4"
SCALING = "symmetric"


def prepare(work, tar=None, source=None, train_per_class=TRAIN_PER_CLASS, test_per_class=TEST_PER_CLASS):
    """Lays out the pre-training and adaptation folders (hard links) from the CIFAR-10 tar or a folder of its classes."""
    layout = {"pretrain": {c: slice(None) for c in PRETRAIN_CLASSES}}
    layout["adapt/train"] = {c: slice(0, train_per_class) for c in ADAPT_CLASSES}
    layout["adapt/test"] = {c: slice(-test_per_class, None) for c in ADAPT_CLASSES}
    return lay_out(work, layout, tar, source)


def lay_out(work, layout, tar=None, source=None):
    """Hard-links parts of CIFAR-10's class folders (the tar, unpacked under `work`, or `source`) into folders of `work`.

    `layout`: {folder: {class: slice of its sorted file names}}; a folder that exists is kept as it
    is. Returns each folder's image count.
    """
    if source is None:
        source = os.path.join(work, "cifar10", "train")
        if not os.path.isdir(source):
            os.makedirs(os.path.join(work, "cifar10"), exist_ok=True)
            with tarfile.open(tar) as archive:
                archive.extractall(os.path.join(work, "cifar10"), filter="data")
    for folder, classes in layout.items():
        target = os.path.join(work, folder)
        if os.path.isdir(target):
            continue
        for name, part in classes.items():
            os.makedirs(os.path.join(target, name))
            for file in sorted(os.listdir(os.path.join(source, name)))[part]:
                os.link(os.path.join(source, name, file), os.path.join(target, name, file))
    return {folder: sum(len(os.listdir(os.path.join(work, folder, c))) for c in classes) for folder, classes in layout.items()}


def pretrained_backbone(work):
    """The name in BACKBONES of the backbone pre-trained under `work` (pretrain.json's "backbone")."""
    with open(os.path.join(work, "backbone", "pretrain.json")) as f:
        return json.load(f).get("backbone", "small")  # the runs before the name was recorded


def pretrain(work, budget_minutes, seed=0, epochs=None, backbone=DEFAULT_BACKBONE, folder="backbone"):
    """Pre-trains the backbone on the pre-training folder; writes it as .keras, and timm Hub and HF folders unless KERAS_ONLY.

    `folder`: where under `work` (the adaptation set-ups read "backbone"; benchmarks/pretrain.py's
    supervised rows write beside it).
    """
    import keras

    from keras_vit.training import TrainConfig, train

    output = os.path.join(work, folder)
    saved = os.path.join(output, "backbone.keras")
    if os.path.isfile(saved):  # pre-trained already: write its folders again
        with open(os.path.join(output, "pretrain.json")) as f:
            summary = json.load(f)
        _write_folders(keras.saving.load_model(saved, compile=False), output, summary.get("backbone"))
        return summary
    model = ({} if backbone in KERAS_ONLY else  # the budget rules choose
             dict(model_overrides=dict(BACKBONES[backbone]), stem="none", tokenizer="patches", pooling="token",
                  attention_init="mimetic"))
    result = train(TrainConfig(
        dataset=os.path.join(work, "pretrain"), validation_split=0.04, image_size=32, **model,
        scaling=SCALING, budget_seconds=budget_minutes * 60, seed=seed, epochs=epochs,
        run_dir=os.path.join(work, "pretrain-run" if folder == "backbone" else folder + "-run"),
        output_dir=output, name="backbone", export=False, verbose=2,
    ))
    summary = {"backbone": backbone, **{k: result[k] for k in ("validation_accuracy", "epochs_done", "train_seconds",
                                                                "images_per_second")}}
    with open(os.path.join(output, "pretrain.json"), "w") as f:
        json.dump(summary, f, indent=1)
    _write_folders(result["model"], output, backbone)
    return summary


def _write_folders(model, output, backbone):
    """The backbone as a timm Hub folder and a Hugging Face folder, as other programs would publish it.

    A KERAS_ONLY backbone, which neither layout holds, gets the timm peer's copy (`write_stem_folder`) instead.
    """
    from keras_vit import weights

    if backbone in KERAS_ONLY:
        write_stem_folder(model, os.path.join(output, STEM_FOLDER))
        return

    weights.save_timm(model, os.path.join(output, "timm"), overwrite=True)
    weights.save_hf(model, os.path.join(output, "hf"), overwrite=True)


def write_stem_folder(model, folder):
    """A conv stem + ViT as the timm peer builds it: a timm folder of its encoder, the stem's tensors and arguments added.

    The encoder (patch embedding of the stem's cells, tokens, blocks, norm, head) goes through
    keras_vit's own timm writer on a plain copy of it; the stem's convolutions and BatchNorms are
    written as `patch_embed.backbone.conv{i}` and `.bn{i}` in torch's layout, and config.json's
    "conv_stem" holds what `transfer_timm_peer.conv_stem_module` builds them from.
    """
    import keras
    import numpy as np

    import keras_vit
    from keras_vit import weights
    from keras_vit._atomic import write_json
    from keras_vit.choices import MODEL_FIELDS
    from keras_vit.models import stems
    from keras_vit.weights.files import read_safetensors, write_safetensors

    config = model.vit_config
    if config["preprocessing"] != SCALING:
        raise ValueError(f"Expected a backbone scaled {SCALING!r} (the peer's mean and std), not {config['preprocessing']!r}")
    stem = model.get_layer("conv_stem")
    side = config["image_size"][0]
    grid = stem.compute_output_shape((None, side, side, config["channels"]))[1:]
    plain = keras_vit.ViT(**{field: config[field] for field in MODEL_FIELDS}, input_shape=grid, preprocessing=None,
                          pooling=config["pooling"], include_top=config["include_top"], num_classes=config["num_classes"])
    for layer in plain.layers:
        if layer.weights:
            layer.set_weights(model.get_layer(layer.name).get_weights())
    weights.save_timm(plain, folder, overwrite=True, pretrained_cfg={"mean": [0.5] * 3, "std": [0.5] * 3})
    tensors = read_safetensors(os.path.join(folder, "model.safetensors"))
    batch_norms = [layer for layer in stem.layers if isinstance(layer, keras.layers.BatchNormalization)]
    convolutions = [layer for layer in stem.layers if isinstance(layer, keras.layers.Conv2D)]
    for i, (conv, norm) in enumerate(zip(convolutions, batch_norms)):
        tensors[f"patch_embed.backbone.conv{i}.weight"] = conv.kernel.numpy().transpose(3, 2, 0, 1)
        for key, weight in (("weight", norm.gamma), ("bias", norm.beta), ("running_mean", norm.moving_mean),
                            ("running_var", norm.moving_variance)):
            tensors[f"patch_embed.backbone.bn{i}.{key}"] = np.asarray(weight.numpy(), "float32")
    write_safetensors(os.path.join(folder, "model.safetensors"), tensors, {"format": "pt"})
    with open(os.path.join(folder, "config.json")) as f:
        timm_config = json.load(f)
    # The encoder's copy reads the stem's map; timm's model reads the images.
    timm_config["model_args"].update(img_size=side, in_chans=config["channels"])
    timm_config["pretrained_cfg"]["input_size"] = [config["channels"], side, side]
    timm_config["conv_stem"] = {**stems.conv_stem_arguments(model), "epsilon": batch_norms[0].epsilon,
                                "momentum": batch_norms[0].momentum}
    write_json(os.path.join(folder, "config.json"), timm_config)
    return folder


def write_hf_folder(work):
    """The Hugging Face folder of a backbone that timm wrote (`pretrain-timm`), through keras_vit's reader and writer."""
    import keras_vit
    from keras_vit import weights

    timm_folder = os.path.join(work, "backbone", "timm")
    scaling = weights.Checkpoint(timm_folder).preprocessing.scaling  # what its pretrained_cfg states
    model = keras_vit.ViT(weights=timm_folder, preprocessing=scaling)
    weights.save_hf(model, os.path.join(work, "backbone", "hf"), overwrite=True)
    return os.path.join(work, "backbone", "hf")


# The adaptation set-ups: TrainConfig fields on top of the folder and the budget.
SETUPS = {
    # What `keras-vit train --weights DIR --budget-minutes N` does: a probe, then fine-tuning from it.
    "auto_timm": {"weights": "timm", "adapt": "auto"},
    # The same from the backbone's .keras file (a backbone of KERAS_ONLY).
    "auto_keras": {"weights": "backbone.keras", "adapt": "auto"},
    # The same with XLA, which `auto` leaves off on TensorFlow: compiling the step costs tens of seconds.
    "auto_xla_timm": {"weights": "timm", "adapt": "auto", "jit_compile": True},
    # The same with one image held out instead of 10% (the least `hold_out` takes): fine-tuning on
    # 249 of 250 images, as the peer trains on all, and the one-image sign test always keeps it.
    # What the 10% held out for the probe-or-fine-tune decision costs.
    "auto_one_held_timm": {"weights": "timm", "adapt": "auto", "validation_split": 0.004},
    # The 10% held out to the end, as `auto` did before it gave them back midway (a given
    # --validation-split stays out): what giving them back gains.
    "auto_held_timm": {"weights": "timm", "adapt": "auto", "validation_split": 0.1},
    "finetune_timm": {"weights": "timm", "adapt": "finetune"},
    "probe_timm": {"weights": "timm", "adapt": "probe"},
    # The same backbone read from its Hugging Face folder: the same run through the other reader.
    "finetune_hf": {"weights": "hf", "adapt": "finetune"},
    # The paper's SGD fine-tuning recipe instead of AdamW with layer-wise decay.
    "finetune_sgd_timm": {"weights": "timm", "adapt": "finetune", "recipe": "finetune"},
    # finetune_adamw at 4x its peak learning rate ("recipe_changes": fields of the recipe replaced).
    "finetune_lr4x_timm": {"weights": "timm", "adapt": "finetune", "recipe_changes": {"learning_rate": 4e-3}},
    "auto_lr4x_timm": {"weights": "timm", "adapt": "auto", "recipe_changes": {"learning_rate": 4e-3}},
    # The peer: timm's linear probe (weight decay by 5-fold cross-validation), then LP-FT, in torch
    # (benchmarks/transfer_timm_peer.py); not a TrainConfig.
    "timm_lpft": {"peer": "benchmarks.transfer_timm_peer:adapt_timm"},
    # From scratch in the same budget: what the budget rules choose for these 250 images ...
    "scratch": {},
    # ... and the backbone's own architecture (its BACKBONES entry, read from pretrain.json).
    "scratch_same": {"model_overrides": "backbone", "stem": "none", "tokenizer": "patches", "pooling": "token",
                     "scaling": SCALING},
}


def adapt_one(work, setup, budget_seconds, seed=0, epochs=None, weights=None):
    """One adaptation run (in a worker process): its test accuracy on the 5,000 test images and what it did.

    `weights`: another checkpoint than the set-up's folder of work/backbone (benchmarks/pretrain.py's MAE).
    """
    from keras_vit.training import TrainConfig, train

    fields = dict(SETUPS[setup])
    if "weights" in fields:
        fields["weights"] = weights or os.path.join(work, "backbone", fields["weights"])
    if "recipe_changes" in fields:  # TrainConfig takes a Recipe of the set-up's own
        import dataclasses

        from keras_vit.training import recipes

        fields["recipe"] = dataclasses.replace(recipes.get_recipe(fields.get("recipe", "finetune_adamw")), name=setup,
                                               **fields.pop("recipe_changes"))
    if fields.get("model_overrides") == "backbone":
        fields["model_overrides"] = dict(BACKBONES[pretrained_backbone(work)])
    result = train(TrainConfig(
        dataset=os.path.join(work, "adapt"), budget_seconds=budget_seconds, seed=seed, epochs=epochs,
        run_dir=None, output_dir=None, verbose=2, **fields,
    ))
    settings = result["settings"]
    return {
        "setup": setup, "accuracy": result["test_accuracy"], "num_test": result["num_test_examples"],
        "epochs_done": result["epochs_done"], "steps_done": result["steps_done"], "train_seconds": result["train_seconds"],
        "probe": result.get("probe"), "adapt_decision": result.get("adapt_decision"),
        "adapt": settings.get("adapt"), "recipe": settings["recipe"],
        "batch_size": settings["batch_size"], "learning_rate": settings["learning_rate"], "params": settings["params"],
        "precision": settings.get("precision"),
    }


def evaluate_backbone(work, shots=(1, 5, 10, 25), draws=5, seed=0, weights=None):
    """Linear few-shot and k-NN accuracy of the pre-trained backbone (timm folder, or `weights`) on the adaptation folders."""
    from keras_vit.data.sources import load_source
    from keras_vit.transfer import extract_features, knn_accuracy, linear_fewshot, load_pretrained

    if weights is None:
        timm_folder = os.path.join(work, "backbone", "timm")
        weights = timm_folder if os.path.isdir(timm_folder) else os.path.join(work, "backbone", "backbone.keras")
    model, _ = load_pretrained(weights)
    train = extract_features(model, load_source(os.path.join(work, "adapt"), "train"))
    test = extract_features(model, load_source(os.path.join(work, "adapt"), "test"))
    smallest = min(int((train.labels == label).sum()) for label in range(len(train.class_names)))
    shots = tuple(count for count in shots if count <= smallest)  # the counts the training folder holds
    fewshot = linear_fewshot(train.features, train.labels, test.features, test.labels, shots=shots, draws=draws,
                             seed=seed)
    knn = knn_accuracy(train.features, train.labels, test.features, test.labels)
    return {"setup": "fewshot_knn", "fewshot": fewshot, "knn": knn}


def adapt(work, budget_minutes, setups, out=None, argv=None, seed=0, epochs=None, weights=None):
    """Each set-up adapted to work/adapt in its own process, then the features' few-shot and k-NN accuracy.

    `weights`: a checkpoint in place of the set-ups' files in work/backbone (one that
    `keras-vit pretrain` wrote, say); the peer and scratch do not read it.
    """
    from benchmarks.workers import ResultLog, run_worker

    log = ResultLog("transfer", out, argv)
    record = os.path.join(work, "backbone", "pretrain.json")
    if os.path.exists(record):  # scratch alone needs no backbone
        with open(record) as f:
            log.add({"setup": "pretrain", **json.load(f)})
    if weights is not None:
        log.add({"setup": "weights", "weights": weights})
    results = []
    for setup in setups:
        if "peer" in SETUPS[setup]:
            result = run_worker(SETUPS[setup]["peer"], dict(work=work, classes=ADAPT_CLASSES, seed=seed,
                                                            budget_seconds=budget_minutes * 60,
                                                            max_steps=epochs and epochs * 7))
        else:
            result = run_worker("benchmarks.transfer:adapt_one", dict(work=work, setup=setup, seed=seed, epochs=epochs,
                                                                      budget_seconds=budget_minutes * 60, weights=weights))
        result.setdefault("setup", setup)
        log.add(result)
        results.append(result)
    backbone = {"error": "no backbone"}
    if weights is not None or os.path.exists(record):
        backbone = run_worker("benchmarks.transfer:evaluate_backbone", dict(work=work, seed=seed, weights=weights))
        log.add(backbone)
    rows = ["| set-up | test accuracy | epochs (steps) | train s | adapt, recipe, batch, peak lr |", "|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            rows.append(f"| {r['setup']} | error: {r['error']} | | | |")
            continue
        if "probe_accuracy" in r:  # the peer
            rows.append(f"| {r['setup']} | {100 * r['accuracy']:.2f}% of {r['num_test']:,} (its probe "
                        f"{100 * r['probe_accuracy']:.2f}%, decay {r['probe_decay']:.3g}) | {r['epochs_done']} "
                        f"({r['steps_done']}) | {r['train_seconds']} | {r['engine']}, LP-FT, {r['recipe']['batch_size']}, "
                        f"{r['recipe']['learning_rate']:.3g} |")
            continue
        kept = (r.get("adapt_decision") or {}).get("kept")
        rows.append(f"| {r['setup']} | {100 * r['accuracy']:.2f}% of {r['num_test']:,}"
                    f"{f' (kept: {kept})' if kept else ''} | {r['epochs_done']} "
                    f"({r['steps_done']}) | {r['train_seconds']} | {r['adapt']}, {r['recipe']}, {r['batch_size']}, "
                    f"{r['learning_rate']:.3g} |")
    if "error" not in backbone:
        shots = ", ".join(f"{k}-shot {100 * v['mean']:.1f}%" for k, v in backbone["fewshot"].items())
        rows.append(f"| backbone, no training | {shots}; 20-NN {100 * backbone['knn']:.1f}% | | | |")
    log.summary("\n".join(rows))
    return results


def add_prepare_step(sub, train_per_class, test_per_class):
    """The `prepare` step's options: CIFAR-10's training split, from its tar or its class folders, into --work."""
    p = sub.add_parser("prepare")
    p.add_argument("--tar", help="cifar10-train-jpg.tar.gz")
    p.add_argument("--source", help="instead of --tar: a folder with CIFAR-10's class folders")
    p.add_argument("--work", required=True)
    p.add_argument("--train-per-class", type=int, default=train_per_class)
    p.add_argument("--test-per-class", type=int, default=test_per_class)
    return p


def run_prepare_step(parser, args, prepare_function):
    """Runs `prepare_function` on the options `add_prepare_step` read; exactly one of --tar and --source."""
    if (args.tar is None) == (args.source is None):
        parser.error("prepare needs one of --tar and --source")
    print(prepare_function(args.work, args.tar, args.source, args.train_per_class, args.test_per_class))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks transfer", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    add_prepare_step(sub, TRAIN_PER_CLASS, TEST_PER_CLASS)
    p = sub.add_parser("pretrain")
    p.add_argument("--work", required=True)
    p.add_argument("--backbone", choices=tuple(BACKBONES), default=DEFAULT_BACKBONE)
    p.add_argument("--budget-minutes", type=float, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, help="epoch limit (smoke runs; default: the budget's)")
    p = sub.add_parser("pretrain-timm", help="the backbone by timm on torch's device (benchmarks/transfer_torch.py)")
    p.add_argument("--work", required=True)
    p.add_argument("--backbone", choices=tuple(BACKBONES), default=DEFAULT_BACKBONE)
    p.add_argument("--budget-minutes", type=float, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, help="step limit (smoke runs; default: the budget's)")
    p.add_argument("--batch-size", type=int, help="default: transfer_torch.RECIPE's")
    p.add_argument("--compile", choices=("auto", "on", "off"), default="auto", help="torch.compile (auto: on CUDA)")
    p = sub.add_parser("folders", help="the Hugging Face folder of the timm-written backbone")
    p.add_argument("--work", required=True)
    p = sub.add_parser("adapt")
    p.add_argument("--work", required=True)
    p.add_argument("--budget-minutes", type=float, default=3)
    p.add_argument("--setups", default=",".join(SETUPS), help=f"comma-separated, of {', '.join(SETUPS)}")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, help="epoch limit (smoke runs; default: the budget's)")
    p.add_argument("--weights", help="a checkpoint in place of the set-ups' files in WORK/backbone")
    p.add_argument("--out", help="folder for the .jsonl and .md")
    args = parser.parse_args(argv)
    if args.step == "prepare":
        run_prepare_step(parser, args, prepare)
    elif args.step == "pretrain":
        print(pretrain(args.work, args.budget_minutes, args.seed, args.epochs, args.backbone))
    elif args.step == "pretrain-timm":
        from benchmarks.transfer_torch import pretrain_timm

        compile_model = {"auto": None, "on": True, "off": False}[args.compile]
        fields = {**BACKBONES[args.backbone], "timm": TIMM_EXTRAS.get(args.backbone, {})}
        print(pretrain_timm(args.work, PRETRAIN_CLASSES, args.budget_minutes * 60, args.backbone, fields,
                            args.seed, compile_model=compile_model,
                            max_steps=args.max_steps, batch_size=args.batch_size))
    elif args.step == "folders":
        print(write_hf_folder(args.work))
    else:
        setups = args.setups.split(",")
        unknown = [s for s in setups if s not in SETUPS]
        if unknown:
            parser.error(f"unknown --setups {unknown}; expected some of {list(SETUPS)}")
        adapt(args.work, args.budget_minutes, setups, args.out, argv, args.seed, args.epochs, args.weights)


if __name__ == "__main__":
    main()
