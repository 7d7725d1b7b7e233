"""`keras-vit embed SPEC`: a backbone's pooled features of a data set split, written to an .npz for retrieval."""

from __future__ import annotations

import os

import numpy as np

from keras_vit.commands._shared import print_skipped
from keras_vit.commands.backbone import add_backbone_arguments, load_backbone


def add(subparsers) -> None:
    parser = subparsers.add_parser(
        "embed",
        help="write the embeddings of a data set's images by a pre-trained backbone to an .npz file",
        description="Runs a backbone once over a data set split (no training, no augmentation) and writes its pooled "
        "features, for retrieval: an .npz with embeddings (N, D) float32, labels (N,), files (N,) (empty for data "
        "without files) and class_names. Prints the file and the shape.",
    )
    add_backbone_arguments(parser, splits=False)
    parser.add_argument("--split", default="train", help="split to embed (default: train)")
    parser.add_argument("--max-examples", type=int, help="embed only the first N examples (default: all)")
    parser.add_argument("--out", default="embeddings.npz", help="the .npz file to write (default: embeddings.npz)")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    parser.add_argument("--texts", metavar="FILE", help="embed the lines of FILE with SPEC's text tower instead (a CLIP, "
                        "SigLIP or SigLIP 2 two-tower folder): an .npz with embeddings (N, D) float32, L2-normalised "
                        "(transformers' text_embeds), and texts (N,); keras-vit search ranks images by a sentence")
    parser.set_defaults(func=run)


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
    from keras_vit.data.sources import load_source

    source = load_source(args.dataset, args.split, args.data_dir, args.on_corrupt, args.download).take(args.max_examples)
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


def _embed_texts(args) -> int:
    """`embed --texts FILE`: each non-empty line of FILE by the text tower of the image-text checkpoint SPEC."""
    if not os.path.isfile(args.texts):
        raise FileNotFoundError(f"Texts file not found: --texts={args.texts!r}.")
    with open(args.texts, encoding="utf-8") as f:
        texts = [line.rstrip("\r\n") for line in f if line.strip()]
    if not texts:
        raise ValueError(f"Invalid --texts={args.texts!r}: the file holds no text; expected one per line.")
    from keras_vit._atomic import atomic_file
    from keras_vit.text.image_text_model import ImageTextModel

    embeddings = ImageTextModel(weights=args.spec).encode_texts(texts, batch_size=args.batch_size)
    path = os.path.abspath(args.out)
    with atomic_file(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, embeddings=embeddings, texts=np.array(texts, dtype=str))
    print(f"{path}: text embeddings {embeddings.shape[0]}x{embeddings.shape[1]} of {args.texts}")
    return 0
