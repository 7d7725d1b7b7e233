"""Reading checkpoint files into {key: NumPy array}: `.npz` and safetensors, told apart by content.

The safetensors reader is a small NumPy one (8-byte little-endian header length, a JSON header
of {name: {dtype, shape, data_offsets}}, then the raw bytes), so loading needs neither torch nor
the safetensors package. bfloat16 tensors are widened to float32. A folder's weights are one
model.safetensors or, as transformers and timm write large models, shards named by
model.safetensors.index.json.
"""

from __future__ import annotations

import json
import math
import os
import struct
import zipfile

import numpy as np

from keras_vit._atomic import write_bytes


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or does not fit the model.

    A subclass of ValueError, so `except ValueError` catches it too.

    Example:

    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "broken.safetensors")
    >>> with open(path, "wb") as f:
    ...     _ = f.write(b"abc")
    >>> try:
    ...     read_safetensors(path)
    ... except ValueError as error:
    ...     print(type(error).__name__, "-", str(error).split(": ")[-1])
    CheckpointError - 3 bytes.
    """


_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
# A checkpoint folder's weights: one file, or shards listed by an index ({"weight_map": {tensor: file}}).
WEIGHTS_FILE = "model.safetensors"
SHARDED_INDEX = "model.safetensors.index.json"
_SAFETENSORS_DTYPES = {
    "F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
    "I8": "i1", "U8": "u1", "BOOL": "?",
}


def detect_format(path):
    """Returns "npz", "safetensors" or "hf_directory" from the file's content, not its suffix.

    Args:
        path: str. A file, or a folder holding model.safetensors (Hugging Face `save_pretrained`,
            a timm Hub folder).

    Example:

    >>> import numpy as np, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "weights.bin")
    >>> np.savez(path, cls=np.zeros((1, 1, 8), "float32"))
    >>> detect_format(path + ".npz")
    'npz'
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        if any(os.path.isfile(os.path.join(path, name)) for name in (WEIGHTS_FILE, SHARDED_INDEX)):
            return "hf_directory"
        raise CheckpointError(
            f"Directory {path!r} holds no {WEIGHTS_FILE} (nor {SHARDED_INDEX}); expected a Hugging Face "
            "save_pretrained folder or a timm Hub folder (config.json and model.safetensors)."
        )
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Checkpoint file not found: {path!r}.")
    with open(path, "rb") as f:
        head = f.read(9)
    if head[:4] in _ZIP_MAGICS:
        _refuse_torch_zip(path)
        return "npz"
    if len(head) == 9 and head[8:9] == b"{":
        return "safetensors"
    raise CheckpointError(
        f"Cannot tell the format of {path!r}: it is neither an .npz (zip) file nor a safetensors "
        f"file (first bytes {head!r})."
    )


# How to turn a PyTorch state dict into the safetensors file keras_vit reads (torch installed).
TORCH_TO_SAFETENSORS = (
    'python -c "import sys, torch, safetensors.torch as st; '
    "st.save_file({k: v.contiguous() for k, v in torch.load(sys.argv[1], map_location='cpu', "
    "weights_only=True).items()}, sys.argv[2])\" MODEL.pth MODEL.safetensors"
)


def _refuse_torch_zip(path):
    """A PyTorch `.pth`/`.bin` is a zip like `.npz`, but holds a pickle (`data.pkl`)."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.namelist()
    except (zipfile.BadZipFile, OSError):
        return  # read_npz reports the corrupt file
    if any(name == "data.pkl" or name.endswith("/data.pkl") for name in members):
        raise CheckpointError(
            f"{path!r} is a PyTorch checkpoint (a zip holding data.pkl), which keras_vit does not unpickle: "
            f"convert it to safetensors first, e.g. {TORCH_TO_SAFETENSORS}"
        )


def read_npz(path):
    """Reads every array of an `.npz` file (no pickles) into a dict.

    Example:

    >>> import numpy as np, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "w.npz")
    >>> np.savez(path, **{"head/bias": np.zeros(3, "float32")})
    >>> {k: v.shape for k, v in read_npz(path).items()}
    {'head/bias': (3,)}
    """
    try:
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError) as error:
        raise CheckpointError(f"Cannot read .npz checkpoint {path!r} (truncated or corrupt?): {error}") from error


def read_safetensors(path):
    """Reads every tensor of a safetensors file into a dict of NumPy arrays.

    Example:

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
    >>> write_safetensors(path, {"cls_token": np.ones((1, 1, 4), "float32")})
    >>> read_safetensors(path)["cls_token"].shape
    (1, 1, 4)
    """
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise CheckpointError(f"Safetensors file {path!r} is truncated: {size} bytes.")
        (header_size,) = struct.unpack("<Q", raw)
        if header_size > size - 8:
            raise CheckpointError(
                f"Safetensors file {path!r} is truncated or corrupt: header of {header_size} bytes "
                f"in a file of {size} bytes."
            )
        try:
            header = json.loads(f.read(header_size))
        except ValueError as error:
            raise CheckpointError(f"Safetensors file {path!r} has a corrupt header: {error}") from error
        data = np.fromfile(f, dtype=np.uint8)
    if not isinstance(header, dict):
        raise CheckpointError(f"Safetensors file {path!r} has a header of {type(header).__name__}; expected a JSON object.")
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        tensors[name] = _safetensors_entry(path, name, info, data)
    return tensors


def shard_files(folder):
    """The shard file names `folder`'s model.safetensors.index.json lists, in order, each refused unless a plain file name.

    Args:
        folder: str. A checkpoint folder holding model.safetensors.index.json.

    Returns:
        (list of str, dict): the file names, and the index's weight_map {tensor: file name}.
    """
    index = os.path.join(folder, SHARDED_INDEX)
    weight_map = read_json_object(index, "Sharded checkpoint index").get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
        raise CheckpointError(
            f"Sharded checkpoint index {index!r} has weight_map {str(weight_map)[:60]}; expected a non-empty "
            "object of {tensor name: shard file name}."
        )
    files = list(dict.fromkeys(weight_map.values()))
    for name in files:
        if os.path.basename(name) != name or name in ("", ".", ".."):
            raise CheckpointError(f"Sharded checkpoint index {index!r} names shard {name!r}; expected a file name "
                                  "in the index's folder.")
    return files, weight_map


def missing_shards(folder):
    """The shard files `folder`'s model.safetensors.index.json lists that the folder lacks (an empty list: none)."""
    return [name for name in shard_files(folder)[0] if not os.path.isfile(os.path.join(folder, name))]


def read_weights_folder(folder):
    """Every tensor of a checkpoint folder: its model.safetensors, or the shards its index lists.

    A sharded folder must hold every shard, and each shard the tensors the index assigns it;
    anything else is refused, naming the file.

    Example:

    >>> import json, os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> write_safetensors(os.path.join(folder, "model-00001-of-00002.safetensors"), {"a": np.ones(2, "float32")})
    >>> write_safetensors(os.path.join(folder, "model-00002-of-00002.safetensors"), {"b": np.zeros(3, "float32")})
    >>> index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    >>> _ = open(os.path.join(folder, SHARDED_INDEX), "w").write(json.dumps(index))
    >>> {k: v.shape for k, v in read_weights_folder(folder).items()}
    {'a': (2,), 'b': (3,)}
    """
    single = os.path.join(folder, WEIGHTS_FILE)
    if os.path.isfile(single):
        return read_safetensors(single)
    files, weight_map = shard_files(folder)
    index = os.path.join(folder, SHARDED_INDEX)
    missing = missing_shards(folder)
    if missing:
        raise CheckpointError(f"Sharded checkpoint {folder!r} lacks shard file(s) {missing} that {SHARDED_INDEX} lists.")
    tensors = {}
    for name in files:
        path = os.path.join(folder, name)
        shard = read_safetensors(path)
        expected = {key for key, file in weight_map.items() if file == name}
        if set(shard) != expected:
            absent, extra = sorted(expected - set(shard)), sorted(set(shard) - expected)
            raise CheckpointError(
                f"Shard {path!r} does not hold what {index!r} assigns it: missing {absent[:5]}, unlisted {extra[:5]}."
            )
        tensors.update(shard)
    return tensors


def _safetensors_entry(path, name, info, data):
    """One tensor of a safetensors file, every header field checked against the data."""

    def refuse(problem):
        return CheckpointError(f"Safetensors file {path!r}, tensor {name!r}: {problem}.")

    if not isinstance(info, dict):
        raise refuse(f"header entry is {info!r}, expected {{dtype, shape, data_offsets}}")
    offsets, shape, dtype = info.get("data_offsets"), info.get("shape"), info.get("dtype")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(v) for v in offsets)
            and offsets[0] <= offsets[1]):
        raise refuse(f"data_offsets is {offsets!r}, expected [start, end] with 0 <= start <= end")
    if not (isinstance(shape, list) and all(_is_count(v) for v in shape)):
        raise refuse(f"shape is {shape!r}, expected a list of integers >= 0")
    if dtype != "BF16" and dtype not in _SAFETENSORS_DTYPES:
        raise refuse(f"unsupported dtype {dtype!r}; expected one of {sorted(_SAFETENSORS_DTYPES) + ['BF16']}")
    start, end = offsets
    if end > data.size:
        raise refuse(f"truncated file: the tensor ends at byte {end} of the data, which has {data.size} bytes")
    itemsize = 2 if dtype == "BF16" else np.dtype(_SAFETENSORS_DTYPES[dtype]).itemsize
    if (end - start) != itemsize * math.prod(shape):
        raise refuse(f"shape {shape} of {dtype} needs {itemsize * math.prod(shape)} bytes, data_offsets give {end - start}")
    chunk = data[start:end]
    if dtype == "BF16":
        array = (chunk.view("<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        array = chunk.view(_SAFETENSORS_DTYPES[dtype])
    return array.reshape(shape)


def _is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_json_object(path, what):
    """The JSON object in file `path` as a dict; CheckpointError naming the file otherwise.

    Args:
        path: str. A JSON file.
        what: str. What the file is, for messages ("Hugging Face config", "timm config").

    Example:

    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "config.json")
    >>> _ = open(path, "w").write('{"architecture": "vit_tiny_patch16_224"}')
    >>> read_json_object(path, "timm config")
    {'architecture': 'vit_tiny_patch16_224'}
    """
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{what} {path!r} is not valid JSON: {error}") from error
    if not isinstance(value, dict) or not value:
        raise CheckpointError(
            f"{what} {path!r} holds {type(value).__name__} {str(value)[:40]!r}; expected a non-empty JSON object."
        )
    return value


def write_safetensors(path, tensors, metadata=None):
    """Writes {name: array} as a safetensors file (through a temporary file, then a rename).

    Args:
        path: str. Destination file.
        tensors: dict of str -> array. Float, integer or bool NumPy arrays, stored little-endian.
        metadata: dict or None. Written as str -> str in the header's `__metadata__`.
            Defaults to None.

    Example:

    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
    >>> write_safetensors(path, {"pos_embed": np.zeros((1, 5, 8), "float16")}, {"format": "pt"})
    >>> detect_format(path), read_safetensors(path)["pos_embed"].dtype.name
    ('safetensors', 'float16')
    """
    header, offset, chunks = {}, 0, []
    names = {np.dtype(v): k for k, v in _SAFETENSORS_DTYPES.items()}
    for name in sorted(tensors):
        # np.ascontiguousarray makes a 0-d array 1-d: the reshape keeps a scalar (CLIP's logit_scale) a scalar.
        array = np.ascontiguousarray(tensors[name]).reshape(np.shape(tensors[name]))
        array = array.astype(array.dtype.newbyteorder("<"))
        code = names.get(array.dtype)
        if code is None:
            raise ValueError(f"Cannot write tensor {name!r} of dtype {array.dtype} as safetensors.")
        raw = array.tobytes()
        header[name] = {"dtype": code, "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        chunks.append(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    write_bytes(path, [struct.pack("<Q", len(encoded)), encoded] + chunks)


def writable_checkpoint_folder(model, folder, overwrite, writer):
    """(`model.vit_config`, folder path) for a checkpoint writer; refused by name where either will not do.

    Args:
        model: keras.Model. It must be built by `keras_vit.ViT` (the writers read its config).
        folder: str or path-like. The folder to write: absent, empty, or replaced with `overwrite`.
        overwrite: bool. Replace a non-empty `folder`.
        writer: str. The writer's name, for messages ("save_hf").
    """
    config = getattr(model, "vit_config", None)
    if config is None:
        raise CheckpointError(f"{writer} needs a model built by keras_vit.ViT (it reads model.vit_config); "
                              f"model {getattr(model, 'name', model)!r} has none.")
    folder = os.fspath(folder)
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise FileExistsError(f"{folder!r} is a file; {writer} writes a folder.")
    if os.path.isdir(folder) and os.listdir(folder) and not overwrite:
        raise FileExistsError(f"{folder!r} already exists and is not empty; pass overwrite=True to replace it.")
    return config, folder
