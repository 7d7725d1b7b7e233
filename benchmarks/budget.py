"""budget: what accuracy does `keras-vit train --budget-minutes N` buy on a dataset, beside the anchor?

Each set-up is one `keras_vit.training.train` run in a fresh worker process, in turn, with the
same data, budget and seed; the figure is the accuracy on the run's validation images (a flat
class folder's held-out 10%, or the test split of a dataset that has one, as `keras-vit train`
validates) at the end of the budget, with the epochs done and the steady images/s.

| set-up | what it is |
|---|---|
| default | `keras-vit train --dataset D --budget-minutes N`: what the budget rules choose (`keras_vit.training.budget`) |
| plain | the same with `--stem none`: the plain ViT (no convolutions; on shifted patches where the rules choose them), with what the rules choose for it |
| anchor | `--recipe anchor --patch-size 4 --attention-init random --pooling token --channels 3`: the keras.io ViT example's settings (patch 4, D 128, 6 blocks, AdamW 1e-3, constant rate, no augmentation, colour input) |

The other set-ups are probes of single levers (RESULTS section 10), each with the fields it
changes; those of the plain ViT run before its rules pin the settings of the day.

Writes `budget-<hardware>-<time>.jsonl` and `.md` (table) under --out, and the learning curves
(validation accuracy against wall time, one line per set-up) as `.png` beside them.

    python -m benchmarks budget --dataset DIR --budget-minutes 8 --out benchmarks/results
    python -m benchmarks budget --dataset ../shared/data/fashion-mnist --budget-minutes 10 --out benchmarks/results
"""

from __future__ import annotations

import argparse
import time

from benchmarks.workers import ResultLog, run_worker

# The plain ViT's initialization and pooling before the budget rules chose them (2026-11-25):
# probes of other levers run before then keep them, so that a rerun measures what they did.
BEFORE_PLAIN_RULES = {"attention_init": "random", "pooling": "token"}
# The plain ViT on the paper's patches: the probes of it that ran before the rules gave it shifted
# patches (2026-11-26) keep them. Probes with model_overrides keep them anyway (a model given).
PATCHES_PLAIN = {"stem": "none", "tokenizer": "patches"}
# The conv stem of three stride-2 convolutions: the stem model's probes from before its fourth
# convolution (2026-11-26) keep it.
THREE_CONV_STEM = {"stem_args": {"filters": (32, 64, 128), "strides": (2, 2, 2)}}
# The set-ups that take the model's channels from the data (grey Fashion-MNIST as one channel, the
# rule of 2026-11-26); every other set-up, the anchor included, ran and reruns with 3 channels.
CHANNELS_AS_READ = ("default", "plain")

SETUPS = {
    "default": {},
    "plain": {"stem": "none"},
    # The keras.io example's model and recipe: none of the budget's rules apply to it.
    "anchor": {"recipe": "anchor", "model_overrides": {"patch_size": 4}, **BEFORE_PLAIN_RULES},
    # The default's stem with 4 blocks instead of the rules' 2 (10 ms per image): a probe for its depth row.
    "stem4": {**THREE_CONV_STEM, "stem": "conv", "model_overrides": {"num_layers": 4}},
    # The plain ViT with twice the optimizer steps (the recipe scales its learning rate to the batch).
    "plain_b128": {**BEFORE_PLAIN_RULES, **PATCHES_PLAIN, "batch_size": 128},
    # The plain ViT without augmentation: does it under-fit in the 12 epochs a budget buys?
    "plain_noaug": {**BEFORE_PLAIN_RULES, **PATCHES_PLAIN, "augment": "none"},
    # A finer grid at the default model's speed (7x7 patches of 4 px, width 64, 4 blocks): a probe
    # for the plain-ViT target, RESULTS section 10.
    "plain_p4_d64_4": {**BEFORE_PLAIN_RULES, "stem": "none", "model_overrides": {"patch_size": 4, "hidden_size": 64, "num_layers": 4,
                                                           "num_heads": 4, "mlp_dim": 128}},
    # Probes of the recipe and the head (RESULTS section 10). "recipe_changes" are
    # fields of the budget's recipe replaced for the run.
    "plain_gap": {"attention_init": "random", **PATCHES_PLAIN, "pooling": "gap"},
    "plain_lr2x": {**BEFORE_PLAIN_RULES, **PATCHES_PLAIN, "augment": "flip", "recipe_changes": {"learning_rate": 4e-3}},
    # Against over-fitting (the plain ViT ends at 92% train / 88% validation accuracy): random erasing,
    # "augment_changes" being fields of the budget's augmentation preset replaced for the run.
    "plain_gap_erase": {"attention_init": "random", **PATCHES_PLAIN, "pooling": "gap", "augment": "flip",
                        "augment_changes": {"erasing_probability": 0.5}},
    "default_erase": {**THREE_CONV_STEM, "augment": "flip", "augment_changes": {"erasing_probability": 0.5}},
    "default_gap": {**THREE_CONV_STEM, "pooling": "gap"},
    "default_lr2x": {**THREE_CONV_STEM, "augment": "flip", "recipe_changes": {"learning_rate": 4e-3}},
    # Against the stem model's over-fitting (97% train / 92% test accuracy): three times the weight decay.
    "default_wd": {**THREE_CONV_STEM, "augment": "flip", "recipe_changes": {"learning_rate": 4e-3, "weight_decay": 0.15}},
    # 28 px images padded to the stem's 32 px instead of resized (no blur of 1-px textures).
    "default_pad": {**THREE_CONV_STEM, "resize": "pad"},
    # The 7x7 grid (patch 4) at the default model's cost per image: 50 tokens x 2 blocks ~ 17 x 6.
    "plain_p4_2": {**BEFORE_PLAIN_RULES, "stem": "none", "model_overrides": {"patch_size": 4, "num_layers": 2}},
    # The plain ViT at the rule's doubled rate (given by hand) with three times the weight decay, as default_wd.
    "plain_wd": {**BEFORE_PLAIN_RULES, **PATCHES_PLAIN, "recipe_changes": {"learning_rate": 4e-3, "weight_decay": 0.15}},
    # "Better plain ViT baselines" (Beyer et al. 2022): fixed 2-D sin-cos position embeddings and
    # average pooling ("vit_args": more `keras_vit.ViT` arguments of the run's model).
    "plain_sincos_gap": {"attention_init": "random", **PATCHES_PLAIN, "pooling": "gap", "vit_args": {"position_embedding": "sincos2d"}},
    "plain_lr4x": {**BEFORE_PLAIN_RULES, **PATCHES_PLAIN, "recipe_changes": {"learning_rate": 8e-3}},
    # Fewer blocks, more passes: 4 instead of the default model's 6.
    "plain_4blocks": {**BEFORE_PLAIN_RULES, "stem": "none", "model_overrides": {"num_layers": 4}},
    # A stem that sees the full resolution: a stride-1 3x3 convolution (16 filters) before the
    # three stride-2 ones ("stem_args": arguments of the run's `conv_stem`).
    "default_wd_stem4": {"recipe_changes": {"learning_rate": 4e-3, "weight_decay": 0.15},
                         "stem_args": {"filters": (16, 32, 64, 128), "strides": (1, 2, 2, 2)}},
    # Mimetic initialization of the attention kernels (`keras_vit.models.mimetic`).
    "plain_mimetic": {"pooling": "token", **PATCHES_PLAIN, "attention_init": "mimetic"},
    "plain_mimetic_sincos": {"pooling": "token", **PATCHES_PLAIN, "attention_init": "mimetic",
                             "vit_args": {"position_embedding": "sincos2d"}},
    "default_mimetic": {**THREE_CONV_STEM, "attention_init": "mimetic"},
    "plain_mimetic_gap": {**PATCHES_PLAIN, "attention_init": "mimetic", "pooling": "gap"},
    "plain_mimetic_4blocks": {"pooling": "token", "stem": "none", "attention_init": "mimetic", "model_overrides": {"num_layers": 4}},
    "default_wd_mimetic": {**THREE_CONV_STEM, "attention_init": "mimetic",
                           "recipe_changes": {"learning_rate": 4e-3, "weight_decay": 0.15}},
    "cifar_wd": {**THREE_CONV_STEM, "recipe_changes": {"learning_rate": 4e-3, "weight_decay": 0.15, "augment": "shift"}},
    # Probes of 2026-11-25, night, on top of the evening rules. The plain ViT at four times the
    # recipe's peak rate (the rule's two times, mimetic init steadies the early steps), and at 3 blocks.
    "plain_lr4x_rules": {**PATCHES_PLAIN, "recipe_changes": {"learning_rate": 8e-3}},
    "plain_3blocks": {"stem": "none", "model_overrides": {"num_layers": 3}},
    # Against the stem model's over-fitting (97% train / 92% test): stochastic depth, more label smoothing.
    "default_droppath": {**THREE_CONV_STEM, "recipe_changes": {"learning_rate": 4e-3, "weight_decay": 0.15, "drop_path_rate": 0.2}},
    "default_smooth": {**THREE_CONV_STEM, "recipe_changes": {"learning_rate": 4e-3, "weight_decay": 0.15, "label_smoothing": 0.2}},
    # The 7x7 grids of plain_p4_d64_4 and plain_p4_2 again, now under the plain ViT's rules (mimetic init,
    # mean pooling, peak rate x2): the paper's gains from mimetic init grow with the token count.
    "plain_p4_d64_4_rules": {"stem": "none", "model_overrides": {"patch_size": 4, "hidden_size": 64, "num_layers": 4,
                                                                 "num_heads": 4, "mlp_dim": 128}},
    "plain_p4_2_rules": {"stem": "none", "model_overrides": {"patch_size": 4, "num_layers": 2}},
    # The rules with 8 heads of 16 dimensions instead of 4 of 32 (the same matmul sizes).
    "plain_heads8": {"stem": "none", "model_overrides": {"num_layers": 4, "num_heads": 8}},
    "default_heads8": {**THREE_CONV_STEM, "stem": "conv", "model_overrides": {"num_layers": 2, "num_heads": 8}},
    # An exponential moving average of the weights (the recipe's `ema_momentum`, Keras' optimizer
    # `use_ema`). Their first runs (RESULTS section 10) measured the raw weights: a recipe of one's own
    # turns the budget's recipe and augmentation rules off, so the rules' values on Fashion-MNIST at
    # 10 ms per image are written out.
    "default_ema": {**THREE_CONV_STEM, "augment": "flip",
                    "recipe_changes": {"learning_rate": 4e-3, "weight_decay": 0.15, "ema_momentum": 0.999}},
    "plain_ema": {**PATCHES_PLAIN, "augment": "flip", "recipe_changes": {"learning_rate": 4e-3, "ema_momentum": 0.999}},
    # Shifted-patch tokenization (Lee et al. 2021, "Vision Transformer for Small-Size Datasets"), given:
    # each patch vector also holds the image moved half a patch along the four diagonals, normalized,
    # then the linear embedding. Its first runs used a worker-only prototype of the same layers.
    "plain_spt": {"stem": "none", "tokenizer": "shifted"},
    # The plain ViT on the paper's patches under the other rules of the day: what shifted patches add.
    "plain_patches": {"stem": "none", "tokenizer": "patches"},
    # Grey images fed as one channel instead of three: shifted patch vectors of 245 values, not 735.
    "plain_grey": {"stem": "none", "channels": 1},
    "default_grey": {"channels": 1},
    # A deeper stem at little cost: one more 3x3 convolution at stride 1 on the 4x4 map (128 channels)
    # or on the 8x8 map (64 channels), as the "early convolutions" stems stack them.
    "default_stem_4x4": {"stem_args": {"filters": (32, 64, 128, 128), "strides": (2, 2, 2, 1)}},
    "default_stem_8x8": {"stem_args": {"filters": (32, 64, 64, 128), "strides": (2, 2, 1, 2)}},
}


def train_one(dataset, budget_seconds, setup, seed=0, max_train_examples=None, max_test_examples=None, epochs=None,
              jit_compile=None, build_only=False):
    """Worker: one budgeted run of `setup`; its accuracy, epochs, speed and learning curve. With `build_only`,
    only what the run would build: its settings and its model's size, no step taken (a check of a probe's wiring)."""
    import dataclasses

    import keras

    from keras_vit.training import TrainConfig, plan, recipes, train

    class Curve(keras.callbacks.Callback):
        """Validation accuracy at each epoch end, against wall seconds since training began."""

        def on_train_begin(self, logs=None):
            self.start, self.points = time.perf_counter(), []

        def on_epoch_end(self, epoch, logs=None):
            if logs and "val_accuracy" in logs:
                self.points.append([round(time.perf_counter() - self.start, 1), round(float(logs["val_accuracy"]), 4),
                                    round(float(logs.get("accuracy", float("nan"))), 4)])

    curve = Curve()
    fields = dict(SETUPS[setup])
    if setup not in CHANNELS_AS_READ:
        fields.setdefault("channels", 3)
    recipe_changes = fields.pop("recipe_changes", None)
    augment_changes = fields.pop("augment_changes", None)
    if augment_changes:  # a probe's augmentation: TrainConfig takes an AugmentConfig of its own
        from keras_vit.data import augment

        fields["augment"] = dataclasses.replace(augment.get_preset(fields["augment"]), **augment_changes)
    if recipe_changes:  # a probe's recipe: TrainConfig takes a Recipe of its own
        base = recipes.get_recipe(fields.get("recipe") or plan.DEFAULT_RECIPE)
        fields["recipe"] = dataclasses.replace(base, name=setup, **recipe_changes)
    config = TrainConfig(
        dataset=dataset, budget_seconds=budget_seconds, seed=seed, run_dir=None, output_dir=None, verbose=0,
        max_train_examples=max_train_examples, max_test_examples=max_test_examples, epochs=epochs,
        jit_compile=jit_compile, callbacks=[curve], **fields,
    )
    if build_only:
        run = plan.resolve(config)
        return {"setup": setup, **_described(run.settings(plan.build_model(run)))}
    result = train(config)
    accuracy = result["validation_accuracy"] if result["validation_accuracy"] is not None else result["test_accuracy"]
    return {
        "setup": setup, "accuracy": accuracy, "test_accuracy": result["test_accuracy"],
        "validation": result["data"]["validation"] or result["data"]["test"],
        "epochs_done": result["epochs_done"], "steps_done": result["steps_done"],
        "train_seconds": result["train_seconds"], "images_per_second": result["images_per_second"],
        **_described(result["settings"]), "curve": curve.points,
    }


def _described(settings):
    """The settings a result line keeps of a run's settings record."""
    kept = ("params", "stem", "tokenizer", "recipe", "learning_rate", "weight_decay", "attention_init", "pooling", "augment",
            "image_size", "channels", "batch_size", "precision", "jit_compile")
    return {**{key: settings[key] for key in kept}, "resize": settings.get("resize", "bilinear")}


def plot(results, path, title):
    """Validation accuracy against wall time, one line per set-up."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 4))
    for result in results:
        if result.get("curve"):
            seconds, accuracy = [point[0] for point in result["curve"]], [point[1] for point in result["curve"]]
            axes.plot([s / 60 for s in seconds], [100 * a for a in accuracy], marker="o", markersize=3,
                      label=f"{result['setup']}: {100 * result['accuracy']:.1f}%")
    axes.set_xlabel("training wall time (min)")
    axes.set_ylabel("validation accuracy (%)")
    axes.set_title(title, fontsize=9)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks budget", description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", required=True, help="what `keras-vit train --dataset` takes")
    parser.add_argument("--budget-minutes", type=float, required=True)
    parser.add_argument("--setups", default="default,plain,anchor", help=f"comma-separated, of {', '.join(SETUPS)}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-train-examples", type=int, help="smoke runs only")
    parser.add_argument("--max-test-examples", type=int, help="smoke runs only")
    parser.add_argument("--epochs", type=int, help="epoch limit (smoke runs; default: the budget's)")
    parser.add_argument("--jit-compile", choices=("auto", "on", "off"), default="auto",
                        help="XLA (smoke runs: off compiles faster; default: what keras-vit train picks)")
    parser.add_argument("--out", help="folder for the .jsonl, .md and learning-curve .png")
    args = parser.parse_args(argv)
    setups = args.setups.split(",")
    unknown = [s for s in setups if s not in SETUPS]
    if unknown:
        parser.error(f"unknown --setups {unknown}; expected some of {list(SETUPS)}")
    log = ResultLog("budget", args.out, argv)
    results = []
    for setup in setups:
        result = run_worker("benchmarks.budget:train_one", dict(
            dataset=args.dataset, budget_seconds=args.budget_minutes * 60, setup=setup, seed=args.seed,
            max_train_examples=args.max_train_examples, max_test_examples=args.max_test_examples, epochs=args.epochs,
            jit_compile={"auto": None, "on": True, "off": False}[args.jit_compile],
        ))
        result.setdefault("setup", setup)
        log.add(result)
        results.append(result)
    rows = ["| set-up | accuracy | epochs | img/s | params | model | recipe, augment |", "|---|---|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            rows.append(f"| {r['setup']} | error: {r['error']} | | | | | |")
            continue
        model = ("conv stem + ViT" if r["stem"] else "ViT on shifted patches" if r.get("tokenizer") == "shifted"
                 else "ViT") + f" at {r['image_size']} px" + (f" x{r['channels']}" if "channels" in r else "")
        rows.append(
            f"| {r['setup']} | {100 * r['accuracy']:.2f}% | {r['epochs_done']} ({r['steps_done']} steps) | "
            f"{r['images_per_second']} | {r['params']:,} | {model} | {r['recipe']}, {r['augment']} |"
        )
    log.summary("\n".join(rows))
    if log.path:
        plot([r for r in results if "error" not in r], log.path + ".png",
             f"{args.dataset}, {args.budget_minutes:g} min budget ({log.machine.get('hardware', '')})")
        print(f"learning curves: {log.path}.png")
    return 0
