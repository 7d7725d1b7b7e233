"""`keras-vit predict MODEL IMAGE...`: the top-k classes of image files by a .keras, SavedModel, .tflite or .onnx model."""

from __future__ import annotations

import os
import sys


def add(subparsers):
    from keras_vit import choices

    parser = subparsers.add_parser(
        "predict",
        help="print the top-k classes of images with a .keras, SavedModel, .tflite or .onnx model",
        description="Runs a .keras model, a SavedModel folder, a .tflite or an .onnx file on image files.",
    )
    parser.add_argument("model", help=".keras file, SavedModel folder (or TF Serving base folder), .tflite or .onnx file")
    parser.add_argument("images", nargs="+", metavar="IMAGE", help="JPEG/PNG/GIF/BMP/WebP files")
    parser.add_argument("--top-k", type=int, default=5, help="classes to print per image (default: 5)")
    parser.add_argument("--labels", metavar="FILE", help="class names, one per line (default: stored, or <model>.labels.txt / labels.txt beside the model)")
    parser.add_argument("--scaling", help="pixel scaling for a .keras model without preprocessing (an exported "
                        "file carries its own)")
    parser.add_argument("--max-num-patches", type=int, help="patch budget each image is resized to fit, at its own "
                        "aspect, for a NaFlex .keras model (SigLIP 2; default: 256)")
    parser.add_argument("--precision", choices=("auto", *choices.EXPORT_PRECISIONS), default="auto",
                        help="what the model computes in; auto (default): a .keras model in bfloat16 where it runs "
                        "faster on this machine (keras_vit.machine: on a CPU with native bfloat16 a short timed trial, "
                        "cached; KERAS_VIT_PRECISION_TRIAL=0 turns it off), else float32; an exported file as exported")
    parser.set_defaults(func=run)


def run(args):
    from keras_vit import export
    from keras_vit._validation import check_positive_int
    from keras_vit.data import image_io
    from keras_vit.precision_trial import MEASURED

    check_positive_int("--top-k", args.top_k)
    if args.max_num_patches is not None:
        check_positive_int("--max-num-patches", args.max_num_patches)
    if not os.path.exists(args.model):
        raise FileNotFoundError(f"Model not found: MODEL={args.model!r}.")
    for image in args.images:  # before the model loads: these need none
        if os.path.isdir(image):
            raise ValueError(f"Invalid IMAGE={image!r}: it is a folder. Expected image files (JPEG, PNG, GIF, BMP "
                             "or WebP).")
        if not os.path.isfile(image):
            raise FileNotFoundError(f"Image file not found: IMAGE={image!r}.")
    # Before the model loads, which may take long: a broken file is named at once.
    image_io.check_decodable(args.images, image_io.read_files(args.images))
    class_names = export.read_labels(args.labels) if args.labels else None
    argument_names = {"path": "MODEL", "scaling": "--scaling", "precision": "--precision",
                      "class_names": f"--labels={args.labels!r}"}
    predictor = export.load_predictor(args.model, class_names=class_names, scaling=args.scaling,
                                      precision=args.precision, max_num_patches=args.max_num_patches,
                                      argument_names=argument_names)
    if predictor.precision != "float32" or predictor.precision_reason.startswith(MEASURED):
        print(f"precision {predictor.precision} ({predictor.precision_reason})", file=sys.stderr)
    probabilities = predictor.predict_files(args.images)
    for image, best in zip(args.images, predictor.top_k(probabilities, args.top_k)):
        print(image)
        for index, label, probability in best:
            name = label if label is not None else f"class {index}"
            print(f"  {probability:.4f}  {index:>4}  {name}")
    return 0
