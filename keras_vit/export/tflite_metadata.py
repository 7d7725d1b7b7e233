"""TFLite model metadata: the image-classifier description and labels file that LiteRT tools read.

The layout is the one the TFLite Support metadata tools (MetadataPopulator, Task Library,
Android Studio ML Binding) write and read: a `ModelMetadata` flatbuffer (file identifier
"M001") in the model's "TFLITE_METADATA" metadata buffer, and the associated files (here the
labels, one per line) stored uncompressed in a zip archive appended to the .tflite. The
interpreter ignores the bytes after the model flatbuffer.

Written here with the `flatbuffers` package from the published schema
(tensorflow_lite_support/metadata/metadata_schema.fbs, version 1.0.0 fields only): the
`tflite-support` package that ships a writer pins protobuf < 4, which TensorFlow 2.21 cannot use.
"""

from __future__ import annotations

import io
import mmap
import zipfile

import flatbuffers
import numpy as np
from flatbuffers import table

METADATA_NAME = "TFLITE_METADATA"
FILE_IDENTIFIER = b"M001"
# Oldest metadata parser that understands every field written here (all from schema 1.0.0).
MIN_PARSER_VERSION = "1.0.0"
LABELS_FILE = "labels.txt"

# Enum values and field slots from metadata_schema.fbs.
_TENSOR_AXIS_LABELS = 2  # AssociatedFileType
_RGB, _GRAYSCALE = 1, 2  # ColorSpaceType
_FEATURE_PROPERTIES, _IMAGE_PROPERTIES = 1, 2  # ContentProperties union
_NORMALIZATION_OPTIONS = 1  # ProcessUnitOptions union
_MODEL_SUBGRAPHS, _SUBGRAPH_OUTPUTS, _TENSOR_FILES = 3, 3, 6
_FILE_NAME, _FILE_TYPE = 0, 2


def add_metadata(model_bytes, *, name, image_shape, class_names=None, description=""):
    """Returns a .tflite file's bytes with image-classifier metadata and, if given, the labels inside.

    Args:
        model_bytes: bytes. A .tflite flatbuffer with one float32 image input and one
            probabilities output.
        name: str. Model name stored in the metadata.
        image_shape: (int, int, int). Height, width and channels of the input.
        class_names: sequence of str or None. Stored as the output's labels file. Defaults to None.
        description: str. Model description. Defaults to "".

    Example (on a one-op model; `keras_vit.export.tflite` calls it on every file it writes):

    >>> import tensorflow as tf
    >>> @tf.function(input_signature=[tf.TensorSpec((1, 2, 2, 1), tf.float32)])
    ... def model(images):
    ...     return tf.nn.softmax(tf.reshape(images, (1, 4)))
    >>> converter = tf.lite.TFLiteConverter.from_concrete_functions([model.get_concrete_function()], model)
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "toy.tflite")
    >>> with open(path, "wb") as f:
    ...     _ = f.write(add_metadata(converter.convert(), name="toy", image_shape=(2, 2, 1), class_names=list("abcd")))
    >>> zipfile.ZipFile(path).read("labels.txt")
    b'a\\nb\\nc\\nd\\n'
    >>> labels_in(path)
    ('a', 'b', 'c', 'd')
    """
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.tools import flatbuffer_utils

    metadata = _model_metadata(name, description, image_shape, class_names is not None)
    model = flatbuffer_utils.read_model_from_bytearray(bytearray(model_bytes))
    buffer = schema.BufferT()
    buffer.data = np.frombuffer(metadata, dtype=np.uint8)
    model.metadata = [entry for entry in model.metadata or [] if _text(entry.name) != METADATA_NAME]
    model.buffers.append(buffer)
    entry = schema.MetadataT()
    entry.name = METADATA_NAME
    entry.buffer = len(model.buffers) - 1
    model.metadata.append(entry)
    content = bytes(flatbuffer_utils.convert_object_to_bytearray(model))
    if class_names is None:
        return content
    archive = io.BytesIO()
    archive.write(content)
    # Stored, not deflated: the metadata extractors read the files in place.
    with zipfile.ZipFile(archive, "a", compression=zipfile.ZIP_STORED) as files:
        files.writestr(LABELS_FILE, "".join(str(label) + "\n" for label in class_names))
    return archive.getvalue()


def read_metadata(path):
    """Returns the `ModelMetadata` flatbuffer bytes stored in a .tflite file, or None.

    Args:
        path: str. The .tflite file.
    """
    from ai_edge_litert import schema_py_generated as schema

    # Mapped, not read: only the few pages holding the metadata are touched.
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        model = schema.Model.GetRootAs(data, 0)
        for i in range(model.MetadataLength()):
            entry = model.Metadata(i)
            if _text(entry.Name()) == METADATA_NAME:
                buffer = model.Buffers(entry.Buffer())
                start = buffer.Offset()
                if start:  # a model over 2 GB keeps its buffers after the flatbuffer
                    return bytes(data[start : start + buffer.Size()])
                return buffer.DataAsNumpy().tobytes()
    return None


def labels_in(path):
    """Class names that a .tflite file carries as its output's TENSOR_AXIS_LABELS file, or None.

    Args:
        path: str. The .tflite file.
    """
    metadata = read_metadata(path)
    if metadata is None:
        return None
    if metadata[4:8] != FILE_IDENTIFIER:
        raise ValueError(
            f"Invalid TFLite metadata in {path!r}: file identifier {metadata[4:8]!r}, expected {FILE_IDENTIFIER!r}."
        )
    names = []
    for file in _tables(_root(metadata), [_MODEL_SUBGRAPHS, _SUBGRAPH_OUTPUTS, _TENSOR_FILES]):
        kind = file.Offset(4 + 2 * _FILE_TYPE)
        if kind and file.Get(flatbuffers.number_types.Int8Flags, kind + file.Pos) == _TENSOR_AXIS_LABELS:
            names.append(_text(file.String(file.Offset(4 + 2 * _FILE_NAME) + file.Pos)))
    if not names:
        return None
    try:
        with zipfile.ZipFile(path) as files:
            text = files.read(names[0]).decode("utf-8")
    except (zipfile.BadZipFile, KeyError):
        raise ValueError(
            f"Invalid TFLite file {path!r}: its metadata names the labels file {names[0]!r}, but no "
            "such file is zipped onto the model; pass class_names= or export it again."
        ) from None
    labels = text.splitlines()
    while labels and not labels[-1].strip():
        labels.pop()
    return tuple(labels) or None


def _root(data):
    return table.Table(bytearray(data), flatbuffers.encode.Get(flatbuffers.packer.uoffset, data, 0))


def _tables(root, path):
    """Every table reached from `root` by following the vector-of-tables slots in `path`."""
    level = [root]
    for slot in path:
        found = []
        for tab in level:
            offset = tab.Offset(4 + 2 * slot)
            if not offset:
                continue
            start = tab.Vector(offset)
            for i in range(tab.VectorLen(offset)):
                found.append(table.Table(tab.Bytes, tab.Indirect(start + 4 * i)))
        level = found
    return level


def _text(value):
    return value.decode("utf-8") if isinstance(value, (bytes, bytearray)) else value


def _model_metadata(name, description, image_shape, with_labels):
    """The ModelMetadata flatbuffer of an image classifier taking [0, 255] pixels."""
    height, width, channels = image_shape
    b = flatbuffers.Builder(1024)

    def table_of(slots):
        """Ends a table from {slot: (kind, value)}; kind is 'offset', 'byte' or 'uint'."""
        b.StartObject(max(slots) + 1 if slots else 0)
        for slot, (kind, value) in slots.items():
            if kind == "offset":
                b.PrependUOffsetTRelativeSlot(slot, value, 0)
            elif kind == "byte":
                b.PrependInt8Slot(slot, value, 0)
            else:
                b.PrependUint32Slot(slot, value, 0)
        return b.EndObject()

    def vector_of(offsets):
        b.StartVector(4, len(offsets), 4)
        for offset in reversed(offsets):
            b.PrependUOffsetTRelative(offset)
        return b.EndVector()

    def floats(values):
        return b.CreateNumpyVector(np.asarray(values, dtype="<f4"))

    # Input: the exported graph scales [0, 255] pixels itself, so tools must pass them unchanged.
    image_size = table_of({0: ("uint", width), 1: ("uint", height)})
    image_properties = table_of({0: ("byte", _RGB if channels == 3 else _GRAYSCALE), 1: ("offset", image_size)})
    input_content = table_of({0: ("byte", _IMAGE_PROPERTIES), 1: ("offset", image_properties)})
    normalization = table_of({0: ("offset", floats([0.0])), 1: ("offset", floats([1.0]))})
    process_unit = table_of({0: ("byte", _NORMALIZATION_OPTIONS), 1: ("offset", normalization)})
    input_stats = table_of({0: ("offset", floats([255.0])), 1: ("offset", floats([0.0]))})
    input_name, input_text = b.CreateString("image"), b.CreateString("Image pixels in [0, 255].")
    input_tensor = table_of({
        0: ("offset", input_name), 1: ("offset", input_text), 3: ("offset", input_content),
        4: ("offset", vector_of([process_unit])), 5: ("offset", input_stats),
    })

    output_content = table_of({0: ("byte", _FEATURE_PROPERTIES), 1: ("offset", table_of({}))})
    output_stats = table_of({0: ("offset", floats([1.0])), 1: ("offset", floats([0.0]))})
    output_slots = {
        0: ("offset", b.CreateString("probability")),
        1: ("offset", b.CreateString("Probability of each class.")),
        3: ("offset", output_content),
        5: ("offset", output_stats),
    }
    if with_labels:
        file_name, file_text = b.CreateString(LABELS_FILE), b.CreateString("Class names, one per line.")
        labels = table_of({0: ("offset", file_name), 1: ("offset", file_text), 2: ("byte", _TENSOR_AXIS_LABELS)})
        output_slots[_TENSOR_FILES] = ("offset", vector_of([labels]))
    output_tensor = table_of(output_slots)

    subgraph = table_of({
        2: ("offset", vector_of([input_tensor])), _SUBGRAPH_OUTPUTS: ("offset", vector_of([output_tensor])),
    })
    model_slots = {
        0: ("offset", b.CreateString(name)),
        _MODEL_SUBGRAPHS: ("offset", vector_of([subgraph])),
        7: ("offset", b.CreateString(MIN_PARSER_VERSION)),
    }
    if description:
        model_slots[1] = ("offset", b.CreateString(description))
    b.Finish(table_of(model_slots), file_identifier=FILE_IDENTIFIER)
    return bytes(b.Output())
