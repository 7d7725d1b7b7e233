"""pretrain: does self-supervised pre-training (MAE, DINO or SimCLR) on unlabeled images make a better start for few labels? (issue 53)

The transfer benchmark's split (benchmarks/transfer.py): `keras-vit pretrain` on the 25,000 images
of five CIFAR-10 classes, their labels unused, for the given minutes; then the transfer
benchmark's own adaptation (its `adapt_one`, the set-up `auto_timm`: what `keras-vit train
--weights DIR --budget-minutes 3` does) to 50 images per class of the other five, tested on
1,000 other images per class; and the linear few-shot and k-NN accuracies of the features
(its `evaluate_backbone`). `--supervised` and `--scratch` add, in the same run, the transfer
benchmark's supervised pre-training of the same images (their labels used) and training from scratch.

    python -m benchmarks transfer prepare --tar ../shared/data/cifar10-train/cifar10-train-jpg.tar.gz --work /tmp/xfer
    python -m benchmarks pretrain --work /tmp/xfer --minutes 5,10,20,40 --adapt-minutes 3 --out benchmarks/results
    python -m benchmarks pretrain --work /tmp/xfer --method dino --minutes 20 --adapt-minutes 3 --out benchmarks/results
    python -m benchmarks pretrain --work /tmp/xfer --method dino --local-views 0 --minutes 20 --out benchmarks/results
    python -m benchmarks pretrain --work /tmp/xfer --method simclr --minutes 20 --adapt-minutes 3 --out benchmarks/results
    python -m benchmarks pretrain --work /tmp/xfer --method simclr --minutes 5,10,40 --supervised 20 --scratch --out benchmarks/results
"""

from __future__ import annotations

import argparse
import os

from benchmarks import transfer

ADAPT_SETUP = "auto_timm"  # the setting of `keras-vit train --weights DIR --budget-minutes N`
SUPERVISED_ADAPT_SETUP = "auto_keras"  # the same from the .keras file (the budget's conv stem has no timm layout)


def run_name(method, minutes, local_views=None):
    """The checkpoint folder's name in the work folder: dino-20min, dino-20min-local0 (local views given)."""
    return f"{method}-{minutes:g}min" + ("" if local_views is None else f"-local{local_views}")


def pretrain_mae(work, minutes, seed=0, epochs=None, model=None, method="mae", local_views=None):
    """`keras-vit pretrain` on work/pretrain (in a worker process); its checkpoint folder and what it did."""
    from keras_vit import cli

    out, run_dir = (os.path.join(work, run_name(method, minutes, local_views) + suffix) for suffix in ("", "-run"))
    args = ["pretrain", "--dataset", os.path.join(work, "pretrain"), "--budget-minutes", str(minutes), "--seed",
            str(seed), "--output-dir", out, "--run-dir", run_dir, "--quiet", "--overwrite", "--method", method]
    if epochs is not None:
        args += ["--epochs", str(epochs)]
    if local_views is not None:
        args += ["--local-views", str(local_views)]
    for flag, value in (model or {}).items():
        args += ["--" + flag.replace("_", "-"), str(value)]
    code = cli.main(args)
    if code:
        return {"error": f"keras-vit pretrain exited {code}"}
    return {"checkpoint": out, "minutes": minutes}


def supervised_name(minutes):
    """The supervised backbone's folder in the work folder: supervised-20min."""
    return f"supervised-{minutes:g}min"


def run(work, minutes, adapt_minutes=3, out=None, argv=None, seed=0, epochs=None, model=None, method="mae",
        local_views=None, supervised=(), scratch=False):
    """Each budget of `method` pre-trained, adapted and probed; then each `supervised` budget (the transfer
    benchmark's pre-training with the labels, the budget rules' model) and `scratch`, in the same run."""
    from benchmarks.workers import ResultLog, run_worker

    log = ResultLog("pretrain", out, argv)
    rows = ["| pre-training | adapted (test accuracy) | linear few-shot | 20-NN |", "|---|---|---|---|"]

    def adapt_and_probe(label, setup, weights, adapt_setup):
        adapted = run_worker("benchmarks.transfer:adapt_one", dict(
            work=work, setup=adapt_setup, seed=seed, epochs=epochs, budget_seconds=adapt_minutes * 60, weights=weights))
        log.add({**adapted, "setup": f"{setup}_adapted"})
        accuracy = f"{100 * adapted['accuracy']:.2f}%" if "accuracy" in adapted else f"error: {adapted.get('error')}"
        if weights is None:  # scratch: no features to probe
            rows.append(f"| {label} | {accuracy} | | |")
            return
        features = run_worker("benchmarks.transfer:evaluate_backbone", dict(work=work, seed=seed, weights=weights))
        log.add({**features, "setup": f"{setup}_features"})
        shots = (", ".join(f"{k}-shot {100 * v['mean']:.1f}%" for k, v in features["fewshot"].items())
                 if "fewshot" in features else features.get("error"))
        knn = f"{100 * features['knn']:.1f}%" if "knn" in features else ""
        rows.append(f"| {label} | {accuracy} | {shots} | {knn} |")

    for budget in minutes:
        pretrained = run_worker("benchmarks.pretrain:pretrain_mae", dict(work=work, minutes=budget, seed=seed,
                                                                          epochs=epochs, model=model, method=method,
                                                                          local_views=local_views))
        local = "" if local_views is None else f", {local_views} local views"
        label, setup = f"{method.upper()} {budget:g} min{local}", run_name(method, budget, local_views).replace("-", "_")
        log.add({"setup": setup, **pretrained})
        if "error" in pretrained:
            rows.append(f"| {label} | error: {pretrained['error']} | | |")
            continue
        adapt_and_probe(label, setup, pretrained["checkpoint"], ADAPT_SETUP)
    for budget in supervised:
        folder = supervised_name(budget)
        pretrained = run_worker("benchmarks.transfer:pretrain", dict(
            work=work, budget_minutes=budget, seed=seed, epochs=epochs, backbone="smoke" if model else "budget",
            folder=folder))
        label, setup = f"supervised {budget:g} min", folder.replace("-", "_")
        log.add({**pretrained, "setup": setup})
        if "error" in pretrained:
            rows.append(f"| {label} | error: {pretrained['error']} | | |")
            continue
        adapt_and_probe(label, setup, os.path.join(work, folder, "backbone.keras"), SUPERVISED_ADAPT_SETUP)
    if scratch:
        adapt_and_probe("none (scratch)", "scratch", None, "scratch")
    log.summary("\n".join(rows))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks pretrain", description=__doc__.split("\n")[0])
    parser.add_argument("--work", required=True, help="the transfer benchmark's work folder (its prepare step)")
    parser.add_argument("--minutes", default="5,10,20,40", help="pre-training budgets, comma-separated")
    parser.add_argument("--adapt-minutes", type=float, default=3)
    parser.add_argument("--method", choices=("mae", "dino", "simclr"), default="mae")
    parser.add_argument("--local-views", type=int, help="DINO's local views (keras-vit pretrain --local-views; "
                        "default: its own); the folders are named for it")
    parser.add_argument("--supervised", default="", help="budgets of supervised pre-training on the same images "
                        "(with their labels), comma-separated, adapted and probed the same way (default: none)")
    parser.add_argument("--scratch", action="store_true", help="add training from scratch for --adapt-minutes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, help="epoch limit of each step (smoke runs; default: the budgets')")
    parser.add_argument("--model", choices=("smoke",), help="smoke: transfer.BACKBONES['smoke'] (default: the budget's)")
    parser.add_argument("--out", help="folder for the .jsonl and .md")
    args = parser.parse_args(argv)
    model = None
    if args.model == "smoke":
        model = {**transfer.BACKBONES["smoke"], **({"decoder": "test"} if args.method == "mae" else {"head": "test"})}
    def budgets(text):
        return [float(m) for m in text.split(",") if m]

    run(args.work, budgets(args.minutes), args.adapt_minutes, args.out, argv, args.seed, args.epochs, model,
        args.method, args.local_views, budgets(args.supervised), args.scratch)


if __name__ == "__main__":
    main()
