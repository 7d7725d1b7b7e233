"""A finished run's artefacts: the model, its labels, the exports and the results, written atomically and checked."""

from __future__ import annotations

import os
import zipfile

import keras  # noqa: F401  (the doctest's)

from keras_vit import _atomic
from keras_vit.training import callbacks as callbacks_lib


def next_saved_model_version(output_dir, name):
    """The SavedModel version an export to `<output_dir>/<name>/` would write now: one past the largest."""
    from keras_vit.export.saved_model import _resolve_version

    return _resolve_version(os.path.join(output_dir, name), None)


def save_final_artifacts(model, class_names, output_dir, name, result, export=False, saved_model_version=None) -> dict:
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
    paths = {
        "keras": os.path.join(output_dir, f"{name}.keras"),
        "labels": os.path.join(output_dir, f"{name}.labels.txt"),
    }
    callbacks_lib.save_model_atomic(model, paths["keras"])
    _atomic.write_text(paths["labels"], "".join(f"{c}\n" for c in class_names))
    if export:
        from keras_vit import export as export_lib

        # The model carries its scaling layer, so both exports take raw [0, 255] pixels.
        with export_lib.shared_process():
            paths["saved_model"] = export_lib.saved_model(
                model, os.path.join(output_dir, name), saved_model_version, class_names=class_names,
                overwrite=saved_model_version is not None,
            )
            paths["tflite"] = export_lib.tflite(
                model, os.path.join(output_dir, f"{name}.tflite"), class_names=class_names, overwrite=True
            ).path
    paths["summary"] = os.path.join(output_dir, f"{name}.json")
    summary = {k: v for k, v in result.items() if k not in ("model", "artifacts")}
    summary["input"] = "raw pixels in [0, 255]; scaling is inside the model"
    summary["artifacts"] = dict(paths)
    _atomic.write_json(paths["summary"], summary)
    _verify_artifacts(paths, len(class_names))
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
