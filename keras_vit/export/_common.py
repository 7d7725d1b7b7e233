"""What every export shares: the input contract, class names, output files, failures reported, atomic writes.

Every exported artifact takes float32 NHWC pixels in [0, 255]. A model built with
`preprocessing=` scales them itself; for a model without that layer the export puts the scaling
named by `scaling=` into the exported graph. The precision an export computes in is
`keras_vit.export.compute_precision`'s.
"""

from __future__ import annotations

import contextlib
import os
import tempfile

import numpy as np

from keras_vit import configs
from keras_vit import _atomic
from keras_vit._atomic import atomic_directory, atomic_file  # noqa: F401  the package's one atomic-write helper
from keras_vit._validation import check_new_files
from keras_vit.models.depth import DepthModel
from keras_vit.naflex import is_naflex
from keras_vit.models.head import outputs_probabilities  # noqa: F401  (read by to_probabilities and tflite)

LABELS_FILENAME = "labels.txt"
# scaling="none": the model already consumes [0, 255] pixels as they are.
NO_SCALING = "none"


# Input and output names of a NaFlex model's sequence files (`naflex_tflite`, `naflex_onnx`).
NAFLEX_INPUTS = ("patches", "spatial_shapes")
EMBEDDINGS_NAME = "embeddings"


def naflex_sequence(model, max_num_patches, weights, *, what):
    """(budget, output name) of a NaFlex model exported on one padded patch sequence; refused naming what does not fit.

    The budget is `max_num_patches`, else the one the `weights` processor states, else 256
    (`keras_vit.naflex.processor_settings`); the output is "probabilities" with a head, else
    "embeddings" (one pooled vector per image).
    """
    from keras_vit.naflex import processor_settings

    if not is_naflex(model):
        raise ValueError(f"Cannot {what} model {getattr(model, 'name', model)!r} as a NaFlex patch sequence: it is not "
                         "a NaFlex model (keras_vit.ViT(..., naflex=True)).")
    config = model.vit_config
    outputs = model.outputs
    if len(outputs) != 1 or len(outputs[0].shape) != 2:
        raise ValueError(f"Cannot {what} NaFlex model {model.name!r}: it returns {[tuple(o.shape) for o in outputs]}; "
                         "the file returns one vector per image (build it with a pooling or a head).")
    _, budget, _ = processor_settings(weights, config["patch_size"], max_num_patches, with_scaling=False)
    return budget, OUTPUT_NAME if config["include_top"] else EMBEDDINGS_NAME


def naflex_sequence_function(model, max_num_patches, output_name):
    """The tf.function of one padded patch sequence: patches (1, N, P*P*C), spatial_shapes (1, 2) -> (1, D)."""
    import tensorflow as tf

    config = model.vit_config
    depth = config["patch_size"] ** 2 * config["channels"]
    finish = to_probabilities(model) if output_name == OUTPUT_NAME else (lambda x: x)

    @tf.function(input_signature=[tf.TensorSpec((1, max_num_patches, depth), tf.float32, name=NAFLEX_INPUTS[0]),
                                  tf.TensorSpec((1, 2), tf.int32, name=NAFLEX_INPUTS[1])], autograph=False)
    def serve(patches, spatial_shapes):
        outputs = model({"patches": patches, "spatial_shapes": spatial_shapes}, training=False)
        return {output_name: tf.cast(finish(outputs), tf.float32)}

    return serve


def input_spec(model, *, what="export"):
    """Returns the model's (height, width, channels), each an int or None; raises on unbuilt models and NaFlex ones."""
    if is_naflex(model):
        raise ValueError(
            f"Cannot {what} NaFlex model {model.name!r} (naflex=True: patch sequences of any length, not images of "
            "one size). keras_vit.export.naflex_saved_model exports its embeddings for encoded images of any aspect, "
            "naflex_tflite and naflex_onnx a file on one padded patch sequence; for a file on images of one size "
            "rebuild it with keras_vit.ViT(weights=..., naflex=False, image_size=N)."
        )
    inputs = getattr(model, "inputs", None) if getattr(model, "built", False) else None
    if not inputs:
        raise ValueError(
            f"Cannot {what} model={getattr(model, 'name', model)!r}: it is not built (no input "
            "shape). Build it first, e.g. model.build((None, 224, 224, 3)) or call it on a batch, "
            "or use a functional model such as keras_vit.ViT(...)."
        )
    if len(inputs) != 1:
        raise ValueError(f"Cannot {what} a model with {len(inputs)} inputs; expected one image input.")
    shape = tuple(inputs[0].shape)
    if len(shape) != 4:
        raise ValueError(
            f"Cannot {what} a model whose input has shape {shape}; expected images (batch, height, width, channels)."
        )
    if shape[-1] is None:
        raise ValueError(f"Cannot {what} a model whose input has an unknown number of channels: shape {shape}.")
    return shape[1:]


def image_processor(model):
    """The checkpoint's processor a model of one image size keeps, or None (`keras_vit.image_processor.model_processor`).

    None: files are resized to the model's size (`keras_vit.data.image_io.decode_images`).
    """
    from keras_vit.image_processor import model_processor

    return model_processor(model)


def has_preprocessing(model) -> bool:
    """True when the model scales [0, 255] pixels itself (built with `preprocessing=`)."""
    return any(layer.name == "preprocessing" for layer in model.layers)


def resolve_scaling(model, scaling, channels):
    """Returns (mean, std) float32 arrays of shape (channels,) to apply in the exported graph, or None.

    Args:
        model: keras.Model. The model to export.
        scaling: None, "none", a key of `keras_vit.configs.SCALINGS` or a (mean, std) pair on
            the 0..255 scale. None is only valid when the model has a `preprocessing` layer.
        channels: int. Input channels of the model.
    """
    if has_preprocessing(model):
        if scaling not in (None, NO_SCALING):
            raise ValueError(
                f"Invalid scaling={scaling!r}: model {model.name!r} already scales its inputs "
                "(it has a 'preprocessing' layer); leave scaling=None."
            )
        return None
    if scaling is None:
        raise ValueError(
            f"Model {model.name!r} has no 'preprocessing' layer, so the export must be told how "
            f"[0, 255] pixels map to its inputs: pass scaling= one of {sorted(configs.SCALINGS)}, "
            f"a (mean, std) pair on the 0..255 scale, or {NO_SCALING!r} if it takes raw pixels."
        )
    if scaling == NO_SCALING:
        return None
    if isinstance(scaling, str):
        if scaling not in configs.SCALINGS:
            raise ValueError(
                f"Invalid scaling={scaling!r}. Expected one of "
                f"{sorted(list(configs.SCALINGS) + [NO_SCALING])} or a (mean, std) pair."
            )
        mean, std = configs.SCALINGS[scaling]
    else:
        try:
            mean, std = scaling
        except (TypeError, ValueError):
            raise ValueError(f"Invalid scaling={scaling!r}. Expected a name or a (mean, std) pair.") from None
    mean = np.broadcast_to(np.asarray(mean, "float32").reshape(-1), (channels,)) if np.size(mean) in (1, channels) else None
    std = np.broadcast_to(np.asarray(std, "float32").reshape(-1), (channels,)) if np.size(std) in (1, channels) else None
    if mean is None or std is None:
        raise ValueError(f"Invalid scaling={scaling!r}: mean and std need 1 or {channels} values.")
    if np.any(std <= 0):
        raise ValueError(f"Invalid scaling={scaling!r}: std must be > 0.")
    return mean.copy(), std.copy()


def num_classes(model, *, what="export"):
    """Returns the number of classes of a classifier model (output shape (batch, classes))."""
    outputs = model.outputs
    if isinstance(model, DepthModel):
        raise ValueError(f"Cannot {what} depth model {model.name!r}: it returns depth maps, not classes. Call it in "
                         "Python, or export it with saved_model or tflite (keras-vit export --saved-model/--tflite).")
    if len(outputs) != 1 or len(outputs[0].shape) != 2 or outputs[0].shape[-1] is None:
        shapes = [tuple(o.shape) for o in outputs]
        raise ValueError(
            f"Cannot {what} model {model.name!r}: expected one output of shape (batch, classes), "
            f"got {shapes}. Build it with include_top=True."
        )
    return int(outputs[0].shape[-1])


def check_class_names(class_names, classes):
    """Returns `class_names` as a tuple of str, checked against the number of classes (None passes)."""
    if class_names is None:
        return None
    if isinstance(class_names, str):
        raise ValueError(
            f"Invalid class_names={class_names!r}: expected a sequence of names; "
            f"use read_labels(path) for a {LABELS_FILENAME} file."
        )
    names = tuple(str(name) for name in class_names)
    if len(names) != classes:
        raise ValueError(
            f"Invalid class_names: got {len(names)} names but the model has {classes} classes."
        )
    for name in names:
        if not name or "\n" in name:
            raise ValueError(f"Invalid class name {name!r}: names must be non-empty single lines.")
    return names


def class_order(model_names, data_names, *, names_from, argument="dataset"):
    """Where each of the model's classes sits among a data set's labels: None when they agree.

    A classifier scored on labels in another order, or on other classes, would report a wrong
    accuracy without a word; so the same names in another order are matched by name, and
    different names are refused.

    Args:
        model_names: sequence of str or None. The model's class names (None: unknown, nothing checked).
        data_names: sequence of str. The data set's class names, in label order.
        names_from: str. Where the model's names came from, for the message.
        argument: str. The argument that named the data set, for the message. Defaults to "dataset".

    Returns:
        None where the names agree (or the model's are unknown); else a list whose item j is the data
        set's label index of the model's class j.

    Example:

    >>> class_order(["cat", "dog"], ["dog", "cat"], names_from="vit.labels.txt")
    [1, 0]
    >>> class_order(["cat", "dog"], ["zebra", "cat"], names_from="vit.labels.txt")
    Traceback (most recent call last):
    ...
    ValueError: Invalid dataset: its classes ['zebra', 'cat'] are not the model's ['cat', 'dog'] (vit.labels.txt). ...
    """
    if model_names is None:
        return None
    model_names, data_names = [str(n) for n in model_names], [str(n) for n in data_names]
    if model_names == data_names:
        return None
    if sorted(model_names) == sorted(data_names) and len(set(model_names)) == len(model_names):
        return [data_names.index(name) for name in model_names]

    def shown(names):
        return repr(names) if len(names) <= 6 else f"[{', '.join(map(repr, names[:6]))}, ... {len(names)} in all]"

    raise ValueError(f"Invalid {argument}: its classes {shown(data_names)} are not the model's {shown(model_names)} "
                     f"({names_from}). Pass by_index=True (--by-index) to score its labels by index anyway.")


def read_labels(path):
    """Reads class names from a text file, one name per line (blank trailing lines ignored).

    Args:
        path: str. The labels file, UTF-8.

    Returns:
        A tuple of str.

    Example:

    >>> path = os.path.join(tempfile.mkdtemp(), "labels.txt")
    >>> with open(path, "w") as f:
    ...     _ = f.write("T-shirt/top\\nankle boot\\n\\n")
    >>> read_labels(path)
    ('T-shirt/top', 'ankle boot')
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Labels file not found: {path!r}.")
    with open(path, encoding="utf-8") as f:
        names = [line.rstrip("\r\n") for line in f]
    while names and not names[-1].strip():
        names.pop()
    if not names:
        raise ValueError(f"Labels file {path!r} is empty; expected one class name per line.")
    return tuple(names)


def labels_beside(model_path):
    """Class names stored beside `model_path`, or None.

    Looks for `<stem>.labels.txt` (what `keras-vit train` writes next to `<stem>.keras`), then
    `labels.txt` in the model's folder (or inside a SavedModel folder).

    Args:
        model_path: str. A model file (it need not exist) or a SavedModel folder.

    Returns:
        A tuple of str, or None when no labels file is found.

    Example:

    >>> folder = tempfile.mkdtemp()
    >>> labels_beside(os.path.join(folder, "vit.tflite")) is None
    True
    >>> with open(os.path.join(folder, "vit.labels.txt"), "w") as f:
    ...     _ = f.write("cat\\ndog\\n")
    >>> labels_beside(os.path.join(folder, "vit.tflite"))
    ('cat', 'dog')
    """
    model_path = os.fspath(model_path)
    if os.path.isdir(model_path):
        candidates = [os.path.join(model_path, LABELS_FILENAME)]
    else:
        stem = os.path.splitext(os.path.abspath(model_path))[0]
        candidates = [stem + ".labels.txt", os.path.join(os.path.dirname(stem), LABELS_FILENAME)]
    for candidate in candidates:
        if os.path.isfile(candidate):
            return read_labels(candidate)
    return None


def write_labels(path, class_names):
    """Writes one class name per line to `path`, atomically (`keras_vit._atomic`)."""
    _atomic.write_text(path, "".join(name + "\n" for name in class_names))


def file_size(path):
    """Size in bytes of a file, or of everything inside a folder."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)


# Input and output names of the graphs every export writes (TFLite signature, ONNX graph).
INPUT_NAME = "images"
OUTPUT_NAME = "probabilities"
# A depth model's output (batch, height, width), returned as the model computes it.
DEPTH_OUTPUT_NAME = "depth"


def output_kind(model, *, what="export"):
    """What an export of `model` returns: ("probabilities", classes) for a classifier, ("depth", None) for a depth model.

    Example:

    >>> import keras_vit
    >>> output_kind(keras_vit.ViT("tiny", num_classes=3)), output_kind(keras_vit.DepthEstimator(backbone="tiny"))
    (('probabilities', 3), ('depth', None))
    """
    if isinstance(model, DepthModel):
        return DEPTH_OUTPUT_NAME, None
    return OUTPUT_NAME, num_classes(model, what=what)


def class_names_of(model, class_names=None):
    """`class_names` when given, else the ones the model keeps (`vit_config["class_names"]`: a zero-shot classifier's), or None.

    Example:

    >>> import keras_vit
    >>> class_names_of(keras_vit.ViT("tiny", num_classes=2), ["a", "b"]), class_names_of(keras_vit.ViT("tiny")) is None
    (['a', 'b'], True)
    """
    if class_names is not None:
        return class_names
    return (getattr(model, "vit_config", None) or {}).get("class_names")


def check_output_names(class_names, classes):
    """`check_class_names`, and refuses class names for a model without classes (`classes` None: a depth model)."""
    if classes is None and class_names is not None:
        raise ValueError("Invalid class_names: a depth model has no classes; leave class_names out.")
    return None if classes is None else check_class_names(class_names, classes)


def to_output(model):
    """`to_probabilities` for a classifier; for a depth model, its depth in float32 as it is."""
    if isinstance(model, DepthModel):
        import tensorflow as tf

        return lambda outputs: tf.cast(outputs, tf.float32)
    return to_probabilities(model)


def static_image_shape(model, *, what):
    """Returns the model's (height, width, channels), all ints; raises for a dynamic image size."""
    shape = input_spec(model, what=what)
    if None in shape:
        raise ValueError(
            f"Cannot {what} model {model.name!r}: its input shape (batch, *{shape}) has a dynamic "
            "height or width, and the file needs a static one. Rebuild it with a fixed image_size= "
            "(weights can be copied with set_weights)."
        )
    return shape


def output_file(path, suffix, *, overwrite):
    """Returns `path` made absolute, checked to end in `suffix` and not to exist unless `overwrite`."""
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path).endswith(suffix):
        raise ValueError(f"Invalid path={path!r}. Expected a file name ending in {suffix!r}.")
    path = os.path.abspath(os.fspath(path))
    if os.path.isdir(path):
        raise ValueError(f"Invalid path={path!r}: it is a folder.")
    check_new_files([path], overwrite)
    return path


class ExportFailed(RuntimeError):
    """An export of a saved model failed; the message is one paragraph a person can act on.

    Args:
        fmt: str. The format, e.g. "TFLite" or "SavedModel".
        cause: BaseException. What the converter raised.
        model_path: str. The saved `.keras` model the export can be retried from.
        retry: str. The `keras-vit export` command that retries it.
        log_path: str. The file holding the converter's whole output and the traceback.

    Example:

    >>> error = ExportFailed("TFLite", ValueError("op X unsupported\\nMLIR ..."), "m.keras",
    ...                      "keras-vit export m.keras --tflite m.tflite", "run/m.export.log")
    >>> print(error)  # doctest: +NORMALIZE_WHITESPACE
    The TFLite export failed: ValueError: op X unsupported. The trained model is saved in m.keras;
    retry the export from it with `keras-vit export m.keras --tflite m.tflite`. The converter's
    whole output is in run/m.export.log.
    """

    def __init__(self, fmt, cause, model_path, retry, log_path):
        self.fmt, self.cause, self.model_path, self.retry, self.log_path = fmt, cause, model_path, retry, log_path
        first_line = (str(cause).strip().splitlines() or [""])[0]
        if len(first_line) > 200:
            first_line = first_line[:200] + "..."
        super().__init__(
            f"The {fmt} export failed: {type(cause).__name__}: {first_line.rstrip('.')}. The trained model is "
            f"saved in {model_path}; retry the export from it with `{retry}`. The converter's whole output "
            f"is in {log_path}."
        )


@contextlib.contextmanager
def output_to(log_path):
    """Within the block, everything written to file descriptors 1 and 2 goes to `log_path` (appended).

    TensorFlow's converters write their diagnostics (a TFLite conversion error dumps the whole
    MLIR module, thousands of lines) from C++ straight to the process's stderr, which Python's
    `sys.stderr` does not see; only swapping the descriptors catches them.

    Example:

    >>> path = os.path.join(tempfile.mkdtemp(), "export.log")
    >>> with output_to(path):
    ...     _ = os.write(2, b"from C++\\n")
    >>> open(path).read()
    'from C++\\n'
    """
    import sys

    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with open(log_path, "ab") as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            try:
                yield log_path
            finally:
                for stream in (sys.stdout, sys.stderr):
                    stream.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
    finally:
        for fd in saved:
            os.close(fd)


@contextlib.contextmanager
def failure_reported(fmt, model_path, retry, log_path):
    """Runs one export with its terminal output held back; a converter failure becomes `ExportFailed`.

    What the converter printed and the traceback are appended to `log_path` when it fails, and
    dropped when it succeeds.

    The caller's own argument errors (ValueError, FileExistsError, FileNotFoundError) pass through
    unchanged: they are the user's to fix and already say how.

    Args:
        fmt: str. The format, for the message ("SavedModel", "TFLite", "ONNX").
        model_path: str. The saved model the export reads.
        retry: str. The `keras-vit export` command that retries this export.
        log_path: str. Where the converter's output and the traceback go on failure (appended).

    Example:

    >>> log = os.path.join(tempfile.mkdtemp(), "vit.export.log")
    >>> with failure_reported("ONNX", "vit.keras", "keras-vit export vit.keras --onnx vit.onnx", log):
    ...     raise RuntimeError("Unsupported ops: Foo")
    Traceback (most recent call last):
    ...
    keras_vit.export._common.ExportFailed: The ONNX export failed: RuntimeError: Unsupported ops: Foo. ...
    """
    import traceback

    with tempfile.TemporaryDirectory(prefix="keras_vit_export_") as folder:
        captured = os.path.join(folder, "output.log")
        try:
            with output_to(captured):
                yield
        except (ValueError, FileExistsError, FileNotFoundError, ImportError):
            raise
        except Exception as error:
            with open(captured, encoding="utf-8", errors="replace") as f:
                output = f.read()
            with open(log_path, "a", encoding="utf-8") as log:
                log.write(f"{fmt} export of {model_path}:\n{output}\n{''.join(traceback.format_exception(error))}\n")
            raise ExportFailed(fmt, error, model_path, retry, log_path) from error


def to_probabilities(model):
    """Returns a function: `model`'s outputs -> float32 probabilities, softmax only when its head gives logits.

    A softmax or sigmoid head's outputs pass as they are.

    Every export and `predict` applies it, so each artifact returns probabilities whichever head
    the model has, and never softmax twice.

    Example:

    >>> import keras_vit
    >>> apply = to_probabilities(keras_vit.ViT("tiny", num_classes=2, classifier_activation=None))
    >>> np.asarray(apply(np.zeros((1, 2), "float32")))
    array([[0.5, 0.5]], dtype=float32)
    """
    import tensorflow as tf

    from keras_vit.models.head import head_activation

    # A sigmoid head (SigLIP's zero-shot classifier) gives each class its own probability already.
    from_probabilities = head_activation(model) == "sigmoid" or outputs_probabilities(model)

    def apply(outputs):
        outputs = tf.cast(outputs, tf.float32)
        return outputs if from_probabilities else tf.nn.softmax(outputs, axis=-1)

    return apply


def scale_pixels(mean_std):
    """Returns a function: [0, 255] pixels -> the model's inputs, for `resolve_scaling`'s (mean, std) or None."""
    from keras_vit.applications import scale_pixels as scale

    return (lambda images: images) if mean_std is None else (lambda images: scale(images, *mean_std))
