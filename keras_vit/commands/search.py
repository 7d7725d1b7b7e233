"""`keras-vit search EMBEDDINGS --text "a red car" --weights SPEC`: the images of an `embed` file ranked by a sentence."""

from __future__ import annotations

import os
import zipfile

import numpy as np


def add(subparsers) -> None:
    parser = subparsers.add_parser(
        "search",
        help="rank the images of a keras-vit embed file by a sentence, with a CLIP or SigLIP checkpoint's text tower",
        description="Embeds --text with the text tower of --weights (the image-text checkpoint that `keras-vit embed "
        "SPEC` embedded the images with) and prints the --top-k images of EMBEDDINGS by cosine similarity: rank, "
        "similarity and file (or index, for data without files).",
    )
    parser.add_argument("embeddings", metavar="EMBEDDINGS", help="an .npz written by keras-vit embed")
    parser.add_argument("--text", required=True, help="the sentence to search for, e.g. 'a red car'")
    parser.add_argument("--weights", required=True, metavar="SPEC",
                        help="the CLIP, SigLIP or SigLIP 2 two-tower folder (or hf-hub:ORG/NAME) the images were embedded with")
    parser.add_argument("--top-k", type=int, default=5, help="images to print (default: 5)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from keras_vit._validation import check_positive_int

    check_positive_int("--top-k", args.top_k)
    if not args.text.strip():
        raise ValueError(f"Invalid --text={args.text!r}: expected a sentence.")
    images, files = _read(args.embeddings)
    from keras_vit.commands.backbone import spelled
    from keras_vit.text.image_text_model import ImageTextModel

    with spelled("weights", "--weights", args.weights):
        pair = ImageTextModel(weights=args.weights)
    text = pair.encode_texts([args.text])[0]
    if text.shape[0] != images.shape[1]:
        raise ValueError(f"Invalid EMBEDDINGS={args.embeddings!r}: its embeddings have {images.shape[1]} values, the "
                         f"text embeddings of --weights={args.weights!r} {text.shape[0]}; embed the images with the same "
                         f"checkpoint (keras-vit embed {args.weights} --dataset DIR).")
    scores = ranked_similarity(images, text)
    for rank, index in enumerate(np.argsort(-scores, kind="stable")[: args.top_k], start=1):
        print(f"{rank:>3}  {scores[index]:.4f}  {files[index] if files is not None else f'image {index}'}")
    return 0


def ranked_similarity(images, text):
    """Cosine similarity of each image embedding (n, d) with one text embedding (d,).

    Example:

    >>> ranked_similarity(np.array([[1.0, 0.0], [1.0, 1.0]]), np.array([2.0, 0.0])).round(3).tolist()
    [1.0, 0.707]
    """
    images = np.asarray(images, "float64")
    images = images / np.linalg.norm(images, axis=-1, keepdims=True)
    text = np.asarray(text, "float64")
    return images @ (text / np.linalg.norm(text))


def _read(path):
    """(embeddings (n, d), files or None) of an `embed` file; ValueError naming what is wrong."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Embeddings file not found: {path!r}.")
    try:
        with np.load(path, allow_pickle=False) as data:
            fields = {key: data[key] for key in data.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as error:  # a cut-off .npz is a bad zip
        raise ValueError(f"Invalid EMBEDDINGS={path!r}: not an .npz file keras-vit embed writes ({error}).") from None
    embeddings = fields.get("embeddings")
    if embeddings is None or embeddings.ndim != 2 or len(embeddings) == 0 or "texts" in fields:
        what = "text embeddings (embed --texts)" if "texts" in fields else "no image embeddings (n, d)"
        raise ValueError(f"Invalid EMBEDDINGS={path!r}: it holds {what}; expected the .npz of keras-vit embed SPEC "
                         "--dataset DIR.")
    files = fields.get("files")
    return embeddings, (list(files) if files is not None and len(files) == len(embeddings) else None)
