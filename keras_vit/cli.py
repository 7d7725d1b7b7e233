"""The `keras-vit` command line: one sub-command per job (train, evaluate, export, predict, inspect, embed,
fewshot, knn).

Parsing imports no TensorFlow, so `--help` and `--version` answer at once: `import keras_vit`
loads no Keras, this module's top level imports only the standard library and numpy, and the
`_add_<job>` functions import only TensorFlow-free modules (`keras_vit.configs`,
`keras_vit.choices`); handlers import what they need. The console script `keras-vit` is
`keras_vit.cli:main`.

Each job adds a function `_add_<job>(subparsers)` that registers its sub-parser and sets
`func=<handler>`, and lists it in `_COMMANDS`. Handlers take the parsed arguments and return an
exit code. User mistakes (ValueError, FileNotFoundError, FileExistsError) and a failed download (ConnectionError)
print one clear line and exit 2 without a traceback; set KERAS_VIT_DEBUG=1 to see the traceback.

One overwrite rule (README, "Command line"): a command that writes files the user names refuses
ones that exist unless `--overwrite` is passed (`_validation.check_new_files`, before any work).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np


def build_parser() -> argparse.ArgumentParser:
    """Returns the argument parser of `keras-vit`; building it imports no TensorFlow.

    Example:

    >>> args = build_parser().parse_args(["train", "--epochs", "1"])
    >>> args.command, args.epochs, args.dataset, args.stem
    ('train', 1, 'sample', 'auto')
    """
    parser = _Parser(
        prog="keras-vit",
        description="Vision Transformers for Keras: train, evaluate, export and inspect.",
    )
    parser.add_argument("--version", action=_VersionAction)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add_command in _COMMANDS:
        add_command(subparsers)
    return parser


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose mistakes (an unknown flag, a bad number) print one line, not the usage block; exit 2.

    Sub-commands get this class too (argparse makes them of the parent's class).
    """

    def __init__(self, *args, **kwargs):
        # An abbreviation (--epoch for --epochs) would change meaning the day a flag it also
        # abbreviates is added, in scripts that worked: flags are spelled out.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _VersionAction(argparse.Action):
    """--version: prints keras_vit's version, which lives in the package's __init__."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help="show the version and exit"):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from keras_vit import __version__

        print(f"keras_vit {__version__}")
        parser.exit()


def _add_inspect(subparsers):
    from keras_vit import choices

    parser = subparsers.add_parser(
        "inspect",
        help="write attention-rollout, attention-distance and embedding figures of a model as PNG",
        description=(
            "Writes PNG figures of what a ViT learned (ViT paper Fig. 6 and 7): attention rollout "
            "over each image, mean attention distance per head against depth, position-embedding "
            "similarity and the principal components of the patch-embedding filters; prints the "
            "path of each file. Needs matplotlib (pip install 'keras_vit[plot]')."
        ),
    )
    parser.add_argument("model", metavar="MODEL", help="a saved keras_vit model (.keras file)")
    parser.add_argument(
        "images",
        metavar="IMAGE",
        nargs="*",
        help="image files (PNG, JPEG, ...), resized to the model's input size; default: four "
        "test images of the shipped Fashion-MNIST sample",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="folder to write the PNG files to")
    parser.add_argument("--overwrite", action="store_true", help="replace figures of these names already in DIR")
    parser.add_argument(
        "--scale",
        default="auto",
        choices=choices.INSPECT_SCALES,
        help="how to scale [0, 255] pixels before the model: raw (the model has its own "
        "preprocessing), unit [0, 1], symmetric [-1, 1] or imagenet mean/std; auto: raw when the "
        "model has a 'preprocessing' layer, else unit (default: auto)",
    )
    parser.add_argument(
        "--head-fusion", default="mean", choices=("mean", "max", "min"), help="how attention rollout fuses heads (default: mean)"
    )
    parser.add_argument(
        "--components", type=int, default=28, help="principal components of the embedding filters to draw (default: 28)"
    )
    parser.add_argument(
        "--image-size",
        type=int,
        nargs=2,
        metavar=("HEIGHT", "WIDTH"),
        help="size to resize images to when the model accepts any size (default: its built grid)",
    )
    parser.set_defaults(func=_run_inspect)


# The figures `inspect` writes in --out (probe_attention.png for a model with attention pooling alone).
_FIGURES = {"rollout": "attention_rollout.png", "distance": "mean_attention_distance.png",
            "probe": "probe_attention.png", "similarity": "position_embedding_similarity.png",
            "filters": "patch_embedding_filters.png"}


def _run_inspect(args):
    from keras_vit._validation import check_new_files, check_positive_int, check_writable_folder

    # The user's own mistakes first, then what is missing from the installation.
    if not os.path.isfile(args.model):
        raise FileNotFoundError(f"Model file not found: MODEL={args.model!r}.")
    if not args.model.endswith(".keras"):
        raise ValueError(f"Invalid MODEL={args.model!r}: expected a saved Keras model file ending in .keras.")
    check_positive_int("--components", args.components)
    check_writable_folder("--out", args.out)  # before the model loads: an existing file there is a mistake
    check_new_files([os.path.join(args.out, name) for name in _FIGURES.values()], args.overwrite)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(
            "keras-vit inspect: error: drawing the figures needs matplotlib: "
            'pip install "keras_vit[plot]" (or pip install matplotlib)',
            file=sys.stderr,
        )
        return 2
    import keras  # loading Keras registers keras_vit's layers for load_model (keras_vit._registration)

    from keras_vit import inspect as vit_inspect
    from keras_vit.inspect import images, plots

    model = keras.saving.load_model(args.model, compile=False)
    probe = vit_inspect.attention_model(model)  # fails early, clearly, on a model that is no ViT

    size, channels = images.input_size(model, args.image_size)
    if args.images:
        pixels = images.load_images(args.images, size, channels)
        titles = [os.path.basename(path) for path in args.images]
    else:
        pixels, titles = images.sample_images(size, channels)
        print("keras-vit inspect: no IMAGE given, using four Fashion-MNIST sample images", file=sys.stderr)
    inputs = images.model_inputs(model, pixels, args.scale)

    attentions = vit_inspect.attention_maps(probe, inputs)
    prefix, grid, pixels_per_token = vit_inspect.token_layout(model, attentions.shape[-1], size)
    rollout = vit_inspect.attention_rollout(attentions, args.head_fusion)
    readout = vit_inspect.probe_readout(model, inputs, args.head_fusion)  # a MAP model's probe (SigLIP), else None
    maps = vit_inspect.upsample_maps(vit_inspect.rollout_to_grid(rollout, grid, prefix, readout), size)
    distances = vit_inspect.mean_attention_distance(attentions, grid, pixels_per_token, prefix)
    patches = grid[0] * grid[1]
    uniform = vit_inspect.mean_attention_distance(np.full((1, 1, patches, patches), 1 / patches), grid, pixels_per_token)

    os.makedirs(args.out, exist_ok=True)
    written = [
        plots.plot_attention_rollout(pixels, maps, os.path.join(args.out, _FIGURES["rollout"]), titles),
        plots.plot_mean_attention_distance(
            distances, os.path.join(args.out, _FIGURES["distance"]), max(size), float(uniform[0])
        ),
    ]
    if readout is not None:
        probe = vit_inspect.upsample_maps(vit_inspect.readout_to_grid(readout, grid, prefix), size)
        written.append(plots.plot_attention_rollout(
            pixels, probe, os.path.join(args.out, _FIGURES["probe"]), titles, label="probe attention"))
    try:
        similarity = vit_inspect.position_embedding_similarity(vit_inspect.position_embeddings(model))
        written.append(
            plots.plot_position_embedding_similarity(
                similarity, os.path.join(args.out, _FIGURES["similarity"])
            )
        )
    except ValueError as reason:
        print(f"keras-vit inspect: skipped {_FIGURES['similarity']}: {reason}", file=sys.stderr)
    try:
        filters = vit_inspect.patch_embedding_filters(model, args.components)
        written.append(plots.plot_patch_embedding_filters(filters, os.path.join(args.out, _FIGURES["filters"])))
    except ValueError as reason:
        print(f"keras-vit inspect: skipped {_FIGURES['filters']}: {reason}", file=sys.stderr)
    for path in written:
        print(path)
    return 0


def _add_export(subparsers):
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
    parser.set_defaults(func=_run_export)


def _run_export(args):
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


def _add_predict(subparsers):
    from keras_vit import choices

    parser = subparsers.add_parser(
        "predict",
        help="print the top-k classes of images with a .keras, SavedModel or .tflite model",
        description="Runs a .keras model, a SavedModel folder or a .tflite file on image files.",
    )
    parser.add_argument("model", help=".keras file, SavedModel folder (or TF Serving base folder) or .tflite file")
    parser.add_argument("images", nargs="+", metavar="IMAGE", help="JPEG/PNG/GIF/BMP/WebP files")
    parser.add_argument("--top-k", type=int, default=5, help="classes to print per image (default: 5)")
    parser.add_argument("--labels", metavar="FILE", help="class names, one per line (default: stored, or <model>.labels.txt / labels.txt beside the model)")
    parser.add_argument("--scaling", help="pixel scaling for a .keras model without preprocessing")
    parser.add_argument("--max-num-patches", type=int, help="patch budget each image is resized to fit, at its own "
                        "aspect, for a NaFlex .keras model (SigLIP 2; default: 256)")
    parser.add_argument("--precision", choices=("auto", *choices.EXPORT_PRECISIONS), default="auto",
                        help="what the model computes in; auto (default): a .keras model in bfloat16 where it runs "
                        "faster on this machine (keras_vit.machine: on a CPU with native bfloat16 a short timed trial, "
                        "cached; KERAS_VIT_PRECISION_TRIAL=0 turns it off), else float32; an exported file as exported")
    parser.set_defaults(func=_run_predict)


def _run_predict(args):
    from keras_vit import export
    from keras_vit.precision_trial import MEASURED
    from keras_vit._validation import check_positive_int

    check_positive_int("--top-k", args.top_k)
    if args.max_num_patches is not None:
        check_positive_int("--max-num-patches", args.max_num_patches)
    class_names = export.read_labels(args.labels) if args.labels else None
    predictor = export.load_predictor(args.model, class_names=class_names, scaling=args.scaling,
                                      precision=args.precision, max_num_patches=args.max_num_patches)
    if predictor.precision != "float32" or predictor.precision_reason.startswith(MEASURED):
        print(f"precision {predictor.precision} ({predictor.precision_reason})", file=sys.stderr)
    probabilities = predictor.predict_files(args.images)
    for image, best in zip(args.images, predictor.top_k(probabilities, args.top_k)):
        print(image)
        for index, label, probability in best:
            name = label if label is not None else f"class {index}"
            print(f"  {probability:.4f}  {index:>4}  {name}")
    return 0


def _add_train(subparsers) -> None:
    from keras_vit import train_options

    parser = subparsers.add_parser(
        "train",
        help="train a ViT (default: a small ViT on the shipped Fashion-MNIST sample)",
        description=(
            "Train a ViT with model.fit. With no arguments: a small ViT on the Fashion-MNIST "
            "sample shipped in the package (a few minutes on a CPU), then prints the test "
            "accuracy and saves the model under saved_models/. Runs survive crashes: run the "
            "same command again and it resumes from the last completed epoch (or, if training "
            "had finished, writes only the final files). A header before training says what "
            "will run; arguments, output folders and memory are checked before the first step."
        ),
    )
    fit = train_options.add_train_flags(parser)["training"]
    # A multi-process JAX run: how this process joins it, not a setting of the run.
    fit.add_argument("--coordinator", help="host:port of process 0 of a multi-process JAX run (default: "
                     "KERAS_DISTRIBUTION_JOB_ADDRESSES, or the platform's, e.g. Cloud TPU)")
    fit.add_argument("--num-processes", type=int, help="processes of a multi-process JAX run "
                     "(default: KERAS_DISTRIBUTION_NUM_PROCESSES)")
    fit.add_argument("--process-id", type=int, help="this process's index, from 0 (default: KERAS_DISTRIBUTION_PROCESS_ID)")
    parser.add_argument("--overwrite", action="store_true", help="replace the <output-dir>/<name>.* files of an "
                        "earlier run (a run resumed from its backup rewrites its own without it)")
    parser.set_defaults(func=_run_train)


def _run_train(args) -> int:
    from keras_vit import _validation, train_options

    for flag, value, minimum in (("--num-processes", args.num_processes, 1), ("--process-id", args.process_id, 0)):
        if value is not None:
            _validation.check_positive_int(flag, value, minimum)
    multi_process = args.num_processes is not None or os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES")
    if not multi_process and (args.process_id is not None or args.coordinator is not None):
        raise ValueError("--process-id and --coordinator describe a multi-process JAX run: pass --num-processes too.")
    if multi_process:
        from keras_vit import distribution

        distribution.initialize(args.coordinator, args.num_processes, args.process_id)  # before any computation

    from keras_vit.training.trainer import format_summary, train

    config = train_options.config_from_flags(args)
    _check_train_outputs(config, args.overwrite)
    # The options are checked once, by the run's plan, and named by their flags.
    result = train(config, name=train_options.flag_name)
    print(format_summary(result))
    for kind, path in result["artifacts"].items():
        print(f"Saved {kind}: {path}")
    return 0


def _check_train_outputs(config, overwrite):
    """The overwrite rule for `train`'s final files, before anything runs.

    A run that will resume from its run directory's backup wrote them itself (it was stopped
    while writing them, or after): it rewrites them without --overwrite.
    """
    if not config.output_dir:
        return
    from keras_vit._validation import check_new_files
    from keras_vit.training.artifacts import artifact_files
    from keras_vit.training.run_dir import RunDirectory

    if config.run_dir and config.resume and RunDirectory(config.run_dir).backup_state() is not None:
        return
    check_new_files(artifact_files(config.output_dir, config.name, config.export).values(), overwrite)


def _add_evaluate(subparsers) -> None:
    parser = subparsers.add_parser(
        "evaluate",
        help="evaluate a saved .keras model on a data set",
        description="Report the accuracy and cross-entropy of a model saved by `keras-vit train` on a data set split "
        "(the same measure as the test metrics `keras-vit train` prints).",
    )
    parser.add_argument("model", help="path of the .keras model")
    parser.add_argument("--dataset", default="sample", help="'sample' (the default), a folder, or a tensorflow-datasets name")
    parser.add_argument("--split", default="test", help="split to evaluate: train, test, validation (the held-out "
                        "share of a folder of class sub-folders, or of --validation-split), or a tfds split (default: test)")
    parser.add_argument("--data-dir", help="tensorflow-datasets data_dir (default: tensorflow-datasets' own)")
    parser.add_argument("--download", action="store_true", help="let tensorflow-datasets download missing data")
    parser.add_argument("--on-corrupt", choices=("skip", "error"), default="skip",
                        help="corrupt image files: skip them or stop (default: skip)")
    parser.add_argument("--batch-size", type=int, default=256, help="batch size (default: 256)")
    parser.add_argument("--max-examples", type=int, help="evaluate only the first N examples (default: all)")
    parser.add_argument("--validation-split", type=float,
                        help="the training run's --validation-split, for --split validation (default: none)")
    parser.add_argument("--seed", type=int, default=0,
                        help="the training run's --seed, which chose the held-out share (default: 0)")
    parser.set_defaults(func=_run_evaluate)


def _run_evaluate(args) -> int:
    from keras_vit import _validation
    from keras_vit.training.trainer import check_evaluate_arguments, evaluate

    check_evaluate_arguments(args.batch_size, args.max_examples, args.validation_split, name=_flag)
    _validation.check_seed("--seed", args.seed)
    scores = evaluate(args.model, args.dataset, args.split, args.batch_size, args.data_dir, args.on_corrupt,
                      args.download, args.max_examples, args.validation_split, args.seed)
    print(f"{args.dataset}:{args.split}: accuracy {scores['accuracy']:.4f}, loss {scores['loss']:.4f} "
          f"on {scores['num_examples']} examples ({scores['data']})")
    _print_skipped(scores["skipped_files"])
    return 0


def _add_backbone_arguments(parser, *, splits):
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


def _add_embed(subparsers) -> None:
    parser = subparsers.add_parser(
        "embed",
        help="write the embeddings of a data set's images by a pre-trained backbone to an .npz file",
        description="Runs a backbone once over a data set split (no training, no augmentation) and writes its pooled "
        "features, for retrieval: an .npz with embeddings (N, D) float32, labels (N,), files (N,) (empty for data "
        "without files) and class_names. Prints the file and the shape.",
    )
    _add_backbone_arguments(parser, splits=False)
    parser.add_argument("--split", default="train", help="split to embed (default: train)")
    parser.add_argument("--max-examples", type=int, help="embed only the first N examples (default: all)")
    parser.add_argument("--out", default="embeddings.npz", help="the .npz file to write (default: embeddings.npz)")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    parser.set_defaults(func=_run_embed)


def _run_embed(args) -> int:
    from keras_vit import _validation

    _validation.check_positive_int("--batch-size", args.batch_size)
    if args.max_examples is not None:
        _validation.check_positive_int("--max-examples", args.max_examples)
    if not args.out.endswith(".npz") or os.path.isdir(args.out):
        raise ValueError(f"Invalid --out={args.out!r}. Expected a file name ending in .npz.")
    _validation.check_writable_folder("--out", os.path.dirname(os.path.abspath(args.out)))
    _validation.check_new_files([args.out], args.overwrite)
    from keras_vit.data.sources import load_source

    source = load_source(args.dataset, args.split, args.data_dir, args.on_corrupt, args.download).take(args.max_examples)
    model, info = _load_backbone(args)
    from keras_vit._atomic import atomic_file
    from keras_vit.transfer import extract_features

    result = extract_features(model, source, batch_size=args.batch_size)
    path = os.path.abspath(args.out)
    with atomic_file(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, embeddings=result.features, labels=result.labels, files=np.array(result.files, dtype=str),
                     class_names=np.array(result.class_names, dtype=str))
    print(f"{path}: embeddings {result.features.shape[0]}x{result.features.shape[1]} of {source.description}")
    _print_skipped(source.corrupt_files())
    return 0


def _add_fewshot(subparsers) -> None:
    parser = subparsers.add_parser(
        "fewshot",
        help="linear few-shot accuracy of a pre-trained backbone on a data set, without training it",
        description="The ViT paper's linear few-shot evaluation: frozen features of the train and test splits; per "
        "shot count and draw, that many training images per class, a closed-form regularised least-squares fit onto "
        "{-1, 1} targets (big_vision's). Prints the mean and standard deviation of the accuracy over the draws.",
    )
    _add_backbone_arguments(parser, splits=True)
    parser.add_argument("--shots", default="1,5,10,25", help="training images per class, comma-separated (default: 1,5,10,25)")
    parser.add_argument("--draws", type=int, default=5, help="random draws per shot count (default: 5)")
    parser.add_argument("--l2-reg", type=float, default=2.0**10, help="the ridge regulariser (default: 1024, big_vision's)")
    parser.set_defaults(func=_run_fewshot)


def _run_fewshot(args) -> int:
    from keras_vit.transfer import fewshot

    shots = _parse_shots(args.shots)
    shots = fewshot.check_fewshot_arguments(shots, args.draws, args.l2_reg, args.seed, name=_flag)
    train, test, train_features, test_features = _split_features(args, lambda features, held_out: fewshot.check_shots(
        shots, features.labels, range(len(features.class_names)), features.class_names, name=_flag,
        held_out_labels=held_out))
    result = fewshot.linear_fewshot(train_features.features, train_features.labels, test_features.features,
                                    test_features.labels, shots=shots, draws=args.draws, l2_reg=args.l2_reg,
                                    seed=args.seed)
    print(f"linear few-shot accuracy, {args.draws} draw{'s' if args.draws > 1 else ''}, l2_reg {args.l2_reg:g}: "
          f"{len(train_features.labels):,} train images ({train.description}), {len(test_features.labels):,} test "
          f"images ({test.description})")
    print("shots  accuracy")
    for count, scores in result.items():
        print(f"{count:5d}  {scores['mean']:.4f} +- {scores['std']:.4f}")
    _print_skipped(train.corrupt_files() + test.corrupt_files())
    return 0


def _parse_shots(text):
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(
            f"Invalid --shots={text!r}. Expected integers >= 1 separated by commas, e.g. 1,5,10,25."
        ) from None


def _add_knn(subparsers) -> None:
    parser = subparsers.add_parser(
        "knn",
        help="weighted k-NN accuracy of a pre-trained backbone on a data set, without training it",
        description="DINO's k-NN evaluation: frozen, L2-normalised features of the train and test splits; each test "
        "image's k most cosine-similar training images vote with weight exp(similarity / temperature). Prints the "
        "top-1 accuracy.",
    )
    _add_backbone_arguments(parser, splits=True)
    parser.add_argument("--k", type=int, default=20, help="neighbours that vote (default: 20)")
    parser.add_argument("--temperature", type=float, default=0.07, help="temperature of the votes, > 0 (default: 0.07)")
    parser.set_defaults(func=_run_knn)


def _run_knn(args) -> int:
    from keras_vit.transfer import fewshot

    fewshot.check_knn_arguments(args.k, args.temperature, name=_flag)
    train, test, train_features, test_features = _split_features(args, lambda features, _: fewshot.check_knn_arguments(
        args.k, args.temperature, num_train=len(features.labels), name=_flag), k=args.k)
    accuracy = fewshot.knn_accuracy(train_features.features, train_features.labels, test_features.features,
                                    test_features.labels, k=args.k, temperature=args.temperature,
                                    num_classes=train.num_classes)
    print(f"{args.k}-NN accuracy (temperature {args.temperature:g}): {accuracy:.4f} on {len(test_features.labels):,} "
          f"test images ({test.description}), {len(train_features.labels):,} train images ({train.description})")
    _print_skipped(train.corrupt_files() + test.corrupt_files())
    return 0


def _split_features(args, check_train, k=None):
    """(train, test, their `Features`) of `fewshot` and `knn`.

    `check_train(train_features, held_out_labels)` sees the training features first, with the
    labels of the share held out of the training images for testing (None when nothing is).
    """
    from keras_vit.transfer import extract_features

    train, test, held_out, model = _probe_data(args, k)
    train_features = extract_features(model, train, batch_size=args.batch_size)
    # Files that failed to decode may leave a class short: checked before the test pass.
    try:
        check_train(train_features, None if held_out is None else _held_out_labels(held_out, train))
    except ValueError:
        _print_skipped(train.corrupt_files())  # they may be why
        raise
    return train, test, train_features, extract_features(model, test, batch_size=args.batch_size)


def _held_out_labels(held_out, train):
    """The labels of the files `held_out` took out of `train`'s folder, from the class sub-folder each lies in
    (nothing is decoded); empty for sources without files."""
    roots = {os.path.dirname(os.path.dirname(path)) for path in train.files}
    index = {name: i for i, name in enumerate(train.class_names)}
    folders = [os.path.split(os.path.dirname(path)) for path in held_out.files]
    return [index[name] for root, name in folders if root in roots and name in index]


def _probe_data(args, k=None):
    """(train, test, held-out share or None, feature model) of `fewshot` and `knn`, every argument checked before
    the model loads."""
    from keras_vit import _validation

    _validation.check_positive_int("--batch-size", args.batch_size)
    for flag, value in (("--max-train-examples", args.max_train_examples), ("--max-test-examples", args.max_test_examples)):
        if value is not None:
            _validation.check_positive_int(flag, value)
    if args.validation_split is not None:
        _validation.check_fraction("--validation-split", args.validation_split)
    _validation.check_seed("--seed", args.seed)
    from keras_vit.data.sources import load_splits

    train, validation, test = load_splits(
        args.dataset, args.train_split, args.test_split or None, args.validation_split, args.seed, args.data_dir,
        args.on_corrupt, args.download)
    held_out = validation if validation is not test else None  # load_splits gives the test split when none is held out
    test = test if test is not None else validation
    if test is None:
        raise ValueError(f"--dataset={args.dataset!r} has no test split: pass --test-split or --validation-split.")
    if train.num_classes < 2:
        raise ValueError(
            f"Invalid --dataset={args.dataset!r}: it has {train.num_classes} class ({', '.join(train.class_names)}); "
            "a probe needs at least 2 classes."
        )
    train, test = train.take(args.max_train_examples), test.take(args.max_test_examples)
    if k is not None:
        from keras_vit.transfer import fewshot

        fewshot.check_knn_arguments(k, args.temperature, num_train=train.num_examples, name=_flag)
    model, _ = _load_backbone(args)
    return train, test, held_out, model


def _load_backbone(args):
    """The feature model of SPEC, and a line on stderr saying what was loaded and why."""
    from keras_vit._validation import check_positive_int
    from keras_vit.transfer import load_pretrained

    if args.image_size is not None:
        check_positive_int("--image-size", args.image_size)
    model, info = load_pretrained(args.spec, image_size=args.image_size, scaling=args.scaling)
    dropped = f", left out: {', '.join(info.dropped)}" if info.dropped else ""
    print(f"keras-vit {args.command}: {info.source} ({info.kind}): {info.num_features} features; image "
          f"{info.image_size[0]}x{info.image_size[1]} ({info.image_size_reason}); scaling {info.scaling} "
          f"({info.scaling_reason}){dropped}", file=sys.stderr)
    return model, info


def _print_skipped(files) -> None:
    """Prints the line of `keras_vit.training.report.skipped_line` for the corrupt image files a command left out
    (each once; a folder's held-out share lists the same ones as its training share), nothing for none.

    Every command that reads a folder calls it once its data has been read (`train` prints the same
    line in its summary).
    """
    files = list(dict.fromkeys(files))
    if files:
        from keras_vit.training.report import skipped_line

        print(skipped_line(files))


def _flag(field: str) -> str:
    """The flag of a library argument, as the library's checks name it for the command line."""
    from keras_vit.train_options import flag_name

    return flag_name(field)


_COMMANDS = [_add_train, _add_evaluate, _add_export, _add_predict, _add_inspect, _add_embed, _add_fewshot, _add_knn]


def main(argv=None) -> int:
    """Runs `keras-vit` with `argv` (default: sys.argv[1:]) and returns the exit code.

    Args:
        argv: list of str or None. The arguments after the program name. Defaults to None.

    Example (a user mistake prints one line on stderr and gives exit code 2):

    >>> main(["evaluate", "no-such-model.keras"])
    2
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return args.func(args) or 0
    except (ValueError, FileNotFoundError, FileExistsError, ConnectionError) as error:
        if os.environ.get("KERAS_VIT_DEBUG"):
            raise
        print(f"keras-vit {args.command}: error: {error}", file=sys.stderr)
        return 2
    except Exception as error:
        from keras_vit.export import ExportFailed

        if not isinstance(error, ExportFailed) or os.environ.get("KERAS_VIT_DEBUG"):
            raise
        # Not the user's mistake: one paragraph (the converter's dump is in the log it names), exit 1.
        print(f"keras-vit {args.command}: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
