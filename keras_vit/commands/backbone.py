"""The backbone and data arguments `embed`, `fewshot` and `knn` share, and the loading of both."""

from __future__ import annotations

import contextlib
import os
import sys
import types

import numpy as np

from keras_vit.commands._shared import option_flag, print_skipped


def add_backbone_arguments(parser, *, splits):
    """The arguments `embed`, `fewshot` and `knn` share: the backbone and the data."""
    from keras_vit.configs import SCALINGS

    parser.add_argument("spec", metavar="SPEC", help="the backbone: a checkpoint (.npz, safetensors, Hugging Face or "
                        "timm folder, a name of keras_vit.weights.CHECKPOINTS) or a .keras model saved by keras_vit")
    parser.add_argument("--dataset", default="sample", help="'sample' (the default), a folder, or a tensorflow-datasets name")
    parser.add_argument("--data-dir", help="tensorflow-datasets data_dir (default: tensorflow-datasets' own)")
    parser.add_argument("--download", action="store_true", help="let tensorflow-datasets download missing data")
    parser.add_argument("--on-corrupt", choices=("skip", "error"), default="skip",
                        help="corrupt image files: skip them or stop (default: skip)")
    parser.add_argument("--image-size", type=int, help="input side in pixels (default: the size the checkpoint states, "
                        "else its grid; a learned position embedding is resampled)")
    parser.add_argument("--scaling", choices=tuple(SCALINGS), help="pixel scaling the backbone was trained with "
                        "(default: the one the checkpoint or .keras model states; refused when it states none)")
    parser.add_argument("--batch-size", type=int, default=64, help="images per forward pass (default: 64)")
    if splits:
        parser.add_argument("--train-split", default="train", help="split the probe is fitted on (default: train)")
        parser.add_argument("--test-split", default="test", help="split it is measured on; a folder of class "
                            "sub-folders has none and uses its held-out share (default: test)")
        parser.add_argument("--validation-split", type=float, help="share of the training split held out (chosen by "
                            "--seed) and measured on when there is no test split (default: 0.1 of a folder of class "
                            "sub-folders)")
        parser.add_argument("--max-train-examples", type=int, help="use only the first N training examples (default: all)")
        parser.add_argument("--max-test-examples", type=int, help="use only the first N test examples (default: all)")
        parser.add_argument("--seed", type=int, default=0, help="seed of the held-out share and of the draws (default: 0)")


def split_features(args, check_train, k=None):
    """(train, test, their `Features`) of `fewshot` and `knn`.

    `check_train(train_features, known)` sees the training labels first: before the model loads
    when a folder's files give them (a namespace of labels and class_names then), and again once
    the features are computed. `known` holds held_out_labels (the labels of the share held out of
    the training images for testing; None when nothing is) and uncut_labels (those of every
    training image when --max-train-examples took the first; None otherwise), keyword arguments
    of `fewshot.check_shots`.
    """
    from keras_vit.transfer import extract_features

    train, test, known, model = probe_data(args, k, check_train)
    train_features = extract_features(model, train, batch_size=args.batch_size)
    # Files that failed to decode may leave a class short: checked before the test pass.
    try:
        check_train(train_features, known)
    except ValueError:
        print_skipped(train.corrupt_files())  # they may be why
        raise
    return train, test, train_features, extract_features(model, test, batch_size=args.batch_size)


def held_out_labels(held_out, train):
    """The labels of the files `held_out` took out of `train`'s folder, from the class sub-folder each lies in
    (nothing is decoded); empty for sources without files."""
    return folder_labels(held_out.files, train)


def folder_labels(files, train):
    """The labels of those of `files` that lie in a class sub-folder of `train`'s folder, from its name."""
    roots = {os.path.dirname(os.path.dirname(path)) for path in train.files}
    index = {name: i for i, name in enumerate(train.class_names)}
    folders = [os.path.split(os.path.dirname(path)) for path in files]
    return [index[name] for root, name in folders if root in roots and name in index]


def probe_data(args, k=None, check_train=None):
    """(train, test, what `check_train` knows besides the training labels, feature model) of `fewshot` and
    `knn`, every argument checked before the model loads (with `check_train`, as `split_features` says)."""
    from keras_vit import _validation

    _validation.check_positive_int("--batch-size", args.batch_size)
    for flag, value in (("--max-train-examples", args.max_train_examples), ("--max-test-examples", args.max_test_examples)):
        if value is not None:
            _validation.check_positive_int(flag, value)
    if args.validation_split is not None:
        _validation.check_fraction("--validation-split", args.validation_split)
    _validation.check_seed("--seed", args.seed)
    from keras_vit.data.sources import load_splits

    all_train, validation, test = load_splits(
        args.dataset, args.train_split, args.test_split or None, args.validation_split, args.seed, args.data_dir,
        args.on_corrupt, args.download)
    held_out = validation if validation is not test else None  # load_splits gives the test split when none is held out
    test = test if test is not None else validation
    if test is None:
        raise ValueError(f"--dataset={args.dataset!r} has no test split: pass --test-split or --validation-split.")
    if all_train.num_classes < 2:
        raise ValueError(
            f"Invalid --dataset={args.dataset!r}: it has {all_train.num_classes} class "
            f"({', '.join(all_train.class_names)}); a probe needs at least 2 classes."
        )
    train, test = all_train.take(args.max_train_examples), test.take(args.max_test_examples)
    cut = train is not all_train and bool(all_train.files)
    known = dict(held_out_labels=None if held_out is None else held_out_labels(held_out, all_train),
                 uncut_labels=np.array(folder_labels(all_train.files, all_train)) if cut else None)
    if k is not None:
        from keras_vit.transfer import fewshot

        fewshot.check_knn_arguments(k, args.temperature, num_train=train.num_examples, name=option_flag)
    if check_train is not None and train.files:
        # A folder's files give the labels without decoding: a class too short fails before the model loads
        # (files that fail to decode later can only make it shorter).
        check_train(types.SimpleNamespace(labels=np.array(folder_labels(train.files, all_train)),
                                          class_names=train.class_names), known)
    model, _ = load_backbone(args)
    return train, test, known, model


def load_backbone(args):
    """The feature model of SPEC, and a line on stderr saying what was loaded and why."""
    from keras_vit._validation import check_positive_int
    from keras_vit.transfer import load_pretrained

    if args.image_size is not None:
        check_positive_int("--image-size", args.image_size)
    with spelled("spec", "SPEC", args.spec):
        model, info = load_pretrained(args.spec, image_size=args.image_size, scaling=args.scaling)
    dropped = f", left out: {', '.join(info.dropped)}" if info.dropped else ""
    print(f"keras-vit {args.command}: {info.source} ({info.kind}): {info.num_features} features; image "
          f"{info.image_size[0]}x{info.image_size[1]} ({info.image_size_reason}); scaling {info.scaling} "
          f"({info.scaling_reason}){dropped}", file=sys.stderr)
    return model, info


@contextlib.contextmanager
def spelled(field, flag, value):
    """Re-raises a user mistake whose message names `field=value` naming `flag=value`, as the user typed it."""
    try:
        yield
    except (ValueError, FileNotFoundError) as error:
        named, message = f"{field}={value!r}", str(error)
        if named not in message:
            raise
        renamed = FileNotFoundError if isinstance(error, FileNotFoundError) else ValueError
        raise renamed(message.replace(named, f"{flag}={value!r}")) from error
