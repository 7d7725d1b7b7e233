"""`keras-vit zeroshot --weights SPEC --labels "cat,dog" IMAGE...`: classes of images from label names, no training."""

from __future__ import annotations

import os
import sys

from keras_vit.commands._shared import bad_byte, print_skipped, text_lines


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
    parser.add_argument("--templates", default=None, metavar="NAME|PROMPT|FILE",
                        help="'imagenet' (open_clip's 80 ImageNet prompts), one prompt with {} for the label (e.g. "
                        "'a photo of {}.'), or a file of such prompts, one per line; a file named like a built-in set "
                        "is passed with its folder, e.g. ./imagenet (default: 'This is a photo of {}.')")
    parser.add_argument("--top-k", type=int, default=5, help="classes to print per image (default: 5)")
    parser.add_argument("--batch-size", type=int, default=32, help="images per forward pass (default: 32)")
    parser.add_argument("--on-corrupt", choices=("skip", "error"), default="skip",
                        help="corrupt image files: skip them or stop (default: skip)")
    parser.add_argument("--save", metavar="FILE.keras",
                        help="also write the classifier as a .keras model, once every image is classified")
    parser.add_argument("--overwrite", action="store_true", help="replace --save if it exists")
    parser.set_defaults(func=run)


def run(args) -> int:
    from keras_vit._validation import check_new_files, check_positive_int, check_writable_folder

    check_positive_int("--top-k", args.top_k)
    check_positive_int("--batch-size", args.batch_size)
    if args.save is not None:
        if not args.save.endswith(".keras") or os.path.isdir(args.save):
            raise ValueError(f"Invalid --save={args.save!r}{': it is a folder' if os.path.isdir(args.save) else ''}. "
                             "Expected a file name ending in .keras.")
        check_writable_folder("--save", os.path.dirname(os.path.abspath(args.save)))
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
    predictor = model_predictor(model)
    truth = None if truth is None else dict(zip(files, truth))  # a folder's files are distinct
    correct = scored = 0
    skipped = []
    for start in range(0, len(files), args.batch_size):
        chunk, probabilities = _predict(predictor, files[start : start + args.batch_size], args.on_corrupt, skipped)
        if not chunk:
            continue
        for image, best in zip(chunk, predictor.top_k(probabilities, args.top_k)):
            scored += 1
            if truth is not None:
                correct += int(best[0][0] == truth[image])
                continue
            print(image)
            for index, label, probability in best:
                print(f"  {probability:.4f}  {label}")
    if not scored:
        raise ValueError(f"No image could be classified: the {len(files)} image file(s) "
                         f"{'of --dataset=' + repr(args.dataset) + ' ' if truth is not None else ''}are all corrupt "
                         f"({', '.join(map(repr, skipped[:3]))}{', ...' if len(skipped) > 3 else ''}).")
    if truth is not None:
        left_out = f"; {len(skipped)} corrupt file(s) skipped" if skipped else ""
        print(f"top-1 accuracy {100.0 * correct / scored:.2f}% ({correct}/{scored} images of {len(labels)} "
              f"classes in {args.dataset}{left_out})")
    if args.save is not None:  # only now: a failure above leaves no file behind, and the user's old one in place
        from keras_vit._atomic import atomic_file

        path = os.path.abspath(args.save)
        with atomic_file(path) as tmp:  # a name ending in .keras, as Keras saves
            model.save(tmp)
        print(f"{path}: the zero-shot classifier of {len(labels)} labels")
    print_skipped(skipped)
    return 0


def _predict(predictor, chunk, on_corrupt, skipped):
    """(files, probabilities) of the image files `chunk`, the corrupt ones appended to `skipped` or refused by name."""
    chunk = list(chunk)
    while chunk:
        try:
            return chunk, predictor.predict_files(chunk)
        except ValueError:  # a file whose body does not decode: skipped, or named, and the rest run again
            from keras_vit.data import image_io

            bad = [path for path, _ in image_io.undecodable(chunk, image_io.read_files(chunk))]
            if not bad:
                raise
        for path in bad:
            _corrupt(path, on_corrupt, skipped)
            chunk.remove(path)
    return [], None


def _corrupt(path, on_corrupt, skipped):
    """Notes the corrupt image file `path` in `skipped`, or refuses it by name under --on-corrupt error."""
    if on_corrupt == "error":
        raise ValueError(f"Corrupt image file {path!r} (--on-corrupt error): it does not decode. Remove or replace "
                         "it, or pass --on-corrupt skip to leave such files out.")
    skipped.append(path)


def _labels(args):
    if args.labels is not None:
        return [label.strip() for label in args.labels.split(",")]
    from keras_vit.export import read_labels

    if os.path.isdir(args.labels_file):
        raise ValueError(f"Invalid --labels-file={args.labels_file!r}: it is a folder. Expected a text file of label "
                         "names, one per line.")
    try:
        return list(read_labels(args.labels_file))
    except UnicodeDecodeError as error:
        raise ValueError(f"Invalid --labels-file={args.labels_file!r}: not UTF-8 text ({bad_byte(error)}). Expected a "
                         "text file of label names, one per line.") from None


def _templates(value):
    """None, a built-in set's name, one prompt, or the prompts of a file; ValueError naming --templates."""
    from keras_vit.text.zeroshot import TEMPLATE_SETS

    if value is None:
        return None
    is_file = os.path.isfile(value)
    if value in TEMPLATE_SETS:
        if is_file:  # read either way, one would surprise: the user says which
            raise ValueError(f"Invalid --templates={value!r}: it names both the built-in prompt set {value!r} and a "
                             f"file in this folder. Pass the file with its folder (--templates "
                             f"{os.path.join(os.curdir, value)}), or run elsewhere for the built-in set.")
        return value
    if not is_file:
        if os.path.isdir(value) or "{}" not in value:
            raise ValueError(f"Invalid --templates={value!r}{': it is a folder' if os.path.isdir(value) else ''}. "
                             f"Expected a built-in prompt set {sorted(TEMPLATE_SETS)}, a prompt with {{}} where the "
                             "label goes, or a file of such prompts, one per line.")
        return value  # one prompt, which zeroshot_classifier checks

    return text_lines("--templates", value, "a file of prompts with {} where the label goes, one per line")


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
