"""Hugging Face Hub ids ("hf-hub:ORG/NAME" or "hf-hub:ORG/NAME@REVISION"), fetched through huggingface_hub.

The files a checkpoint needs (config.json, model.safetensors or the shards its
model.safetensors.index.json lists, preprocessor_config.json) are downloaded into
huggingface_hub's cache (`HF_HUB_CACHE`, or `cache_dir=`), so a cache filled once, by
keras_vit or by any other huggingface_hub user, serves later runs offline (`HF_HUB_OFFLINE=1`). A revision is a branch, a tag or a commit hash. Tokens for gated or private
repositories come from `token=` or the `HF_TOKEN` environment variable (huggingface_hub reads
it). Each cached file stored under its sha256 (the blob name huggingface_hub gives a Git LFS
file, such as a model.safetensors) is hashed before use: a corrupt one is refused by path.

Example:

>>> is_hub_id("hf-hub:timm/vit_base_patch16_224.augreg2_in21k_ft_in1k"), is_hub_id("weights.npz")
(True, False)
>>> parse_hub_id("hf-hub:facebook/dinov2-small@main")
('facebook/dinov2-small', 'main')
"""

from __future__ import annotations

import functools
import hashlib
import os
import re

from keras_vit.weights.files import SHARDED_INDEX, WEIGHTS_FILE, CheckpointError, missing_shards, shard_files
from keras_vit.weights.preprocessing import HF_PREPROCESSOR_FILE, HF_PROCESSOR_FILE

PREFIX = "hf-hub:"
# What a keras_vit checkpoint folder holds; with the index, the shards it lists are fetched next.
FILES = ("config.json", WEIGHTS_FILE, HF_PREPROCESSOR_FILE, HF_PROCESSOR_FILE, SHARDED_INDEX)
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_COMMIT = re.compile(r"[0-9a-f]{40}")
# Values of HF_HUB_OFFLINE that mean offline, as huggingface_hub spells them; read at each call
# because huggingface_hub reads the variable once, when it is imported.
_TRUE = ("1", "ON", "YES", "TRUE")
# Hashes already checked in this process: (real path, size, mtime) -> True.
_VERIFIED = {}


def is_hub_id(spec):
    """Whether `spec` is a Hub id, a string that starts with "hf-hub:".

    Example:

    >>> is_hub_id("hf-hub:google/siglip-base-patch16-224"), is_hub_id(None)
    (True, False)
    """
    return isinstance(spec, str) and spec.startswith(PREFIX)


def parse_hub_id(spec):
    """(repo_id, revision or None) of a Hub id "hf-hub:ORG/NAME[@REVISION]".

    Args:
        spec: str. The id.

    Example:

    >>> parse_hub_id("hf-hub:timm/deit_tiny_patch16_224.fb_in1k")
    ('timm/deit_tiny_patch16_224.fb_in1k', None)
    """
    if not is_hub_id(spec):
        raise CheckpointError(f"Invalid Hub id {spec!r}: expected 'hf-hub:ORG/NAME' or 'hf-hub:ORG/NAME@REVISION'.")
    repo, at, revision = spec[len(PREFIX):].partition("@")
    if not _REPO.fullmatch(repo) or (at and not revision.strip()):
        raise CheckpointError(
            f"Invalid Hub id {spec!r}: expected 'hf-hub:ORG/NAME' or 'hf-hub:ORG/NAME@REVISION' (a branch, tag or "
            "commit hash), e.g. 'hf-hub:timm/vit_base_patch16_224.augreg2_in21k_ft_in1k'."
        )
    return repo, (revision if at else None)


def download(spec, *, token=None, cache_dir=None, extra_files=(), alternative=()):
    """Fetches the checkpoint files of Hub id `spec` into the huggingface_hub cache (once) and returns the folder.

    The folder is the cache's snapshot of the resolved commit (its name is the commit hash). With
    `HF_HUB_OFFLINE=1`, or when the Hub cannot be reached, the cache alone is used.

    Args:
        spec: str. "hf-hub:ORG/NAME" or "hf-hub:ORG/NAME@REVISION".
        token: str or None. A Hugging Face token for gated or private repositories; None uses
            `HF_TOKEN` or the saved login. Defaults to None.
        cache_dir: str or None. huggingface_hub cache root; None is its default
            (`HF_HUB_CACHE`, ~/.cache/huggingface/hub). Defaults to None.
        extra_files: tuple of str. Files fetched beside the weights where the repository has
            them (an image-text model's tokenizer files). Defaults to ().
        alternative: tuple of str. Files that stand for config.json and model.safetensors in
            a repository without them (an open_clip folder's config and weights), fetched
            only there. Defaults to ().

    Example:

    >>> import tempfile
    >>> previous = os.environ.get("HF_HUB_OFFLINE")
    >>> os.environ["HF_HUB_OFFLINE"] = "1"  # the cache alone, no network
    >>> try:
    ...     download("hf-hub:nobody/none", cache_dir=tempfile.mkdtemp())
    ... except ValueError as error:
    ...     print(str(error).split(" is not")[0], "HF_HUB_OFFLINE is set" in str(error))
    'hf-hub:nobody/none' True
    >>> _ = os.environ.pop("HF_HUB_OFFLINE") if previous is None else os.environ.update(HF_HUB_OFFLINE=previous)
    """
    repo, revision = parse_hub_id(spec)
    # Imported here: `import keras_vit` should not pay for the Hub client (nor need it for files).
    import huggingface_hub
    from huggingface_hub import errors

    offline = huggingface_hub.is_offline_mode() or os.environ.get("HF_HUB_OFFLINE", "").upper() in _TRUE
    cache = cache_dir or huggingface_hub.constants.HF_HUB_CACHE
    fetch = functools.partial(huggingface_hub.snapshot_download, repo, revision=revision, cache_dir=cache_dir,
                              token=token)
    if not offline and revision is not None and _COMMIT.fullmatch(revision):
        # A commit never changes: its cached snapshot needs no Hub call (which, unreachable, retries for ~20 s).
        try:
            cached = _fetch_weights(fetch, local_files_only=True, extra_files=extra_files, alternative=alternative)
        except (errors.LocalEntryNotFoundError, CheckpointError):
            cached = None
        extras = not extra_files or any(os.path.isfile(os.path.join(cached, name)) for name in extra_files) \
            if cached is not None else False
        if cached is not None and _holds_weights(cached, alternative) and extras:
            return checked_folder(spec, cached, alternative)
    try:
        folder = _fetch_weights(fetch, local_files_only=offline, extra_files=extra_files, alternative=alternative)
    except errors.GatedRepoError as error:
        raise CheckpointError(
            f"{spec!r} is a gated repository: accept its terms on huggingface.co, then pass token= or set HF_TOKEN."
        ) from error
    except errors.RepositoryNotFoundError as error:
        raise CheckpointError(
            f"{spec!r}: the Hub has no repository {repo!r} that this token may read (a private or gated one needs "
            "token= or HF_TOKEN); check the id."
        ) from error
    except errors.RevisionNotFoundError as error:
        raise CheckpointError(f"{spec!r}: repository {repo!r} has no revision {revision!r}.") from error
    except errors.LocalEntryNotFoundError as error:
        why = ("HF_HUB_OFFLINE is set" if offline
               else f"the Hub cannot be reached ({_first_line(error.__cause__ or error)})")
        raise CheckpointError(
            f"{spec!r} is not in the Hugging Face cache {cache!r} (or only in part) and {why}: fetch it once with "
            "network access (HF_HUB_OFFLINE unset), or pass cache_dir= the cache that holds it."
        ) from error
    except errors.HfHubHTTPError as error:
        status = getattr(getattr(error, "response", None), "status_code", None)
        hint = " pass token= or set HF_TOKEN;" if status in (401, 403) else ""
        raise CheckpointError(f"Could not fetch {spec!r} from the Hub (HTTP {status}):{hint} {_first_line(error)}") \
            from error
    except CheckpointError:  # the fetched files themselves are wrong (a corrupt shard index): said by name
        raise
    except (OSError, ValueError) as error:  # the connection dropped midway, a bad cache folder
        raise CheckpointError(f"Could not fetch {spec!r} from the Hugging Face Hub: {_first_line(error)}") from error
    return checked_folder(spec, folder, alternative)


def _fetch_weights(fetch, local_files_only, extra_files=(), alternative=()):
    """The snapshot folder with FILES (and `extra_files`), then with the shards its index lists (a sharded
    repository), or with the `alternative` files (a repository without model.safetensors)."""
    files = list(FILES) + list(extra_files)
    folder = fetch(local_files_only=local_files_only, allow_patterns=files)
    if not os.path.isfile(os.path.join(folder, WEIGHTS_FILE)) and os.path.isfile(os.path.join(folder, SHARDED_INDEX)):
        folder = fetch(local_files_only=local_files_only, allow_patterns=files + shard_files(folder)[0])
    elif alternative and not os.path.isfile(os.path.join(folder, WEIGHTS_FILE)):
        folder = fetch(local_files_only=local_files_only, allow_patterns=files + list(alternative))
    return folder


def _holds_weights(folder, alternative=()):
    if os.path.isfile(os.path.join(folder, WEIGHTS_FILE)):
        return True
    if alternative and all(os.path.isfile(os.path.join(folder, name)) for name in alternative):
        return True
    return os.path.isfile(os.path.join(folder, SHARDED_INDEX)) and not missing_shards(folder)


def checked_folder(spec, folder, alternative=()):
    """`folder` (a cache snapshot of `spec`) when it holds intact weights (one file or every shard, or every
    `alternative` file); else CheckpointError."""
    if not _holds_weights(folder, alternative):
        if os.path.isfile(os.path.join(folder, SHARDED_INDEX)):
            raise CheckpointError(
                f"{spec!r} (revision {os.path.basename(folder)}) lacks shard file(s) {missing_shards(folder)} that its "
                f"{SHARDED_INDEX} lists: fetch it again with network access (HF_HUB_OFFLINE unset)."
            )
        raise CheckpointError(
            f"{spec!r} (revision {os.path.basename(folder)}) has no model.safetensors"
            + "".join(f" nor {name}" for name in alternative if name.endswith(".safetensors"))
            + "; keras_vit reads safetensors weights (a PyTorch pytorch_model.bin must be converted first)."
        )
    for name in sorted(os.listdir(folder)):
        verify_cached_file(os.path.join(folder, name))
    return folder


def verify_cached_file(path):
    """Refuses a cached file whose content does not hash to the sha256 it is stored under.

    huggingface_hub stores each file as `blobs/<etag>` and links the snapshot's name to it; a
    Git LFS file's etag is its sha256. Other blobs (a git object id) and plain files pass.

    Args:
        path: str. A file of a cache snapshot.
    """
    blob = os.path.realpath(path)
    name = os.path.basename(blob)
    if not _SHA256.fullmatch(name) or not os.path.isfile(blob):
        return
    stat = os.stat(blob)
    key = (blob, stat.st_size, stat.st_mtime_ns)
    if key in _VERIFIED:
        return
    digest = file_sha256(blob)
    if digest != name:
        raise CheckpointError(
            f"Cached file {path!r} (blob {blob!r}) is corrupt: its sha256 is {digest}, not the {name} it is stored "
            "under. Delete it and fetch it again."
        )
    _VERIFIED[key] = True


def file_sha256(path):
    """The hex sha256 of file `path`, read in chunks.

    Example:

    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "empty")
    >>> open(path, "wb").close()
    >>> file_sha256(path)[:16]
    'e3b0c44298fc1c14'
    """
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            digest.update(chunk)
    return digest.hexdigest()


def describe(spec, folder):
    """What a training header says of a Hub checkpoint: the id and the commit its folder holds.

    Example:

    >>> describe("hf-hub:timm/vit_x", "/cache/models--timm--vit_x/snapshots/" + "a" * 40)
    'hf-hub:timm/vit_x (revision aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa)'
    """
    return f"{spec} (revision {os.path.basename(os.path.normpath(folder))})"


def _first_line(error):
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
