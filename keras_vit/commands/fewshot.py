"""`keras-vit fewshot SPEC`: the ViT paper's linear few-shot accuracy of a frozen backbone."""

from __future__ import annotations

from keras_vit.commands._shared import option_flag, print_skipped
from keras_vit.commands.backbone import add_backbone_arguments, split_features


def add(subparsers) -> None:
    parser = subparsers.add_parser(
        "fewshot",
        help="linear few-shot accuracy of a pre-trained backbone on a data set, without training it",
        description="The ViT paper's linear few-shot evaluation: frozen features of the train and test splits; per "
        "shot count and draw, that many training images per class, a closed-form regularised least-squares fit onto "
        "{-1, 1} targets (big_vision's). Prints the mean and standard deviation of the accuracy over the draws.",
    )
    add_backbone_arguments(parser, splits=True)
    parser.add_argument("--shots", default="1,5,10,25", help="training images per class, comma-separated (default: 1,5,10,25)")
    parser.add_argument("--draws", type=int, default=5, help="random draws per shot count (default: 5)")
    parser.add_argument("--l2-reg", type=float, default=2.0**10, help="the ridge regulariser (default: 1024, big_vision's)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from keras_vit.transfer import fewshot

    shots = _parse_shots(args.shots)
    shots = fewshot.check_fewshot_arguments(shots, args.draws, args.l2_reg, args.seed, name=option_flag)
    train, test, train_features, test_features = split_features(args, lambda features, known: fewshot.check_shots(
        shots, features.labels, range(len(features.class_names)), features.class_names, name=option_flag, **known))
    result = fewshot.linear_fewshot(train_features.features, train_features.labels, test_features.features,
                                    test_features.labels, shots=shots, draws=args.draws, l2_reg=args.l2_reg,
                                    seed=args.seed)
    print(f"linear few-shot accuracy, {args.draws} draw{'s' if args.draws > 1 else ''}, l2_reg {args.l2_reg:g}: "
          f"{len(train_features.labels):,} train images ({train.description}), {len(test_features.labels):,} test "
          f"images ({test.description})")
    print("shots  accuracy")
    for count, scores in result.items():
        print(f"{count:5d}  {scores['mean']:.4f} +- {scores['std']:.4f}")
    print_skipped(train.corrupt_files() + test.corrupt_files())
    return 0


def _parse_shots(text):
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(
            f"Invalid --shots={text!r}. Expected integers >= 1 separated by commas, e.g. 1,5,10,25."
        ) from None
