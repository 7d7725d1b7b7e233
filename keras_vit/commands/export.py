"""`keras-vit export MODEL`: a .keras classifier to a TF Serving SavedModel, a TFLite file and/or an ONNX file."""

from __future__ import annotations

import os
import sys



def add(subparsers):
    from keras_vit import choices

    parser = subparsers.add_parser(
        "export",
        help="export a .keras model to a TF Serving SavedModel and/or a TFLite file",
        description=(
            "Exports a .keras classifier. Exported models take [0, 255] pixels; a model built "
            "without preprocessing= needs --scaling. Class names come from --labels or from "
            "labels.txt beside the model."
        ),
    )
    parser.add_argument("model", help="the .keras model file")
    parser.add_argument("--saved-model", metavar="DIR", help="TF Serving base folder; writes DIR/<version>/")
    parser.add_argument("--version", type=int, help="SavedModel version (default: the next integer)")
    parser.add_argument("--tflite", metavar="FILE", help="TFLite file to write (.tflite)")
    parser.add_argument("--onnx", metavar="FILE", help="ONNX file to write (.onnx; needs pip install 'keras_vit[onnx]')")
    parser.add_argument(
        "--quantization", default="none", help="TFLite quantization: none, float16, dynamic or int8 (default: none)"
    )
    parser.add_argument(
        "--representative-data",
        metavar="DATA",
        help="int8 calibration images in [0, 255]: a .npy file, a .npz file (its x_train or first "
        "array), a folder of images, or 'fashion-mnist-sample' (the shipped sample's training images)",
    )
    parser.add_argument("--calibration-samples", type=int, default=200, help="images used for int8 calibration")
    parser.add_argument(
        "--int8-full",
        action="store_true",
        help="int8 with every op in int8, LayerNorm and residual adds too (integer-only accelerators; less accurate)",
    )
    parser.add_argument("--approximate-gelu", action="store_true", help="TFLite with the tanh GELU (same weights)")
    parser.add_argument("--labels", metavar="FILE", help="class names, one per line (default: <model>.labels.txt or labels.txt beside the model)")
    parser.add_argument(
        "--scaling", help="pixel scaling for a model without preprocessing: unit, symmetric, imagenet or none"
    )
    parser.add_argument("--top-k", type=int, default=5, help="top-k outputs of the SavedModel (default: 5)")
    parser.add_argument("--jit-compile", action="store_true", help="compile the SavedModel's model part with XLA "
                        "(about 1.5x faster on CPU; a CPU TF Serving then needs --xla_cpu_compilation_enabled=true)")
    parser.add_argument("--precision", choices=("auto", *choices.EXPORT_PRECISIONS), default="float32",
                        help="what the SavedModel computes in: float32 (default) or bfloat16 (on CPUs with AMX "
                        "TF Serving runs it on oneDNN's bfloat16 kernels; TFLite and ONNX stay float32); auto: "
                        "the faster on this machine, as keras-vit predict picks it (a timed trial on a CPU with "
                        "native bfloat16)")
    parser.add_argument("--max-num-patches", type=int, help="a NaFlex model's patch budget: the length of the "
                        "TFLite/ONNX patch sequence, what the SavedModel resizes each image to fit (default: 256)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing version folder or file")
    parser.set_defaults(func=run)


def run(args):
    import keras

    from keras_vit import _validation, export
    from keras_vit.export.calibration import calibration_images
    from keras_vit.naflex import is_naflex

    if not args.saved_model and not args.tflite and not args.onnx:
        raise ValueError("Nothing to export: pass --saved-model DIR, --tflite FILE and/or --onnx FILE.")
    if args.quantization not in export.QUANTIZATIONS:
        raise ValueError(f"Invalid --quantization {args.quantization!r}. Expected one of {list(export.QUANTIZATIONS)}.")
    # Named by their flags here: the library's own checks name its arguments (calibration_samples).
    for flag, value in (("--calibration-samples", args.calibration_samples), ("--top-k", args.top_k),
                        ("--version", args.version)):
        if value is not None:
            _validation.check_positive_int(flag, value)
    if not os.path.isfile(args.model):
        raise FileNotFoundError(f"Model not found: {args.model!r}.")
    if args.quantization != "none" and not args.tflite:
        raise ValueError(f"--quantization {args.quantization} applies to the TFLite file; pass --tflite FILE too.")
    if args.precision != "float32" and not args.saved_model:
        raise ValueError(f"--precision {args.precision} applies to the SavedModel; pass --saved-model DIR too "
                         "(TFLite and ONNX files compute in float32 or their --quantization).")
    if args.quantization == "int8" and not args.representative_data:
        raise ValueError("--quantization int8 needs --representative-data.")
    if args.max_num_patches is not None:
        _validation.check_positive_int("--max-num-patches", args.max_num_patches)
    # Before the first export writes anything (the SavedModel's version folder is checked by its writer).
    _validation.check_new_files([path for path in (args.tflite, args.onnx) if path], args.overwrite)
    class_names = export.read_labels(args.labels) if args.labels else export.labels_beside(args.model)
    model = keras.saving.load_model(args.model)
    if is_naflex(model):
        return _export_naflex(args, export, model)
    if args.max_num_patches is not None:
        raise ValueError("--max-num-patches applies to a NaFlex model (naflex=True); this one takes images of one size.")
    if args.precision == "auto":
        args.precision, reason = export.predict.saved_model_precision(model)
        print(f"precision {args.precision} ({reason})", file=sys.stderr)
    # Everything the exports read is checked before the first one writes anything.
    data = None
    if args.quantization == "int8":
        data = calibration_images(args.representative_data, model.inputs[0].shape[1:], argument="--representative-data")
    with export.shared_process():
        _export(args, export, model, class_names, data)
    return 0


def _export_naflex(args, export, model):
    """A NaFlex model: TFLite and ONNX files on one padded patch sequence, a SavedModel of encoded images."""
    unsupported = [flag for flag, used in (("--quantization " + args.quantization, args.quantization != "none"),
                                           ("--approximate-gelu", args.approximate_gelu),
                                           ("--jit-compile", args.jit_compile),
                                           ("--precision " + args.precision, args.precision != "float32"),
                                           ("--labels", args.labels)) if used]
    if unsupported:
        raise ValueError(f"{', '.join(unsupported)}: not for a NaFlex model (naflex=True), whose files compute in "
                         "float32 and return the model's own output.")
    _write_naflex(args, export, model)
    return 0


def _write_naflex(args, export, model):
    if args.saved_model:
        path = export.naflex_saved_model(model, args.saved_model, args.version, max_num_patches=args.max_num_patches,
                                         scaling=args.scaling or "auto", overwrite=args.overwrite)
        print(f"SavedModel: {path} (signature serving_default: image_bytes of any aspect -> embeddings)")
    if args.tflite:
        result = export.naflex_tflite(model, args.tflite, args.max_num_patches, overwrite=args.overwrite)
        print(f"TFLite (NaFlex patch sequence -> {result.output_name}): {result.path}, {result.size_bytes:,} bytes")
    if args.onnx:
        try:
            result = export.naflex_onnx(model, args.onnx, args.max_num_patches, overwrite=args.overwrite)
        except ImportError as error:
            raise ValueError(str(error)) from None
        print(f"ONNX (opset {result.opset}, NaFlex patch sequence): {result.path}, {result.size_bytes:,} bytes")


def _export(args, export, model, class_names, data):
    from keras_vit.export._common import failure_reported

    def reported(fmt, target, flags):
        retry = f"keras-vit export {args.model} {flags}" + (" --overwrite" if args.overwrite else "")
        return failure_reported(fmt, args.model, retry, os.path.splitext(os.path.abspath(target))[0] + ".export.log")

    if args.saved_model:
        with reported("SavedModel", args.saved_model, f"--saved-model {args.saved_model}"):
            path = export.saved_model(
                model,
                args.saved_model,
                args.version,
                class_names=class_names,
                scaling=args.scaling,
                top_k=args.top_k,
                overwrite=args.overwrite,
                jit_compile=args.jit_compile,
                precision=args.precision,
            )
        print(f"SavedModel: {path} (signatures serving_default, serve_bytes{', XLA' if args.jit_compile else ''}, "
              f"computes in {args.precision})")
    if args.tflite:
        flags = f"--tflite {args.tflite} --quantization {args.quantization}" + (
            f" --representative-data {args.representative_data}" if args.representative_data else "")
        with reported("TFLite", args.tflite, flags):
            result = export.tflite(
                model,
                args.tflite,
                args.quantization,
                representative_data=data,
                calibration_samples=args.calibration_samples,
                scaling=args.scaling,
                class_names=class_names,
                approximate_gelu=args.approximate_gelu,
                float_ops=() if args.int8_full else export.INT8_FLOAT_OPS,
                overwrite=args.overwrite,
            )
        ops = ", ".join(f"{name} x{count}" for name, count in result.ops.items())
        print(f"TFLite ({result.quantization}): {result.path}, {result.size_bytes:,} bytes")
        print(f"ops: {ops}")
    if args.onnx:
        try:
            with reported("ONNX", args.onnx, f"--onnx {args.onnx}"):
                result = export.onnx(model, args.onnx, scaling=args.scaling, class_names=class_names,
                                     overwrite=args.overwrite)
        except ImportError as error:  # the onnx extra is not installed: say which command installs it
            raise ValueError(str(error)) from None
        print(f"ONNX (opset {result.opset}): {result.path}, {result.size_bytes:,} bytes")
