"""`keras-vit evaluate MODEL`: accuracy and cross-entropy of a saved .keras model on a data set split."""

from __future__ import annotations

from keras_vit.commands._shared import option_flag, print_skipped


def add(subparsers) -> None:
    parser = subparsers.add_parser(
        "evaluate",
        help="evaluate a saved .keras model on a data set",
        description="Report the accuracy and cross-entropy of a model saved by `keras-vit train` on a data set split "
        "(the same measure as the test metrics `keras-vit train` prints).",
    )
    parser.add_argument("model", help="path of the .keras model")
    parser.add_argument("--dataset", default="sample", help="'sample' (the default), a folder, or a tensorflow-datasets name")
    parser.add_argument("--split", default="test", help="split to evaluate: train, test, validation (the held-out "
                        "share of a folder of class sub-folders, or of --validation-split), or a tfds split (default: test)")
    parser.add_argument("--data-dir", help="tensorflow-datasets data_dir (default: tensorflow-datasets' own)")
    parser.add_argument("--download", action="store_true", help="let tensorflow-datasets download missing data")
    parser.add_argument("--on-corrupt", choices=("skip", "error"), default="skip",
                        help="corrupt image files: skip them or stop (default: skip)")
    parser.add_argument("--batch-size", type=int, default=256, help="batch size (default: 256)")
    parser.add_argument("--max-examples", type=int, help="evaluate only the first N examples (default: all)")
    parser.add_argument("--validation-split", type=float,
                        help="the training run's --validation-split, for --split validation (default: none)")
    parser.add_argument("--seed", type=int, default=0,
                        help="the training run's --seed, which chose the held-out share (default: 0)")
    parser.add_argument("--by-index", action="store_true",
                        help="score the data set's labels by index; by default the class names stored with the model "
                        "(<model>.labels.txt, or a zero-shot classifier's) must be the data set's: in another order they "
                        "are matched by name, other names are refused")
    parser.set_defaults(func=run)


def run(args) -> int:
    from keras_vit import _validation
    from keras_vit.training.trainer import check_evaluate_arguments, evaluate

    check_evaluate_arguments(args.batch_size, args.max_examples, args.validation_split, name=option_flag)
    _validation.check_seed("--seed", args.seed)
    scores = evaluate(args.model, args.dataset, args.split, args.batch_size, args.data_dir, args.on_corrupt,
                      args.download, args.max_examples, args.validation_split, args.seed, args.by_index)
    matched = "; classes matched to the model's by name" if scores["matched_by_name"] else ""
    print(f"{args.dataset}:{args.split}: accuracy {scores['accuracy']:.4f}, loss {scores['loss']:.4f} "
          f"on {scores['num_examples']} examples ({scores['data']}{matched})")
    print_skipped(scores["skipped_files"])
    return 0
