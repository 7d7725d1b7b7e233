"""A finished run's artefacts: the model, its labels, the exports and the results, written atomically and checked."""

from __future__ import annotations

import os
import zipfile

import keras  # noqa: F401  (the doctest's)

from keras_vit import _atomic
from keras_vit.export._common import write_labels
from keras_vit.training import callbacks as callbacks_lib


def next_saved_model_version(output_dir, name):
    """The SavedModel version an export to `<output_dir>/<name>/` would write now: one past the largest."""
    from keras_vit.export.saved_model import _resolve_version

    return _resolve_version(os.path.join(output_dir, name), None)


def artifact_files(output_dir, name, export=False) -> dict:
    """The files `save_final_artifacts` writes in `output_dir`, by kind (the SavedModel's new version folder aside).

    Example:

    >>> sorted(artifact_files("out", "vit", export=True))
    ['keras', 'labels', 'summary', 'tflite']
    """
    files = {"keras": f"{name}.keras", "labels": f"{name}.labels.txt", "summary": f"{name}.json"}
    if export:
        files["tflite"] = f"{name}.tflite"
    return {kind: os.path.join(output_dir, file) for kind, file in files.items()}


def save_final_artifacts(model, class_names, output_dir, name, result, export=False, saved_model_version=None,
                         log_dir=None) -> dict:
    """Writes and verifies the final artefacts of a run; the one place both the CLI and `train` use.

    `<name>.keras`, `<name>.labels.txt`, with `export` the TF Serving SavedModel
    (`<name>/<version>/`) and `<name>.tflite`, and last `<name>.json` (the results, listing the
    other artefacts). Each is written atomically (`keras_vit._atomic`), so a crash leaves no
    half-written artefact, and checked after writing.

    Args:
        model: keras.Model. The trained model.
        class_names: sequence of str. One name per class, written one per line.
        output_dir: str. Folder of the artefacts (created if missing).
        name: str. File name stem.
        result: dict. The run's results (`train`'s), written as JSON without the model.
        export: bool. Also write the SavedModel and the float32 TFLite file. Defaults to False.
        saved_model_version: int or None. SavedModel version folder, replaced if it exists;
            None for the next free version. Defaults to None.
        log_dir: str or None. Where `<name>.export.log` (the converters' output) goes; a failed
            export raises `keras_vit.export.ExportFailed` naming it, the `.keras` file kept.
            Defaults to `output_dir`.

    Returns:
        dict of artefact kind -> path.

    Example:

    >>> import json, tempfile
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
    >>> result = {"test_accuracy": 0.5}
    >>> paths = save_final_artifacts(model, ["cat", "dog"], tempfile.mkdtemp(), "pets", result)
    >>> sorted(os.path.basename(p) for p in paths.values())
    ['pets.json', 'pets.keras', 'pets.labels.txt']
    >>> open(paths["labels"]).read().split(), json.load(open(paths["summary"]))["test_accuracy"]
    (['cat', 'dog'], 0.5)
    """
    files = artifact_files(output_dir, name, export)
    paths = {kind: files[kind] for kind in ("keras", "labels")}
    callbacks_lib.save_model_atomic(model, paths["keras"])
    write_labels(paths["labels"], class_names)
    if export:
        paths.update(_export(model, class_names, output_dir, name, saved_model_version, log_dir or output_dir,
                             paths["keras"], files["tflite"]))
    paths["summary"] = files["summary"]
    summary = {k: v for k, v in result.items() if k not in ("model", "artifacts")}
    summary["input"] = "raw pixels in [0, 255]; scaling is inside the model"
    summary["artifacts"] = dict(paths)
    _atomic.write_json(paths["summary"], summary)
    _verify_artifacts(paths, len(class_names))
    return paths


def _export(model, class_names, output_dir, name, saved_model_version, log_dir, keras_path, tflite_path) -> dict:
    """Writes the SavedModel and the float32 TFLite file; a failure raises `ExportFailed`, one paragraph.

    The converters' output goes to `<log_dir>/<name>.export.log` when one fails, not to the
    terminal: a failed TFLite conversion prints the whole MLIR module.
    """
    from keras_vit import export as export_lib
    from keras_vit.export._common import failure_reported

    os.makedirs(log_dir, exist_ok=True)
    log_path = os.path.join(log_dir, f"{name}.export.log")
    saved_model_dir = os.path.join(output_dir, name)
    # The model carries its scaling layer, so both exports take raw [0, 255] pixels.
    steps = (
        ("SavedModel", "saved_model", f"--saved-model {saved_model_dir}", lambda: export_lib.saved_model(
            model, saved_model_dir, saved_model_version, class_names=class_names,
            overwrite=saved_model_version is not None)),
        ("TFLite", "tflite", f"--tflite {tflite_path} --overwrite", lambda: export_lib.tflite(
            model, tflite_path, class_names=class_names, overwrite=True).path),
    )
    paths = {}
    with export_lib.shared_process():
        for fmt, kind, flags, write in steps:
            with failure_reported(fmt, keras_path, f"keras-vit export {keras_path} {flags}", log_path):
                paths[kind] = write()
    return paths


def _verify_artifacts(paths, num_classes):
    """Raises OSError unless each artefact is on disk and looks whole."""
    problems = []
    if not zipfile.is_zipfile(paths["keras"]) or "config.json" not in zipfile.ZipFile(paths["keras"]).namelist():
        problems.append(f"{paths['keras']!r} is not a whole .keras archive")
    with open(paths["labels"], encoding="utf-8") as f:
        if len(f.read().splitlines()) != num_classes:
            problems.append(f"{paths['labels']!r} does not hold {num_classes} class names")
    if "saved_model" in paths and not os.path.isfile(os.path.join(paths["saved_model"], "saved_model.pb")):
        problems.append(f"{paths['saved_model']!r} holds no saved_model.pb")
    if "tflite" in paths:
        with open(paths["tflite"], "rb") as f:
            if f.read(8)[4:8] != b"TFL3":
                problems.append(f"{paths['tflite']!r} is not a TFLite flatbuffer")
    if problems:
        raise OSError("Final artefacts failed their check (the run's backup is kept; run again): " + "; ".join(problems))
