"""The `keras-vit` command line: one sub-command per job (train, evaluate, export, predict, inspect).

Each job adds a function `_add_<job>(subparsers)` that registers its sub-parser and sets
`func=<handler>`, and lists it in `_COMMANDS`. Handlers take the parsed arguments and return an
exit code. User mistakes (ValueError, FileNotFoundError) print one clear line and exit 2 without
a traceback; set KERAS_VIT_DEBUG=1 to see the traceback.
"""

from __future__ import annotations

import argparse
import os
import sys


def build_parser() -> argparse.ArgumentParser:
    """Returns the argument parser of `keras-vit`."""
    from keras_vit import __version__

    parser = argparse.ArgumentParser(
        prog="keras-vit",
        description="Vision Transformers for Keras: train, evaluate, export and inspect.",
    )
    parser.add_argument("--version", action="version", version=f"keras_vit {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add_command in _COMMANDS:
        add_command(subparsers)
    return parser


_COMMANDS = []


def _add_train(subparsers) -> None:
    from keras_vit.configs import SCALINGS, VARIANTS
    from keras_vit.data.augment import PRESETS
    from keras_vit.training.distribute import PRECISIONS, STRATEGIES
    from keras_vit.training.recipes import RECIPES

    parser = subparsers.add_parser(
        "train",
        help="train a ViT (default: a small ViT on the shipped Fashion-MNIST sample)",
        description=(
            "Train a ViT with model.fit. With no arguments: a small ViT on the Fashion-MNIST "
            "sample shipped in the package (a few minutes on a CPU), then prints the test "
            "accuracy and saves the model under saved_models/. Runs survive crashes: run the "
            "same command again and it resumes from the last completed epoch."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    data = parser.add_argument_group("data")
    data.add_argument("--dataset", default="sample", help="'sample' (shipped Fashion-MNIST sample), a folder "
                      "of class sub-folders (or of train/ and test/ sub-folders), a folder with the Fashion-MNIST "
                      "IDX files, or a tensorflow-datasets name such as cifar10")
    data.add_argument("--data-dir", help="tensorflow-datasets data_dir")
    data.add_argument("--download", action="store_true", help="let tensorflow-datasets download missing data")
    data.add_argument("--train-split", default="train", help="split to train on")
    data.add_argument("--test-split", default="test", help="split to report test accuracy on ('' for none)")
    data.add_argument("--on-corrupt", choices=("skip", "error"), default="skip",
                      help="corrupt image files in a folder: skip them (and report the count) or stop")
    data.add_argument("--max-train-examples", type=int, help="use only the first N training examples")
    data.add_argument("--max-test-examples", type=int, help="use only the first N test examples")
    model = parser.add_argument_group("model")
    model.add_argument("--variant", help=f"ViT variant, one of {', '.join(VARIANTS)}; default: a small ViT "
                       "(patch 7, D 128, 6 layers, 4 heads, MLP 256)")
    for flag in ("patch-size", "hidden-size", "num-layers", "num-heads", "mlp-dim"):
        model.add_argument(f"--{flag}", type=int, help=f"override the variant's {flag.replace('-', ' ')}")
    model.add_argument("--pooling", choices=("token", "gap"), default="token", help="class token or mean of tokens")
    model.add_argument("--image-size", type=int, help="input side in pixels (default: the data's, or the variant's)")
    model.add_argument("--channels", type=int, choices=(1, 3), default=3, help="input channels of the model")
    model.add_argument("--scaling", choices=tuple(SCALINGS), default="unit",
                       help="pixel scaling built into the model (unit [0,1], symmetric [-1,1], imagenet mean/std)")
    fit = parser.add_argument_group("training")
    fit.add_argument("--recipe", choices=tuple(RECIPES), default="compact", help="optimizer/schedule/regularisation recipe")
    fit.add_argument("--augment", choices=tuple(PRESETS), help="augmentation preset (default: the recipe's)")
    fit.add_argument("--epochs", type=int, default=10, help="number of epochs")
    fit.add_argument("--batch-size", type=int, help="global batch size, split over replicas (default: the recipe's)")
    fit.add_argument("--precision", choices=PRECISIONS, default="auto", help="dtype policy; auto picks by hardware")
    fit.add_argument("--jit-compile", choices=("auto", "on", "off"), default="auto", help="XLA compilation")
    fit.add_argument("--strategy", choices=STRATEGIES, default="default", help="tf.distribute strategy")
    fit.add_argument("--budget-minutes", type=float, help="stop after this much training time")
    fit.add_argument("--seed", type=int, default=0, help="random seed")
    out = parser.add_argument_group("output")
    out.add_argument("--run-dir", default=os.path.join("runs", "train"),
                     help="logs (TensorBoard, history.csv) and crash backups")
    out.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True,
                     help="resume from the run directory's backup after a crash")
    out.add_argument("--output-dir", default="saved_models", help="where the trained model is saved")
    out.add_argument("--name", default="vit", help="file name stem of the saved model")
    out.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=_run_train)


def _run_train(args) -> int:
    from keras_vit import configs
    from keras_vit.training.trainer import TrainConfig, train

    if args.variant is not None:
        configs.get_variant(args.variant)
        args.variant = configs.normalize_variant_name(args.variant)
    for name in ("epochs", "batch_size", "image_size", "max_train_examples", "max_test_examples",
                 "patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"Invalid --{name.replace('_', '-')}={value}. Expected an integer >= 1.")
    config = TrainConfig(
        dataset=args.dataset, data_dir=args.data_dir, train_split=args.train_split,
        test_split=args.test_split or None, download=args.download, on_corrupt=args.on_corrupt,
        variant=args.variant,
        model_overrides={k: getattr(args, k) for k in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim")},
        pooling=args.pooling, image_size=args.image_size, channels=args.channels, scaling=args.scaling,
        recipe=args.recipe, augment=args.augment, epochs=args.epochs, batch_size=args.batch_size,
        precision=args.precision, jit_compile={"auto": None, "on": True, "off": False}[args.jit_compile],
        strategy=args.strategy, run_dir=args.run_dir, output_dir=None, name=args.name, resume=args.resume,
        seed=args.seed, budget_seconds=args.budget_minutes * 60 if args.budget_minutes else None,
        max_train_examples=args.max_train_examples, max_test_examples=args.max_test_examples,
        verbose=2 if args.quiet else 1,
    )
    result = train(config)
    settings = result["settings"]
    if result["initial_epoch"]:
        print(f"Resumed from epoch {result['initial_epoch']} (backup in {args.run_dir}).")
    print(
        f"Trained {settings['params']:,} parameters for {result['epochs_done']} epochs in "
        f"{result['train_seconds']:.0f} s ({result['images_per_second']:.0f} images/s, "
        f"{settings['precision']}, XLA {'on' if settings['jit_compile'] else 'off'})."
    )
    if result["test_accuracy"] is not None:
        print(f"Test accuracy: {result['test_accuracy']:.4f} (loss {result['test_loss']:.4f})")
    return _write_train_artifacts(result, args)


def _write_train_artifacts(result, args) -> int:
    """Writes the final artefacts of `keras-vit train` (extend here: SavedModel, TFLite)."""
    from keras_vit.training.trainer import save_final_artifacts

    paths = save_final_artifacts(result["model"], result["class_names"], args.output_dir, args.name, result)
    for kind, path in paths.items():
        print(f"Saved {kind}: {path}")
    return 0


def _add_evaluate(subparsers) -> None:
    parser = subparsers.add_parser(
        "evaluate",
        help="evaluate a saved .keras model on a data set",
        description="Report the accuracy of a model saved by `keras-vit train` on a data set split.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("model", help="path of the .keras model")
    parser.add_argument("--dataset", default="sample", help="'sample', a folder, or a tensorflow-datasets name")
    parser.add_argument("--split", default="test", help="split to evaluate")
    parser.add_argument("--data-dir", help="tensorflow-datasets data_dir")
    parser.add_argument("--download", action="store_true", help="let tensorflow-datasets download missing data")
    parser.add_argument("--on-corrupt", choices=("skip", "error"), default="skip", help="corrupt image files")
    parser.add_argument("--batch-size", type=int, default=256, help="batch size")
    parser.add_argument("--max-examples", type=int, help="evaluate only the first N examples")
    parser.set_defaults(func=_run_evaluate)


def _run_evaluate(args) -> int:
    from keras_vit.training.trainer import evaluate

    if args.batch_size < 1:
        raise ValueError(f"Invalid --batch-size={args.batch_size}. Expected an integer >= 1.")
    scores = evaluate(args.model, args.dataset, args.split, args.batch_size, args.data_dir, args.on_corrupt,
                      args.download, args.max_examples)
    print(f"{args.dataset}:{args.split}: accuracy {scores['accuracy']:.4f}, loss {scores['loss']:.4f} "
          f"on {scores['num_examples']} examples")
    return 0


_COMMANDS.extend([_add_train, _add_evaluate])


def main(argv=None) -> int:
    """Runs `keras-vit` with `argv` (default: sys.argv[1:]) and returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return args.func(args) or 0
    except (ValueError, FileNotFoundError) as error:
        if os.environ.get("KERAS_VIT_DEBUG"):
            raise
        print(f"keras-vit {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
