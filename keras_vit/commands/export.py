"""`keras-vit export MODEL`: a .keras classifier to a TF Serving SavedModel, a TFLite file and/or an ONNX file."""

from __future__ import annotations

import os
import sys

from keras_vit import choices  # names only: --help loads no TensorFlow


def add(subparsers):
    parser = subparsers.add_parser(
        "export",
        help="export a .keras model to a TF Serving SavedModel, a TFLite file and/or an ONNX file",
        description=(
            "Exports a .keras classifier. Exported models take [0, 255] pixels; a model built "
            "without preprocessing= needs --scaling. Class names come from --labels or from "
            "labels.txt beside the model. A TFLite file gets its class names written beside it too, as "
            "<stem>.labels.txt: an existing one is replaced only with --overwrite, unless it holds the same names."
        ),
    )
    parser.add_argument("model", help="the .keras model file")
    parser.add_argument("--saved-model", metavar="DIR", help="TF Serving base folder; writes DIR/<version>/")
    parser.add_argument("--version", type=int, help="SavedModel version (default: the next integer; needs --saved-model)")
    parser.add_argument("--tflite", metavar="FILE", help="TFLite file to write (.tflite)")
    parser.add_argument("--onnx", metavar="FILE", help="ONNX file to write (.onnx; needs pip install 'keras_vit[onnx]')")
    parser.add_argument(
        "--quantization", default="none", help="TFLite quantization: none, float16, dynamic or int8 (default: none)"
    )
    parser.add_argument(
        "--representative-data",
        metavar="DATA",
        help="int8 calibration images in [0, 255]: a .npy file, a .npz file (its x_train or first "
        "array), a folder of images, or 'fashion-mnist-sample' (the shipped sample's training images); "
        "needs --quantization int8",
    )
    parser.add_argument("--calibration-samples", type=int,
                        help=f"images used for int8 calibration (default: {choices.EXPORT_CALIBRATION_SAMPLES})")
    parser.add_argument(
        "--int8-full",
        action="store_true",
        help="int8 with every op in int8, LayerNorm and residual adds too (integer-only accelerators; less accurate; "
        "needs --quantization int8)",
    )
    parser.add_argument("--approximate-gelu", action="store_true",
                        help="TFLite with the tanh GELU (same weights; needs --tflite)")
    parser.add_argument("--labels", metavar="FILE", help="class names, one per line (default: <model>.labels.txt or labels.txt beside the model)")
    parser.add_argument(
        "--scaling", help="pixel scaling for a model without preprocessing: unit, symmetric, imagenet or none"
    )
    parser.add_argument("--top-k", type=int, help=f"top-k outputs of the SavedModel (default: {choices.EXPORT_TOP_K}; needs --saved-model)")
    parser.add_argument("--jit-compile", action="store_true", help="compile the SavedModel's model part with XLA "
                        "(about 1.5x faster on CPU; a CPU TF Serving then needs --xla_cpu_compilation_enabled=true; needs --saved-model)")
    parser.add_argument("--precision", choices=("auto", *choices.EXPORT_PRECISIONS), default="float32",
                        help="what the SavedModel computes in: float32 (default) or bfloat16 (on CPUs with AMX "
                        "TF Serving runs it on oneDNN's bfloat16 kernels; TFLite and ONNX stay float32); auto: "
                        "the faster on this machine, as keras-vit predict picks it (a timed trial on a CPU with "
                        "native bfloat16)")
    parser.add_argument("--max-num-patches", type=int, help="a NaFlex model's patch budget: the length of the "
                        "TFLite/ONNX patch sequence, what the SavedModel resizes each image to fit (default: 256)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing version folder or file (a TFLite file's <stem>.labels.txt too)")
    parser.set_defaults(func=run)


def run(args):
    from keras_vit import _keras_file, _validation, export
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
    _check_model_path(args.model)
    _check_flags_apply(args)
    if args.quantization == "int8" and not args.representative_data:
        raise ValueError("--quantization int8 needs --representative-data.")
    if args.max_num_patches is not None:
        _validation.check_positive_int("--max-num-patches", args.max_num_patches)
    # Before the first export writes anything (the SavedModel's version folder is checked by its writer).
    _check_outputs(args, _validation)
    class_names = export.read_labels(args.labels) if args.labels else export.labels_beside(args.model)
    model = _keras_file.load(args.model, "MODEL")
    if is_naflex(model):
        return _export_naflex(args, export, model)
    if args.max_num_patches is not None:
        raise ValueError("--max-num-patches applies to a NaFlex model (naflex=True); this one takes images of one size.")
    if args.precision == "auto":
        args.precision, reason = export.predict.saved_model_precision(model)
        print(f"precision {args.precision} ({reason})", file=sys.stderr)
    # Everything the exports read is checked before the first one writes anything.
    if args.tflite:
        from keras_vit.export._common import class_names_of
        from keras_vit.export.tflite import check_labels_file

        check_labels_file(args.tflite, class_names_of(model, class_names), args.overwrite)
    data = None
    if args.quantization == "int8":
        data = calibration_images(args.representative_data, model.inputs[0].shape[1:], argument="--representative-data")
    with export.shared_process():
        _export(args, export, model, class_names, data)
    return 0


def _check_model_path(path):
    """MODEL must be an existing .keras file: a folder or another file gets a line saying so, not Keras' advice."""
    if os.path.isdir(path):
        raise ValueError(f"Invalid MODEL={path!r}: it is a folder (a SavedModel?). Expected a .keras model file; "
                         "export takes the .keras model an export is made from.")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Model not found: MODEL={path!r}.")
    if not path.endswith(".keras"):
        raise ValueError(f"Invalid MODEL={path!r}. Expected a .keras model file.")


def _check_flags_apply(args):
    """Refuses a flag that none of the requested outputs would use: silently ignored, it would mislead."""
    int8 = args.quantization == "int8"
    # (flag, given, the output it applies to, its flag, why the others ignore it); --quantization and --precision
    # say more, so they keep their own lines below.
    saved_model, tflite = ("the SavedModel", "--saved-model DIR"), ("the TFLite file", "--tflite FILE")
    for flag, given, (output, need), present, why in (
        ("--version", args.version is not None, saved_model, args.saved_model, ""),
        ("--jit-compile", args.jit_compile, saved_model, args.saved_model, ""),
        ("--top-k", args.top_k is not None, saved_model, args.saved_model,
         " (TFLite and ONNX files return every probability)"),
        ("--approximate-gelu", args.approximate_gelu, tflite, args.tflite,
         " (the SavedModel and the ONNX file keep the exact GELU)"),
    ):
        if given and not present:
            raise ValueError(f"{flag} applies to {output}; pass {need} too{why}.")
    if args.quantization != "none" and not args.tflite:
        raise ValueError(f"--quantization {args.quantization} applies to the TFLite file; pass --tflite FILE too.")
    for flag, given in (("--int8-full", args.int8_full),
                        ("--representative-data", args.representative_data is not None),
                        ("--calibration-samples", args.calibration_samples is not None)):
        if given and not int8:
            raise ValueError(f"{flag} applies to int8 quantization; pass --tflite FILE --quantization int8 too "
                             f"(got --quantization {args.quantization}).")
    if args.precision != "float32" and not args.saved_model:
        raise ValueError(f"--precision {args.precision} applies to the SavedModel; pass --saved-model DIR too "
                         "(TFLite and ONNX files compute in float32 or their --quantization).")


def _check_outputs(args, _validation):
    """Every output's name and folder, before any export: one that cannot be written must not leave others behind."""
    if args.saved_model:
        _validation.check_writable_folder("--saved-model", args.saved_model)
    files = []
    for flag, path, suffix in (("--tflite", args.tflite, ".tflite"), ("--onnx", args.onnx, ".onnx")):
        if not path:
            continue
        # The kind first: a folder given as the file is refused as such, not as a file that exists.
        if os.path.isdir(path):
            raise ValueError(f"Invalid {flag}={path!r}: it is a folder. Expected a file name ending in {suffix!r}.")
        if not path.endswith(suffix):
            raise ValueError(f"Invalid {flag}={path!r}. Expected a file name ending in {suffix!r}.")
        _validation.check_writable_folder(f"{flag} {path} (its folder)", os.path.dirname(os.path.abspath(path)))
        files.append(path)
    _validation.check_new_files(files, args.overwrite)


def _export_naflex(args, export, model):
    """A NaFlex model: TFLite and ONNX files on one padded patch sequence, a SavedModel of encoded images."""
    unsupported = [flag for flag, used in (("--quantization " + args.quantization, args.quantization != "none"),
                                           ("--approximate-gelu", args.approximate_gelu),
                                           ("--jit-compile", args.jit_compile),
                                           ("--top-k", args.top_k is not None),
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
                top_k=choices.EXPORT_TOP_K if args.top_k is None else args.top_k,
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
                calibration_samples=args.calibration_samples or choices.EXPORT_CALIBRATION_SAMPLES,
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
