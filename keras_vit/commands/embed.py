"""`keras-vit embed SPEC`: a backbone's pooled features of a data set split, written to an .npz for retrieval."""

from __future__ import annotations

import os

import numpy as np

from keras_vit.commands._shared import print_skipped, text_lines
from keras_vit.commands.backbone import add_backbone_arguments, load_backbone, spelled

# The options that read or embed images, which `--texts` has no use for.
IMAGE_OPTIONS = ("--dataset", "--split", "--max-examples", "--data-dir", "--download", "--on-corrupt", "--image-size",
                 "--scaling")


def add(subparsers) -> None:
    parser = subparsers.add_parser(
        "embed",
        help="write the embeddings of a data set's images by a pre-trained backbone to an .npz file",
        description="Runs a backbone once over a data set split (no training, no augmentation) and writes its pooled "
        "features, for retrieval: an .npz with embeddings (N, D) float32, labels (N,), files (N,) (empty for data "
        "without files) and class_names. Prints the file and the shape.",
    )
    add_backbone_arguments(parser, splits=False)
    parser.add_argument("--split", default="train", help="split to embed; 'all': every image of a folder of class "
                        "sub-folders, its held-out share too, e.g. for keras-vit search (default: train)")
    parser.add_argument("--max-examples", type=int, help="embed only the first N examples (default: all)")
    parser.add_argument("--out", default="embeddings.npz", help="the .npz file to write (default: embeddings.npz)")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    parser.add_argument("--texts", metavar="FILE", help="embed the lines of FILE with SPEC's text tower instead (a CLIP, "
                        "SigLIP or SigLIP 2 two-tower folder): an .npz with embeddings (N, D) float32, L2-normalised "
                        "(transformers' text_embeds), and texts (N,); keras-vit search ranks images by a sentence")
    # What --texts leaves unused, with its default: given with --texts it is refused, not ignored.
    parser.set_defaults(func=run, image_options={flag: parser.get_default(_dest(flag)) for flag in IMAGE_OPTIONS})


def run(args) -> int:
    from keras_vit import _validation

    _validation.check_positive_int("--batch-size", args.batch_size)
    if args.max_examples is not None:
        _validation.check_positive_int("--max-examples", args.max_examples)
    if not args.out.endswith(".npz") or os.path.isdir(args.out):
        raise ValueError(f"Invalid --out={args.out!r}. Expected a file name ending in .npz.")
    _validation.check_writable_folder("--out", os.path.dirname(os.path.abspath(args.out)))
    _validation.check_new_files([args.out], args.overwrite)
    if args.texts is not None:
        return _embed_texts(args)
    source = _source(args).take(args.max_examples)
    model, info = load_backbone(args)
    from keras_vit._atomic import atomic_file
    from keras_vit.transfer import extract_features

    result = extract_features(model, source, batch_size=args.batch_size)
    path = os.path.abspath(args.out)
    with atomic_file(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, embeddings=result.features, labels=result.labels, files=np.array(result.files, dtype=str),
                     class_names=np.array(result.class_names, dtype=str))
    print(f"{path}: embeddings {result.features.shape[0]}x{result.features.shape[1]} of {source.description}")
    print_skipped(source.corrupt_files())
    return 0


def _source(args):
    """The `Source` of --dataset and --split; 'all' of a folder of class sub-folders is every image in it."""
    from keras_vit.data.sources import from_folder, has_idx_files, load_source, split_dirs

    if args.split == "all" and os.path.isdir(args.dataset) and not has_idx_files(args.dataset):
        dirs = split_dirs(args.dataset)
        if not dirs:
            return from_folder(args.dataset, on_corrupt=args.on_corrupt)
        if "all" not in dirs:
            raise ValueError(f"Invalid --split='all' for --dataset={args.dataset!r}: 'all' is every image of a folder "
                             "of class sub-folders, and this one has split sub-folders; expected one of "
                             f"{', '.join(map(repr, dirs))}.")
    return load_source(args.dataset, args.split, args.data_dir, args.on_corrupt, args.download)


def _dest(flag):
    """The attribute argparse keeps `flag` in."""
    return flag[2:].replace("-", "_")


def _embed_texts(args) -> int:
    """`embed --texts FILE`: each non-empty line of FILE by the text tower of the image-text checkpoint SPEC."""
    given = {flag: getattr(args, _dest(flag)) for flag, default in args.image_options.items()
             if getattr(args, _dest(flag)) != default}
    if given:
        one = len(given) == 1
        listed = ", ".join(flag if value is True else f"{flag}={value!r}" for flag, value in given.items())
        raise ValueError(f"Invalid {listed} with --texts: {'an option' if one else 'options'} of the images to embed, "
                         f"which --texts (the lines of a file) would ignore; leave {'it' if one else 'them'} out.")
    if not os.path.isfile(args.texts):
        raise FileNotFoundError(f"Texts file not found: --texts={args.texts!r}.")
    texts = text_lines("--texts", args.texts, "a text file of one sentence per line")
    from keras_vit._atomic import atomic_file
    from keras_vit.text.image_text_model import ImageTextModel

    with spelled("weights", "SPEC", args.spec):
        pair = ImageTextModel(weights=args.spec)
    embeddings = pair.encode_texts(texts, batch_size=args.batch_size)
    path = os.path.abspath(args.out)
    with atomic_file(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, embeddings=embeddings, texts=np.array(texts, dtype=str))
    print(f"{path}: text embeddings {embeddings.shape[0]}x{embeddings.shape[1]} of {args.texts}")
    return 0
