"""One way to run every artifact: a .keras model, a SavedModel folder, a .tflite or an .onnx file."""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from keras_vit import _keras_file
from keras_vit.data import image_io
from keras_vit.data.processor_graph import decode_processed_images
from keras_vit.export import _common, compute_precision, tflite_metadata
from keras_vit.export.onnx import LABELS_KEY as ONNX_LABELS_KEY
from keras_vit.export.onnx import require
from keras_vit.export.tflite import INPUT_NAME, OUTPUT_NAME, SIGNATURE


class Predictor:
    """Class probabilities from a saved model for images in [0, 255].

    Use `load_predictor(path)` to make one. Attributes: `path`, `kind` ("keras", "saved_model",
    "tflite" or "onnx"), `image_shape` (height, width, channels) and `class_names` (tuple or None).

    Args:
        path: str. The model file or folder, for messages.
        kind: str. "keras", "saved_model", "tflite" or "onnx".
        image_shape: (int, int, int). Height, width and channels the model takes.
        class_names: tuple of str or None. Name of each class.
        run_pixels: callable. Float32 images (N, height, width, channels) in [0, 255] ->
            probabilities (N, classes).
        run_bytes: callable or None. List of encoded image files -> probabilities; None decodes
            and resizes them here. Defaults to None.
        precision: (str, str). What the model computes in ("float32" or "bfloat16") and why.
            Defaults to ("float32", "the file's").

    Example (around a stand-in function; `load_predictor` wraps real models the same way):

    >>> constant = lambda images: np.tile([[0.2, 0.7, 0.1]], (len(images), 1))
    >>> predictor = Predictor("m.keras", "keras", (4, 4, 1), ("cat", "dog", "fox"), constant)
    >>> probabilities = predictor.predict(np.zeros((2, 4, 4)))  # grayscale may omit channels
    >>> probabilities.shape, probabilities.dtype.name
    ((2, 3), 'float32')
    >>> [[(i, name, round(p, 2)) for i, name, p in best] for best in predictor.top_k(probabilities[:1], k=2)]
    [[(1, 'dog', 0.7), (0, 'cat', 0.2)]]
    >>> predictor.predict(np.zeros((0, 4, 4, 1)))
    Traceback (most recent call last):
    ...
    ValueError: Invalid images of shape (0, 4, 4, 1): an empty batch; pass at least one image.
    """

    def __init__(self, path, kind, image_shape, class_names, run_pixels, run_bytes=None,
                 precision=("float32", "the file's")):
        self.precision, self.precision_reason = precision
        self.path = path
        self.kind = kind
        self.image_shape = tuple(image_shape)
        self.class_names = class_names
        self._run_pixels = run_pixels
        self._run_bytes = run_bytes

    def predict(self, images):
        """Returns float32 probabilities (N, classes) for float images (N, height, width, channels) in [0, 255]."""
        images = np.asarray(images, dtype="float32")
        if images.ndim == 3 and self.image_shape[-1] == 1 and images.shape[-1] != 1:
            images = images[..., None]
        if images.ndim != 4 or any(want is not None and got != want  # None: any size (a NaFlex model)
                                   for got, want in zip(images.shape[1:], self.image_shape)):
            raise ValueError(
                f"Invalid images of shape {tuple(images.shape)}: {self.path!r} takes "
                f"(N, {', '.join(map(str, self.image_shape))})."  # None: any size
            )
        if len(images) == 0:
            raise ValueError(
                f"Invalid images of shape {tuple(images.shape)}: an empty batch; pass at least one image."
            )
        finite = np.isfinite(images.reshape(len(images), -1)).all(axis=1)
        if not finite.all():
            # A quantized file would answer NaN pixels with plausible probabilities.
            raise ValueError(
                f"Invalid images: images[{int(np.argmin(finite))}] holds NaN or infinite pixels; expected values in [0, 255]."
            )
        return np.asarray(self._run_pixels(images), dtype="float32")

    def predict_files(self, paths):
        """Returns probabilities (N, classes) for image files (JPEG, PNG, GIF, BMP, WebP), resized to the model's size.

        A model that keeps its checkpoint's image processor (`keras_vit.image_processor`: CLIP's
        shortest-edge resize and centre crop, timm's crop_pct) resizes and crops as it does. A
        SavedModel exported by `keras_vit.export.saved_model` gets the encoded bytes through its
        `serve_bytes` signature, exactly as TF Serving would.
        """
        data = image_io.read_files(paths)
        if self._run_bytes is None:
            return self.predict(image_io.read_image_files(paths, *self.image_shape))
        with image_io.naming_files(paths):
            return np.asarray(self._run_bytes(data), dtype="float32")

    def top_k(self, probabilities, k=5):
        """Returns, per image, the k best (class index, label or None, probability), best first."""
        results = []
        for row in np.asarray(probabilities):
            order = np.argsort(-row, kind="stable")[:k]
            results.append(
                [(int(i), None if self.class_names is None else self.class_names[i], float(row[i])) for i in order]
            )
        return results


def load_predictor(path, *, class_names=None, scaling=None, precision=None, max_num_patches=None, argument_names=None):
    """Opens a `.keras` model, a SavedModel folder (or a TF Serving base folder), a `.tflite` or an `.onnx` file.

    Class names come from `class_names`, else from the labels the export stored (SavedModel
    `assets.extra/labels.txt`, the .tflite file's labels metadata, the .onnx file's
    `metadata_props`), else from
    `<stem>.labels.txt` or `labels.txt` beside (or inside) `path`, else from the `.keras`
    model's own (a zero-shot classifier keeps them in its `vit_config`).

    Args:
        path: str. The model file or folder. A folder holding numbered versions opens the
            highest version.
        class_names: sequence of str or None. Names of the classes. Defaults to None.
        scaling: None or str or (mean, std). For a `.keras` model without a `preprocessing`
            layer: how [0, 255] pixels map to its inputs (see `keras_vit.export.saved_model`).
            Defaults to None.
        precision: str or None. What the model computes in. None: as stored (a `.keras` model
            in float32, an exported file as exported). "auto": a `.keras` model in bfloat16 where
            `inference_precision` picks it on this machine (the table for a CPU with AMX, a timed
            trial on a CPU with native bfloat16), an exported file as exported. "float32" or "bfloat16": a `.keras`
            model converted to it; an exported file must have been exported so (TFLite and ONNX
            files count as float32). Defaults to None.
        max_num_patches: int or None. For a NaFlex `.keras` model (`naflex=True`), which takes
            each image at its own aspect: the patch budget each image is resized to fit
            (`keras_vit.naflex.naflex_inputs`); None uses 256 (SigLIP 2's). Defaults to None.
        argument_names: dict or None. How messages name the arguments, by parameter name (the
            command line's {"path": "MODEL", "precision": "--precision", ...}); None: as
            above. Defaults to None.

    Returns:
        A `Predictor` (its `precision` and `precision_reason` say what it computes in).

    Example:

    >>> import os, tempfile, numpy as np, keras_vit
    >>> path = os.path.join(tempfile.mkdtemp(), "m.keras")
    >>> keras_vit.ViT("tiny", num_classes=3, preprocessing="unit").save(path)
    >>> predictor = load_predictor(path, class_names=["a", "b", "c"])
    >>> predictor.predict(np.zeros((2, 32, 32, 3))).shape
    (2, 3)
    """
    names = {"path": "path", "class_names": "class_names", "scaling": "scaling", "precision": "precision",
             **(argument_names or {})}
    if not isinstance(path, (str, os.PathLike)) or not os.path.exists(path):
        raise FileNotFoundError(f"Model not found: {names['path']}={path!r}.")
    path = os.fspath(path)
    if precision not in (None, "auto", *compute_precision.EXPORT_PRECISIONS):
        raise ValueError(f"Invalid {names['precision']}={precision!r}. Expected None, 'auto' or one of "
                         f"{list(compute_precision.EXPORT_PRECISIONS)}.")
    if path.endswith(".keras"):
        return _keras_predictor(path, class_names, scaling, precision, max_num_patches, names=names)
    if max_num_patches is not None:
        raise ValueError(f"Invalid max_num_patches={max_num_patches!r} for {path!r}: it applies to a NaFlex .keras "
                         "model; an exported file takes the images it was exported for.")
    if scaling is not None:  # an exported file scales its pixels itself, as it was exported
        raise ValueError(f"Invalid {names['scaling']}={scaling!r} for {path!r}: it applies to a .keras model "
                         "without preprocessing; an exported file carries its own scaling. Leave it out.")
    predictor = _file_predictor(path, class_names, names)
    if precision in compute_precision.EXPORT_PRECISIONS and precision != predictor.precision:
        how = ("keras-vit export MODEL.keras --saved-model DIR --precision bfloat16" if precision == "bfloat16"
               else "keras-vit export MODEL.keras --saved-model DIR")
        auto = "precision='auto'" if names["precision"] == "precision" else f"{names['precision']} auto"
        raise ValueError(
            f"Invalid {names['precision']}={precision!r} for {path!r}: the file computes in {predictor.precision}, "
            f"as it was exported; only a .keras model is converted when loaded. Pass {auto}, or export one in "
            f"{precision}: {how}.")
    return predictor


def _file_predictor(path, class_names, names):
    if os.path.isdir(path):
        return _saved_model_predictor(_saved_model_dir(path, names), class_names, names, given=path)
    if path.endswith(".tflite"):
        return _tflite_predictor(path, class_names, names)
    if path.endswith(".onnx"):
        return _onnx_predictor(path, class_names, names)
    raise ValueError(f"Invalid {names['path']}={path!r}. Expected a .keras file, a .tflite file, an .onnx file "
                     "or a SavedModel folder.")


def _opened(open_model, path, kind, names, errors=(Exception,)):
    """`open_model()`; the runtime's error on a file that is no model of its kind (junk, cut off) as one line naming it."""
    try:
        return open_model()
    except errors as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ValueError(f"Invalid {names['path']}={path!r}: not a readable {kind} file ({reason}).") from None


def _names(class_names, stored, classes, names=None):
    checked = class_names if class_names is not None else stored
    if checked is None:
        return None
    # Given names that do not fit are named as the caller passed them (the command line's --labels FILE).
    argument = (names or {}).get("class_names", "class_names")
    if class_names is not None and not isinstance(class_names, str) and len(class_names) != classes:
        raise ValueError(f"Invalid {argument}: got {len(class_names)} names but the model has {classes} classes.")
    return _common.check_class_names(checked, classes)


def model_predictor(model, class_names=None, scaling=None):
    """A `Predictor` of a Keras classifier in memory, as `load_predictor` makes one of its `.keras` file.

    Args:
        model: keras.Model. A classifier taking images (a keras_vit model keeps its labels and
            image processor in its `vit_config`).
        class_names: sequence of str or None. Defaults to the model's own, else None.
        scaling: None or str or (mean, std). See `load_predictor`. Defaults to None.

    Example:

    >>> import numpy as np, keras_vit
    >>> model_predictor(keras_vit.ViT("tiny", num_classes=2, preprocessing="unit")).predict(np.zeros((1, 32, 32, 3))).shape
    (1, 2)
    """
    return _keras_predictor(getattr(model, "name", "model"), class_names, scaling, None, None, model=model)


def _keras_predictor(path, class_names, scaling, precision, max_num_patches, model=None, names=None):
    names = names or {"path": "path"}
    if model is None:
        model = _keras_file.load(path, names["path"])
    precision = inference_precision(model, precision)
    model = compute_precision.compute_model(model, precision[0])
    if _common.is_naflex(model):
        return _naflex_predictor(path, model, class_names, scaling, precision, max_num_patches, names)
    if max_num_patches is not None:
        raise ValueError(f"Invalid max_num_patches={max_num_patches!r} for {path!r}: it applies to a NaFlex model "
                         "(naflex=True), and this one takes images of one size.")
    shape = _common.input_spec(model, what="predict with")
    classes = _common.num_classes(model, what="predict with")
    scale = _common.scale_pixels(_common.resolve_scaling(model, scaling, shape[-1]))
    to_probabilities = _common.to_probabilities(model)
    labels = _names(class_names, (_common.labels_beside(path) if path.endswith(".keras") else None)
                    or _common.class_names_of(model), classes, names)

    def run(images):
        return np.asarray(to_probabilities(model.predict(scale(images), verbose=0, batch_size=64)))

    processor = _common.image_processor(model)
    run_bytes = None
    if processor is not None:  # the checkpoint's own resize and crop, as the SavedModel's serve_bytes runs it

        def run_bytes(data):
            return run(decode_processed_images(tf.constant(data), processor, *shape).numpy())

    return Predictor(path, "keras", shape, labels, run, run_bytes, precision=precision)


def _naflex_predictor(path, model, class_names, scaling, precision, max_num_patches, names=None):
    """A NaFlex classifier's `Predictor`: each image at its own size resized under the patch budget."""
    from keras_vit.naflex import DEFAULT_MAX_NUM_PATCHES, naflex_inputs

    config = model.vit_config
    budget = DEFAULT_MAX_NUM_PATCHES if max_num_patches is None else max_num_patches
    channels, patch = config["channels"], config["patch_size"]
    classes = _common.num_classes(model, what="predict with")
    scale = _common.scale_pixels(_common.resolve_scaling(model, scaling, channels))
    to_probabilities = _common.to_probabilities(model)
    labels = _names(class_names, _common.labels_beside(path), classes, names)

    def run(images):
        inputs, mask = naflex_inputs(list(images), patch, budget, scaling=None)
        # Scaled patch by patch (a patch is pixels in (row, column, channel) order); the padding stays zero.
        pixels = inputs["patches"].reshape(*mask.shape, -1, channels)
        inputs["patches"] = (scale(pixels) * mask[..., None, None]).reshape(inputs["patches"].shape)
        return np.asarray(to_probabilities(model.predict(inputs, verbose=0, batch_size=64)))

    def run_bytes(data):
        return run([image_io.decode_image(item, channels, index=i).numpy() for i, item in enumerate(data)])

    return Predictor(path, "keras", (None, None, channels), labels, run, run_bytes, precision=precision)


def inference_precision(model, precision="auto", machine=None, measure=None):
    """(precision, why) a `.keras` model computes in for `precision` None, "auto", "float32" or "bfloat16".

    "auto" is `keras_vit.machine.precision_choice` for the model on this machine and Keras
    backend: the table (bfloat16 on a CPU with AMX where it ran faster), and on a CPU with native
    bfloat16 a short timed trial of the model's float32 and bfloat16 copies (`inference_trial`),
    cached per machine and model.

    Args:
        model: keras.Model. The loaded model.
        precision: str or None. None, "auto", "float32" or "bfloat16". Defaults to "auto".
        machine: keras_vit.machine.Machine or None. None detects this one. Defaults to None.
        measure: callable or None. The trial's timing function (see `keras_vit.precision_trial.choose`);
            None: `inference_trial(model)`. Defaults to None.

    Example:

    >>> import keras_vit
    >>> from keras_vit.machine import Machine
    >>> model = keras_vit.ViT("tiny", num_classes=2)
    >>> inference_precision(model, "auto", Machine("gpu", 8)), inference_precision(model, "auto", Machine())[0]
    (('bfloat16', 'GPU of compute capability 8: bfloat16 tensor cores'), 'float32')
    """
    from keras_vit import machine as machine_lib
    from keras_vit import precision_workloads

    if precision is None:
        return "float32", "the model's own"
    if precision != "auto":
        return precision, "given"
    machine = machine or machine_lib.detect()
    width = compute_precision.token_width(model)
    shape = tuple(model.inputs[0].shape[1:]) if len(getattr(model, "inputs", None) or ()) == 1 else None
    if shape is None or None in shape:
        policy, reason = machine_lib.table_precision(machine, width=width)
        if machine_lib.needs_trial(machine):
            reason += "; no precision trial: the model takes images of more than one size"
    else:
        blocks = sum(layer.name.startswith("encoderblock_") for layer in compute_precision._all_layers(model))
        workload = precision_workloads.inference_workload(type(model).__name__, model.count_params(), shape, width, blocks)
        policy, reason = machine_lib.precision_choice(machine, width=width, workload=workload,
                                                      measure=measure or inference_trial(model))
    return ("bfloat16" if policy == "mixed_bfloat16" else "float32"), reason


def saved_model_precision(model, machine=None, measure=None):
    """(precision, why) `keras-vit export --precision auto` writes `model`'s SavedModel in.

    On TensorFlow `inference_precision(model, "auto")`, whose trial times the same oneDNN kernels
    TF Serving runs; on another Keras backend the table's answer for TensorFlow (a trial here
    would time this backend's kernels, not the SavedModel's).

    Args:
        model: keras.Model. The model to export.
        machine: keras_vit.machine.Machine or None. None detects this one. Defaults to None.
        measure: callable or None. The trial's timing function; None: `inference_trial(model)`.
            Defaults to None.

    Example:

    >>> import keras_vit
    >>> from keras_vit.machine import Machine
    >>> saved_model_precision(keras_vit.ViT("tiny", num_classes=2), Machine(cpu_flags=frozenset({"avx2"})))[0]
    'float32'
    """
    import keras

    from keras_vit import machine as machine_lib

    if keras.backend.backend() == "tensorflow":
        return inference_precision(model, "auto", machine, measure)
    machine = machine or machine_lib.detect()
    policy, reason = machine_lib.table_precision(machine, "tensorflow", compute_precision.token_width(model))
    if machine_lib.needs_trial(machine):
        reason += f"; no precision trial: the SavedModel computes in TensorFlow, this process on {keras.backend.backend()}"
    return ("bfloat16" if policy == "mixed_bfloat16" else "float32"), reason


def inference_trial(model):
    """The timing function of `model`'s inference trial: its float32 and bfloat16 copies
    (`keras_vit.export.compute_precision.compute_model`), `predict_on_batch` on random images, alternating
    (`keras_vit.precision_trial.time_alternating`)."""
    from keras_vit import precision_trial

    def measure(workload, policies, seconds):
        images = np.random.default_rng(0).random((workload["batch_size"], *workload["input_shape"]), dtype="float32")
        names = {policy: "bfloat16" if policy == "mixed_bfloat16" else "float32" for policy in policies}
        copies = {policy: compute_precision.compute_model(model, names[policy]) for policy in policies}
        steps = {policy: (lambda copy=copies[policy]: copy.predict_on_batch(images)) for policy in policies}
        warmups = {policy: [] for policy in policies}
        timed = precision_trial.time_alternating(
            steps, seconds, report=lambda policy, took, kind: kind == "warmup" and warmups[policy].append(took))
        return [{"policy": policy, "label": names[policy], "seconds": timed[policy], "warmup": warmups[policy]}
                for policy in policies]

    return measure


def _saved_model_dir(path, names):
    if os.path.isfile(os.path.join(path, "saved_model.pb")):
        return path
    versions = [int(name) for name in os.listdir(path) if name.isdigit()]
    if versions:
        candidate = os.path.join(path, str(max(versions)))
        if os.path.isfile(os.path.join(candidate, "saved_model.pb")):
            return candidate
    raise ValueError(f"Invalid {names['path']}={path!r}: the folder holds no saved_model.pb (nor numbered versions "
                     "with one).")


def _saved_model_predictor(path, class_names, names, given=None):
    # Named as given (a TF Serving base folder), its version folder's saved_model.pb named in the reason.
    loaded = _opened(lambda: tf.saved_model.load(path), given or path, "SavedModel", names, (OSError, ValueError))
    signature = loaded.signatures.get("serving_default")
    outputs = signature.structured_outputs if signature is not None else {}
    if "probabilities" not in outputs:
        raise ValueError(
            f"Invalid SavedModel {path!r}: its serving_default has no 'probabilities' output; "
            "export it with keras_vit.export.saved_model."
        )
    spec = next(iter(signature.structured_input_signature[1].values()))
    shape = tuple(spec.shape[1:])
    stored = os.path.join(path, "assets.extra", _common.LABELS_FILENAME)
    stored = _common.read_labels(stored) if os.path.isfile(stored) else _common.labels_beside(path)
    labels = _names(class_names, stored, int(outputs["probabilities"].shape[-1]), names)

    def run(images):
        return signature(images=tf.constant(images))["probabilities"].numpy()

    run_bytes = None
    if "serve_bytes" in loaded.signatures:
        serve_bytes = loaded.signatures["serve_bytes"]

        def run_bytes(data):
            return serve_bytes(image_bytes=tf.constant(data))["probabilities"].numpy()

    marker = os.path.join(path, "assets.extra", compute_precision.PRECISION_FILENAME)
    precision = "float32"
    if os.path.isfile(marker):
        with open(marker) as f:
            precision = f.read().strip()
    predictor = Predictor(path, "saved_model", shape, labels, run, run_bytes, precision=(precision, "the file's"))
    predictor._loaded = loaded  # the signatures' variables live as long as this object
    return predictor


def _tflite_predictor(path, class_names, names):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = _opened(lambda: Interpreter(model_path=path), path, "TFLite", names, (ValueError, RuntimeError))
    signatures = interpreter.get_signature_list()
    if SIGNATURE not in signatures or signatures[SIGNATURE]["inputs"] != [INPUT_NAME]:
        raise ValueError(
            f"Invalid TFLite file {path!r}: expected a '{SIGNATURE}' signature with input "
            f"'{INPUT_NAME}', found {signatures}; export it with keras_vit.export.tflite."
        )
    runner = interpreter.get_signature_runner(SIGNATURE)
    output_name = signatures[SIGNATURE]["outputs"][0]
    details = runner.get_input_details()[INPUT_NAME]
    shape = tuple(int(d) for d in details["shape"][1:])
    static_batch = int(details["shape_signature"][0])
    output_details = runner.get_output_details()[output_name]
    stored = tflite_metadata.labels_in(path)
    stored = stored if stored is not None else _common.labels_beside(path)
    labels = _names(class_names, stored, int(output_details["shape"][-1]), names)

    def run(images):
        step = static_batch if static_batch > 0 else len(images)
        results = []
        for start in range(0, len(images), step):
            chunk = images[start : start + step]
            padded = len(chunk) < step
            if padded:
                chunk = np.concatenate([chunk, np.zeros((step - len(chunk),) + chunk.shape[1:], "float32")])
            out = runner(**{INPUT_NAME: chunk})[output_name]
            results.append(out[: len(images) - start] if padded else out)
        outputs = np.concatenate(results).astype("float32")
        # Files written before every export returned probabilities have a "logits" output.
        return outputs if output_name == OUTPUT_NAME else tf.nn.softmax(outputs, axis=-1).numpy()

    return Predictor(path, "tflite", shape, labels, run)


def _onnx_predictor(path, class_names, names):
    onnxruntime = require("onnxruntime")
    # onnxruntime's errors (InvalidProtobuf, Fail, ...) share no base class but Exception.
    session = _opened(lambda: onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]), path, "ONNX",
                      names)
    inputs, outputs = session.get_inputs(), session.get_outputs()
    if [i.name for i in inputs] != [INPUT_NAME] or [o.name for o in outputs] != [OUTPUT_NAME]:
        raise ValueError(
            f"Invalid ONNX file {path!r}: expected input '{INPUT_NAME}' and output "
            f"'{OUTPUT_NAME}', found {[i.name for i in inputs]} and {[o.name for o in outputs]}; "
            "export it with keras_vit.export.onnx."
        )
    shape = tuple(int(d) for d in inputs[0].shape[1:])
    stored = session.get_modelmeta().custom_metadata_map.get(ONNX_LABELS_KEY)
    stored = tuple(stored.split("\n")) if stored else _common.labels_beside(path)
    labels = _names(class_names, stored, int(outputs[0].shape[-1]), names)

    def run(images):
        return np.concatenate(
            [session.run(None, {INPUT_NAME: images[i : i + 64]})[0] for i in range(0, len(images), 64)]
        )

    return Predictor(path, "onnx", shape, labels, run)
