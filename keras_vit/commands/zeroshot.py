"""`keras-vit zeroshot --weights SPEC --labels "cat,dog" IMAGE...`: classes of images from label names, no training."""

from __future__ import annotations

import os
import sys


def add(subparsers) -> None:
    parser = subparsers.add_parser(
        "zeroshot",
        help="classify images by label names with a CLIP, SigLIP or SigLIP 2 checkpoint (no training)",
        description="Builds the zero-shot classifier of an image-text checkpoint (keras_vit.zeroshot_classifier: the "
        "image tower and a head folded from the labels' text embeddings; softmax for CLIP, sigmoid for SigLIP) and "
        "prints the top classes of each image, or with --dataset scores a folder of class sub-folders with the "
        "folder names as labels and prints the accuracy. --save writes the classifier as a .keras model with its labels "
        "(keras-vit export takes it).",
    )
    parser.add_argument("images", nargs="*", metavar="IMAGE", help="JPEG/PNG/GIF/BMP/WebP files")
    parser.add_argument("--weights", required=True, metavar="SPEC",
                        help="a CLIP, SigLIP or SigLIP 2 two-tower folder saved by transformers, or hf-hub:ORG/NAME")
    parser.add_argument("--labels", metavar="NAMES", help="comma-separated label names, e.g. 'cat,dog,airplane'")
    parser.add_argument("--labels-file", metavar="FILE", help="label names, one per line")
    parser.add_argument("--dataset", metavar="DIR", help="a folder of class sub-folders: its folder names are the labels")
    parser.add_argument("--templates", default=None, metavar="NAME|FILE",
                        help="'imagenet' (open_clip's 80 ImageNet prompts) or a file of prompts with {} for the label, "
                        "one per line (default: 'This is a photo of {}.')")
    parser.add_argument("--top-k", type=int, default=5, help="classes to print per image (default: 5)")
    parser.add_argument("--batch-size", type=int, default=32, help="images per forward pass (default: 32)")
    parser.add_argument("--save", metavar="FILE.keras", help="also write the classifier as a .keras model")
    parser.add_argument("--overwrite", action="store_true", help="replace --save if it exists")
    parser.set_defaults(func=run)


def run(args) -> int:
    from keras_vit._validation import check_new_files, check_positive_int

    check_positive_int("--top-k", args.top_k)
    check_positive_int("--batch-size", args.batch_size)
    if args.save is not None:
        if not args.save.endswith(".keras"):
            raise ValueError(f"Invalid --save={args.save!r}. Expected a file name ending in .keras.")
        check_new_files([args.save], args.overwrite)
    given = [flag for flag, value in (("--labels", args.labels), ("--labels-file", args.labels_file),
                                      ("--dataset", args.dataset)) if value is not None]
    if len(given) != 1:
        raise ValueError(f"Pass one of --labels, --labels-file or --dataset (the label names); got "
                         f"{' and '.join(given) if given else 'none'}.")
    if args.dataset is not None and args.images:
        raise ValueError(f"Pass image files or --dataset={args.dataset!r}, not both.")
    if args.dataset is None and not args.images:
        raise ValueError("Pass image files to classify (IMAGE...), or --dataset DIR.")
    files, truth, labels = _labelled_folder(args.dataset) if args.dataset else (args.images, None, _labels(args))
    for path in files:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Image file not found: {path!r}.")
    templates = _templates(args.templates)
    from keras_vit.export.predict import model_predictor
    from keras_vit.text.zeroshot import check_class_names, zeroshot_classifier

    check_class_names(labels)  # before the checkpoint loads

    model = zeroshot_classifier(args.weights, labels, templates)
    print(f"keras-vit zeroshot: {args.weights}: {len(labels)} labels, "
          f"{1 if templates is None else len(templates) if not isinstance(templates, str) else templates} template(s), "
          f"{model.layers[-1].activation.__name__} scores", file=sys.stderr)
    if args.save is not None:
        from keras_vit._atomic import atomic_file

        path = os.path.abspath(args.save)
        with atomic_file(path) as tmp:  # a name ending in .keras, as Keras saves
            model.save(tmp)
        print(f"{path}: the zero-shot classifier of {len(labels)} labels")
    predictor = model_predictor(model)
    correct = 0
    for start in range(0, len(files), args.batch_size):
        chunk = files[start : start + args.batch_size]
        probabilities = predictor.predict_files(chunk)
        for offset, (image, best) in enumerate(zip(chunk, predictor.top_k(probabilities, args.top_k))):
            if truth is not None:
                correct += int(best[0][0] == truth[start + offset])
                continue
            print(image)
            for index, label, probability in best:
                print(f"  {probability:.4f}  {label}")
    if truth is not None:
        print(f"top-1 accuracy {100.0 * correct / len(files):.2f}% ({correct}/{len(files)} images of {len(labels)} "
              f"classes in {args.dataset})")
    return 0


def _labels(args):
    if args.labels is not None:
        return [label.strip() for label in args.labels.split(",")]
    from keras_vit.export import read_labels

    return list(read_labels(args.labels_file))


def _templates(value):
    if value is None or not os.path.exists(value):
        return value  # None, or a name zeroshot_classifier checks
    with open(value, encoding="utf-8") as file:
        templates = [line.rstrip("\r\n") for line in file if line.strip()]
    if not templates:
        raise ValueError(f"Invalid --templates={value!r}: the file holds no prompt; expected one per line with {{}}.")
    return templates


def _labelled_folder(directory):
    """(files, label index of each, label names) of a folder of class sub-folders, names sorted."""
    from keras_vit.data.sources import IMAGE_EXTENSIONS

    if not os.path.isdir(directory):
        raise FileNotFoundError(f"Image folder not found: --dataset={directory!r}.")
    names = sorted(entry.name for entry in os.scandir(directory) if entry.is_dir() and not entry.name.startswith("."))
    files, truth = [], []
    for index, name in enumerate(names):
        found = sorted(entry.path for entry in os.scandir(os.path.join(directory, name))
                       if entry.is_file() and entry.name.lower().endswith(IMAGE_EXTENSIONS))
        files += found
        truth += [index] * len(found)
    if len(names) < 2 or not files:
        raise ValueError(f"Invalid --dataset={directory!r}: expected two or more class sub-folders of images "
                         f"(found {len(names)} sub-folders, {len(files)} images).")
    return files, truth, names
