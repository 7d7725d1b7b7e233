"""`keras-vit knn SPEC`: DINO's weighted k-NN accuracy of a frozen backbone."""

from __future__ import annotations

from keras_vit.commands._shared import option_flag, print_skipped
from keras_vit.commands.backbone import add_backbone_arguments, split_features


def add(subparsers) -> None:
    parser = subparsers.add_parser(
        "knn",
        help="weighted k-NN accuracy of a pre-trained backbone on a data set, without training it",
        description="DINO's k-NN evaluation: frozen, L2-normalised features of the train and test splits; each test "
        "image's k most cosine-similar training images vote with weight exp(similarity / temperature). Prints the "
        "top-1 accuracy.",
    )
    add_backbone_arguments(parser, splits=True)
    parser.add_argument("--k", type=int, default=20, help="neighbours that vote (default: 20)")
    parser.add_argument("--temperature", type=float, default=0.07, help="temperature of the votes, > 0 (default: 0.07)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from keras_vit.transfer import fewshot

    fewshot.check_knn_arguments(args.k, args.temperature, name=option_flag)
    train, test, train_features, test_features = split_features(args, lambda features, _: fewshot.check_knn_arguments(
        args.k, args.temperature, num_train=len(features.labels), name=option_flag), k=args.k)
    accuracy = fewshot.knn_accuracy(train_features.features, train_features.labels, test_features.features,
                                    test_features.labels, k=args.k, temperature=args.temperature,
                                    num_classes=train.num_classes)
    print(f"{args.k}-NN accuracy (temperature {args.temperature:g}): {accuracy:.4f} on {len(test_features.labels):,} "
          f"test images ({test.description}), {len(train_features.labels):,} train images ({train.description})")
    print_skipped(train.corrupt_files() + test.corrupt_files())
    return 0
