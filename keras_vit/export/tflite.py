"""TFLite / LiteRT export: float32, float16, dynamic-range int8 and full-integer int8 files."""

from __future__ import annotations

import collections
import dataclasses
import os
import warnings

import keras
import numpy as np
import tensorflow as tf

from keras_vit import choices
from keras_vit._validation import check_positive_int
from keras_vit.export import _common, _tensorflow_process, compute_precision, tflite_metadata
from keras_vit.models.vit import build

QUANTIZATIONS = ("none", "float16", "dynamic", "int8")
DEFAULT_CALIBRATION_SAMPLES = choices.EXPORT_CALIBRATION_SAMPLES
# Ops that "int8" leaves in float by default: the LayerNorm statistics and the residual stream.
# Per-tensor int8 LayerNorm on ViT activations (a few outlier channels set the scale) cost 6-8
# points of top-1 agreement on the Fashion-MNIST model; with these in float, agreement was
# >= 97% while every matmul, convolution, GELU and softmax still runs in int8.
INT8_FLOAT_OPS = ("MEAN", "SQUARED_DIFFERENCE", "RSQRT", "ADD", "MUL")
# The ops of the non-finite guard (`_export_wrapper`), kept in float in an int8 file.
_NAN_GUARD_OPS = ("NOT_EQUAL", "ABS", "GREATER", "LOGICAL_OR", "REDUCE_ANY", "SELECT_V2")
# The single signature of every file written here, its input and output names.
SIGNATURE = "serving_default"
INPUT_NAME = _common.INPUT_NAME
OUTPUT_NAME = _common.OUTPUT_NAME


@dataclasses.dataclass(frozen=True)
class TFLiteExport:
    """What `tflite()` wrote.

    Args:
        path: str. The .tflite file.
        quantization: str. One of `QUANTIZATIONS`.
        size_bytes: int. File size.
        ops: dict. Operator name -> count, e.g. {"FULLY_CONNECTED": 13, "GELU": 2}; see
            `tflite_ops`.
        output_name: str. The name of the signature's output: "probabilities", or "depth" for
            a depth model.

    Example (`tflite`'s example makes a real one):

    >>> result = TFLiteExport("vit.tflite", "dynamic", 52_000, {"FULLY_CONNECTED": 13}, "probabilities")
    >>> result.quantization, result.size_bytes
    ('dynamic', 52000)
    >>> result.size_bytes = 0
    Traceback (most recent call last):
    ...
    dataclasses.FrozenInstanceError: cannot assign to field 'size_bytes'
    """

    path: str
    quantization: str
    size_bytes: int
    ops: dict
    output_name: str


def tflite(
    model,
    path,
    quantization="none",
    *,
    representative_data=None,
    calibration_samples=DEFAULT_CALIBRATION_SAMPLES,
    scaling=None,
    class_names=None,
    approximate_gelu=False,
    batch_size=1,
    float_ops=INT8_FLOAT_OPS,
    overwrite=False,
):
    """Converts a model to a TFLite (LiteRT) file, optionally quantized, written atomically.

    The file has one signature, `serving_default`, with input `images`: float32 (batch, height, width,
    channels) pixels in [0, 255], and output `probabilities`: float32 (batch, classes), also
    for int8 files. As in every keras_vit export, softmax is applied in the graph when the
    model's head emits logits, and not again when the head already has softmax. Conversion
    goes through Keras' LiteRT export (`model.export(format="litert")`) with TFLite builtin
    ops only, so a file never needs the Flex (TF ops) delegate.

    The file carries TFLite model metadata (see `keras_vit.export.tflite_metadata`): an
    image-classifier description and, when `class_names` are given, a `labels.txt`
    associated file, read by the LiteRT metadata tools and by `load_predictor`.

    Quantization (the file computes in float32 whatever the model's dtype policy, see
    `keras_vit.export`; only these options lower it):
    - "none": float32 weights and compute.
    - "float16": float16 weights, dequantized to float32 at load (GPU delegates run them in
      half precision).
    - "dynamic": int8 weights, activations quantized on the fly (dynamic range).
    - "int8": int8 weights and activations, calibrated on `representative_data`, except the
      ops named in `float_ops` (by default LayerNorm and the residual adds, see
      `INT8_FLOAT_OPS`); `float_ops=()` gives a strict full-integer file for integer-only
      accelerators, at a cost in accuracy. Input and output stay float32.
    An image with a non-finite pixel (NaN, +Inf or -Inf) gets NaN probabilities from every file
    but a full-integer one, whose first op quantizes it like any pixel: the float files propagate
    it, the quantized ones test for it in float (where quantizing would clip an infinite pixel
    to the calibrated range and answer with plausible probabilities).

    Args:
        model: keras.Model. A built model with a static image size.
        path: str. The .tflite file to write.
        quantization: str. One of "none", "float16", "dynamic", "int8". Defaults to "none".
        representative_data: array, tf.data.Dataset or iterable or None. Images in [0, 255],
            (N, height, width, channels), for "int8" calibration; a dataset or iterable may
            yield batches or (images, labels) pairs, e.g. a keras_vit data pipeline. Required
            for "int8", ignored otherwise. Defaults to None.
        calibration_samples: int. Images drawn from `representative_data`. Defaults to 200.
        scaling: None, str or (mean, std). As in `keras_vit.export.saved_model`: how [0, 255]
            pixels map to the inputs of a model without a `preprocessing` layer. Defaults to
            None.
        class_names: sequence of str or None. Stored inside the file as its labels metadata,
            and also written to `<stem>.labels.txt` beside it for tools that do not read
            metadata (an existing one holding other names only with `overwrite`). Defaults to None.
        approximate_gelu: bool. Export a copy of the model with the tanh GELU (same weights),
            for delegates without the GELU/Erf kernels; outputs differ from the exact model by
            about 1e-3. Defaults to False.
        batch_size: int or None. Static batch size of the input; None makes it resizable
            (`interpreter.resize_tensor_input`) at the cost of extra shape ops that some
            delegates reject. Defaults to 1.
        float_ops: sequence of str. TFLite op names that "int8" keeps in float. Defaults to
            `INT8_FLOAT_OPS`.
        overwrite: bool. Replace an existing file. Defaults to False.

    Returns:
        A `TFLiteExport` with the path, size and the ops the file uses.

    Example:

    >>> import os, tempfile, keras_vit
    >>> model = keras_vit.ViT("tiny", num_classes=3, preprocessing="unit")
    >>> result = tflite(model, os.path.join(tempfile.mkdtemp(), "tiny.tflite"))
    >>> result.quantization, result.output_name, result.ops["GELU"], tflite_ops(result.path) == result.ops
    ('none', 'probabilities', 2, True)
    """
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"Invalid quantization={quantization!r}. Expected one of {list(QUANTIZATIONS)}.")
    shape = _common.static_image_shape(model, what="export to TFLite")
    output_name, classes = _common.output_kind(model, what="export to TFLite")
    names = _common.check_output_names(_common.class_names_of(model, class_names), classes)
    mean_std = _common.resolve_scaling(model, scaling, shape[-1])
    path = _common.output_file(path, ".tflite", overwrite=overwrite)
    labels_path = check_labels_file(path, names, overwrite)
    check_positive_int("calibration_samples", calibration_samples)
    if batch_size is not None:
        check_positive_int("batch_size", batch_size)
    if isinstance(float_ops, str) or not all(isinstance(op, str) for op in float_ops):
        raise ValueError(f"Invalid float_ops={float_ops!r}. Expected a sequence of TFLite op names such as 'MEAN'.")
    calibration = None
    if quantization == "int8":
        if representative_data is None:
            raise ValueError(
                "quantization='int8' needs representative_data: images in [0, 255] shaped "
                f"(N, {', '.join(map(str, shape))}), e.g. a slice of the training set."
            )
        calibration = _calibration_images(representative_data, shape, calibration_samples)

    if _tensorflow_process.needed():
        return _tensorflow_process.call(
            "tflite", model, path, quantization, scaling=scaling, class_names=names,
            representative_data=None if calibration is None else np.stack(calibration),
            calibration_samples=calibration_samples, approximate_gelu=approximate_gelu,
            batch_size=batch_size, float_ops=tuple(float_ops), overwrite=overwrite,
        )
    model = compute_precision.float32_model(model)
    if approximate_gelu:
        model = with_tanh_gelu(model)
    # Not in a full-integer file: nothing there can hold a NaN or Inf (its input is quantized first).
    nan_guard = quantization == "dynamic" or (quantization == "int8" and bool(float_ops))
    wrapper = _export_wrapper(model, shape, mean_std, nan_guard, output_name)
    input_signature = [tf.TensorSpec((batch_size,) + tuple(shape), tf.float32, name=INPUT_NAME)]
    with _common.atomic_file(path) as tmp:
        if quantization == "int8":
            content = _convert_int8(wrapper, input_signature, calibration, batch_size or 1, tuple(float_ops))
        else:
            wrapper.export(
                tmp, format="litert", input_signature=input_signature, verbose=False,
                **_converter_kwargs(quantization),
            )
            with open(tmp, "rb") as f:
                content = f.read()
        if classes is not None:  # the metadata schema's image classifier; a depth file goes without
            content = tflite_metadata.add_metadata(
                content, name=model.name, image_shape=shape, class_names=names,
                description=f"Image classifier ({quantization} quantization): float32 [0, 255] pixels in, "
                "probabilities out.",
            )
        with open(tmp, "wb") as f:
            f.write(content)
        ops = tflite_ops(tmp)
    if names is not None:
        _common.write_labels(labels_path, names)
    return TFLiteExport(path, quantization, os.path.getsize(path), ops, output_name)


def labels_file(path):
    """The labels file `tflite` writes beside the .tflite file `path`: `<stem>.labels.txt`."""
    # One labels file per model file, so several models can share a folder.
    return os.path.splitext(os.path.abspath(os.fspath(path)))[0] + ".labels.txt"


def check_labels_file(path, class_names, overwrite):
    """Returns `labels_file(path)`; FileExistsError if it exists holding other names than `class_names`, unless `overwrite`."""
    # The overwrite rule (keras_vit._validation.check_new_files) for a file the user did not name; one holding the
    # same names (the model's own <stem>.labels.txt beside an export of the same stem) is no replacement.
    labels_path = labels_file(path)
    if class_names is None or overwrite or not os.path.lexists(labels_path):
        return labels_path
    try:
        with open(labels_path, encoding="utf-8") as f:
            same = f.read() == "".join(f"{name}\n" for name in class_names)
    except (OSError, UnicodeDecodeError):
        same = False
    if not same:
        raise FileExistsError(
            f"{labels_path!r} (the class names written beside {os.fspath(path)!r}) already exists holding other "
            "names; pass overwrite=True (--overwrite) to replace it.")
    return labels_path


def naflex_tflite(model, path, max_num_patches=None, *, weights=None, overwrite=False):
    """Exports a NaFlex model as a float32 .tflite file on one padded patch sequence of `max_num_patches` patches.

    Signature inputs `patches` (1, max_num_patches, P*P*C) float32, scaled and padded as
    `keras_vit.naflex.naflex_inputs` makes them, and `spatial_shapes` (1, 2) int32, the image's
    patch grid (rows, cols); the padding mask follows from it inside. Output `probabilities`
    (1, classes) for a model with a head, else `embeddings` (1, D). The position table is
    resampled to each grid inside the file, so one file takes images of any aspect.

    Args:
        model: keras.Model. A NaFlex model (`keras_vit.ViT(..., naflex=True)`) returning one
            vector per image.
        path: str. The .tflite file to write.
        max_num_patches: int or None. The sequence length; None takes the one the `weights`
            processor states, else 256 (SigLIP 2's). Defaults to None.
        weights: str, `keras_vit.weights.Checkpoint` or None. The checkpoint the model was
            loaded from, whose `preprocessor_config.json` states the budget. Defaults to None.
        overwrite: bool. Replace an existing file. Defaults to False.

    Returns:
        A `TFLiteExport` (quantization "none").

    Example:

    >>> import os, tempfile, keras_vit
    >>> model = keras_vit.ViT("tiny_siglip2", include_top=False)
    >>> result = naflex_tflite(model, os.path.join(tempfile.mkdtemp(), "naflex.tflite"), max_num_patches=24)
    >>> result.output_name, result.quantization
    ('embeddings', 'none')
    """
    budget, output_name = _common.naflex_sequence(model, max_num_patches, weights, what="export to TFLite")
    path = _common.output_file(path, ".tflite", overwrite=overwrite)
    if _tensorflow_process.needed():
        return _tensorflow_process.call("naflex_tflite", model, path, budget, overwrite=overwrite)
    model = compute_precision.float32_model(model)
    module = tf.Module()
    module.model_variables = [variable.value for variable in model.variables]  # so the converter freezes them
    module.serve = _common.naflex_sequence_function(model, budget, output_name)
    converter = tf.lite.TFLiteConverter.from_concrete_functions([module.serve.get_concrete_function()], module)
    with _common.atomic_file(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(converter.convert())
        ops = tflite_ops(tmp)
    return TFLiteExport(path, "none", os.path.getsize(path), ops, output_name)


def with_tanh_gelu(model):
    """Returns a copy of a keras_vit model whose blocks use the tanh GELU, sharing no state but the weight values.

    The copy is built from the model's resolved config (`model.vit_config`) with
    approximate_gelu=True. A model without one (saved by an older keras_vit, or built with a
    custom backbone) is rebuilt from its functional config with the blocks' flag switched.

    Example:

    >>> import keras_vit
    >>> tanh = with_tanh_gelu(keras_vit.ViT("tiny", num_classes=2))
    >>> tanh.get_layer("encoderblock_0").approximate_gelu, tanh.vit_config["approximate_gelu"]
    (True, True)
    """
    vit_config = getattr(model, "vit_config", None)
    if vit_config is not None and vit_config.get("backbone") is None:
        # Layers take the global dtype policy when built: build the copy under the model's.
        previous = keras.config.dtype_policy()
        keras.config.set_dtype_policy(model.get_layer("encoderblock_0").dtype_policy)
        try:
            clone = build(dict(vit_config, approximate_gelu=True))
        finally:
            keras.config.set_dtype_policy(previous)
    else:
        config = model.get_config()
        layers = config.get("layers") if isinstance(config, dict) else None
        blocks = [layer for layer in layers or () if "approximate_gelu" in layer.get("config", {})]
        if not blocks:
            raise ValueError(
                f"approximate_gelu=True needs a functional keras_vit model with TransformerBlock "
                f"layers; model {model.name!r} has none."
            )
        for layer in blocks:
            layer["config"]["approximate_gelu"] = True
        if isinstance(config.get("vit_config"), dict):
            config["vit_config"] = dict(config["vit_config"], approximate_gelu=True)
        clone = model.__class__.from_config(config)
    clone.set_weights(model.get_weights())
    return clone


def tflite_ops(path):
    """Returns {operator name: count} over every subgraph of a .tflite file.

    GELU is listed as "GELU" (exact, erf form) or "GELU(approximate)" (tanh form), since some
    delegates run only one of them; custom and Flex ops keep their custom names. The example of
    `tflite` runs it on a model.

    Args:
        path: str. The .tflite file.

    Example:

    >>> import tempfile
    >>> @tf.function(input_signature=[tf.TensorSpec((1, 4), tf.float32)] * 2)
    ... def function(x, y):
    ...     return keras.ops.gelu(x, approximate=False) + keras.ops.gelu(y, approximate=True)
    >>> converter = tf.lite.TFLiteConverter.from_concrete_functions(
    ...     [function.get_concrete_function()], function)
    >>> path = os.path.join(tempfile.mkdtemp(), "gelu.tflite")
    >>> with open(path, "wb") as f:
    ...     _ = f.write(converter.convert())
    >>> tflite_ops(path)
    {'ADD': 1, 'GELU': 1, 'GELU(approximate)': 1}
    """
    from ai_edge_litert import schema_py_generated as schema

    with open(os.fspath(path), "rb") as f:
        buffer = bytearray(f.read())
    model = schema.Model.GetRootAs(buffer, 0)
    code_names = {value: name for name, value in vars(schema.BuiltinOperator).items() if not name.startswith("_")}
    opcodes = []
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)
        # Codes above 127 live in BuiltinCode; the deprecated byte field caps at 127.
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        if builtin == schema.BuiltinOperator.CUSTOM:
            opcodes.append((code.CustomCode() or b"CUSTOM").decode())
        else:
            opcodes.append(code_names.get(builtin, f"BUILTIN_{builtin}"))
    counts = collections.Counter()
    for g in range(model.SubgraphsLength()):
        subgraph = model.Subgraphs(g)
        for o in range(subgraph.OperatorsLength()):
            op = subgraph.Operators(o)
            name = opcodes[op.OpcodeIndex()]
            if name == "GELU" and op.BuiltinOptionsType() == schema.BuiltinOptions.GeluOptions:
                options = schema.GeluOptions()
                table = op.BuiltinOptions()
                options.Init(table.Bytes, table.Pos)
                if options.Approximate():
                    name = "GELU(approximate)"
            counts[name] += 1
    return dict(sorted(counts.items()))


def _export_wrapper(model, shape, mean_std, nan_guard=False, output_name=OUTPUT_NAME):
    """A model: [0, 255] pixels -> (scaling) -> model -> (softmax) -> {"probabilities": float32}.

    `nan_guard`: an image with a non-finite pixel (NaN, +Inf, -Inf) gets NaN probabilities, as
    from a float file. A quantized file would otherwise answer it with plausible ones (the value
    is lost, or clipped, where the activations are quantized); the guard's ops stay in float.
    """
    wrapper = _ExportWrapper(model, mean_std, nan_guard, output_name, name=f"{model.name}_tflite")
    wrapper.build((None,) + tuple(shape))
    return wrapper


class _ExportWrapper(keras.Model):
    """The exported function as a model: the converters trace `model` inside it.

    Scaling and softmax are the ones every export applies (`_common.scale_pixels`,
    `_common.to_probabilities`). It is converted, never saved, so it is not registered.
    """

    def __init__(self, model, mean_std, nan_guard=False, output_name=OUTPUT_NAME, **kwargs):
        super().__init__(**kwargs)
        self.inner = model
        self.nan_guard = nan_guard
        self.output_name = output_name
        self._scale = _common.scale_pixels(mean_std)
        self._to_probabilities = _common.to_output(model)

    def build(self, input_shape):
        self.built = True

    def call(self, images, training=False):
        outputs = self.inner(self._scale(images), training=False)
        probabilities = self._to_probabilities(outputs)
        if self.nan_guard:
            # NOT_EQUAL(x, x) holds only for NaN, |x| > the largest float32 only for +-Inf (no TFLite
            # builtin tests both). Not |x| == inf: the int8 converter clips that constant to the largest float32.
            bad = keras.ops.logical_or(keras.ops.not_equal(images, images),
                                       keras.ops.greater(keras.ops.abs(images), float(np.finfo("float32").max)))
            nan = keras.ops.any(bad, axis=tuple(range(1, len(images.shape))))
            nan = keras.ops.reshape(nan, (-1,) + (1,) * (len(probabilities.shape) - 1))
            probabilities = keras.ops.where(nan, float("nan"), probabilities)
        return {self.output_name: probabilities}


def _converter_kwargs(quantization):
    builtins = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if quantization == "none":
        return {"target_spec": {"supported_ops": builtins}}
    if quantization == "float16":
        return {
            "optimizations": [tf.lite.Optimize.DEFAULT],
            "target_spec": {"supported_ops": builtins, "supported_types": [tf.float16]},
        }
    return {"optimizations": [tf.lite.Optimize.DEFAULT], "target_spec": {"supported_ops": builtins}}


def _convert_int8(wrapper, input_signature, calibration, batch_size, float_ops):
    """Calibrated int8 conversion, keeping `float_ops` in float; returns the flatbuffer bytes."""
    import tempfile

    def representative_dataset():
        for start in range(0, len(calibration) - batch_size + 1, batch_size):
            yield [np.stack(calibration[start : start + batch_size])]

    with tempfile.TemporaryDirectory(prefix="keras_vit_int8_") as saved:
        archive = keras.export.ExportArchive()
        archive.track(wrapper)
        archive.add_endpoint(
            "serving_default", lambda images: wrapper(images, training=False), input_signature=input_signature
        )
        archive.write_out(saved, verbose=False)
        converter = tf.lite.TFLiteConverter.from_saved_model(saved)
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = representative_dataset
        if not float_ops:
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
            return converter.convert()
        # What tf.lite.experimental.QuantizationDebugger does for denylisted ops, without
        # building its instrumented debug model (nor the deprecated tf.lite.Interpreter it runs):
        # calibrate only, then quantize with the MLIR quantizer, skipping `float_ops`. Private TF names:
        # no public API takes an op denylist (pinned by tests/test_private_apis.py).
        from tensorflow.lite.python import convert

        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8, tf.lite.OpsSet.TFLITE_BUILTINS]
        converter.experimental_mlir_quantizer = True
        converter._experimental_calibrate_only = True
        calibrated = converter.convert()
        return convert.mlir_quantize(
            calibrated,
            disable_per_channel=False,
            fully_quantize=False,
            enable_numeric_verify=False,
            denylisted_ops=list(float_ops) + list(_NAN_GUARD_OPS),
        )


def _calibration_images(data, shape, limit):
    """Draws up to `limit` float32 images (height, width, channels) from `data`, checking their shape."""
    if isinstance(data, np.ndarray) or tf.is_tensor(data):
        batches = [np.asarray(data)]
    elif isinstance(data, (str, bytes)):
        raise ValueError(f"Invalid representative_data={data!r}. Expected images, not a string.")
    else:
        try:
            batches = iter(data)
        except TypeError:
            raise ValueError(
                f"Invalid representative_data of type {type(data).__name__}: expected an array, "
                "a tf.data.Dataset or an iterable of image batches."
            ) from None
    images = []
    for batch in batches:
        if isinstance(batch, (tuple, list)) and batch and not np.isscalar(batch[0]):
            batch = batch[0]  # (images, labels) pairs from a training pipeline
        batch = np.asarray(batch, dtype="float32")
        if batch.ndim == len(shape):
            batch = batch[None]
        if batch.ndim != len(shape) + 1 or tuple(batch.shape[1:]) != tuple(shape):
            raise ValueError(
                f"Invalid representative_data: got images of shape {tuple(batch.shape)}, but the "
                f"model takes (N, {', '.join(map(str, shape))})."
            )
        images.extend(batch[: limit - len(images)])
        if len(images) >= limit:
            break
    if not images:
        raise ValueError("Invalid representative_data: it yielded no images.")
    if max(float(np.max(image)) for image in images) <= 1.0:
        warnings.warn(
            "representative_data lies in [0, 1], but exported models take pixels in [0, 255]; "
            "int8 calibration ranges will be wrong if the images were already scaled.",
            stacklevel=3,
        )
    return images
