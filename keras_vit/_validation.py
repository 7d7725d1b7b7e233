"""Argument checks shared by layers and builders, so every bad input gets the same clear error."""

from __future__ import annotations

import numbers
import os
import tempfile

import numpy as np


def plain(value):
    """`value` with NumPy scalars (np.int64(3), np.float32(0.1), np.True_) made Python ones, in tuples and lists too.

    Builders take what NumPy code hands them (a class count from `np.unique`), and store only
    Python values in their JSON config.

    Example:

    >>> plain(np.int64(3)), plain((np.int32(28), 28)), plain("token")
    (3, (28, 28), 'token')
    """
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (tuple, list)):
        return type(value)(plain(item) for item in value)
    return value


def check_bool(name: str, value) -> None:
    """Raises ValueError unless `value` is True or False (a string such as "no" would read as True).

    Example:

    >>> check_bool("include_top", "no")
    Traceback (most recent call last):
    ...
    ValueError: Invalid include_top='no'. Expected True or False.
    """
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"Invalid {name}={value!r}. Expected True or False.")


def check_choice(name: str, value, choices) -> None:
    """Raises ValueError unless `value` is one of `choices`."""
    if value not in choices:
        raise ValueError(
            f"Invalid {name}={value!r}. Expected one of {sorted(map(repr, choices))}."
        )


def check_rate(name: str, value) -> None:
    """Raises ValueError unless 0 <= value < 1 (a dropout-style rate)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1:
        raise ValueError(f"Invalid {name}={value!r}. Expected a number in [0, 1).")


def check_positive_int(name: str, value, minimum: int = 1) -> None:
    """Raises ValueError unless `value` is an int >= `minimum` (default 1)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"Invalid {name}={value!r}. Expected an integer >= {minimum}.")


def check_divisible(name: str, value: int, divisor_name: str, divisor: int) -> None:
    """Raises ValueError unless `divisor` divides `value`."""
    if value % divisor:
        raise ValueError(
            f"Invalid {name}={value!r}: it must be divisible by {divisor_name}={divisor}."
        )


def check_fraction(name: str, value) -> None:
    """Raises ValueError unless `value` is a number strictly between 0 and 1 (a share, e.g. 0.1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise ValueError(f"Invalid {name}={value!r}. Expected a fraction in (0, 1), e.g. 0.1.")


def check_positive_number(name: str, value) -> None:
    """Raises ValueError unless `value` is a finite number > 0."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < float("inf"):
        raise ValueError(f"Invalid {name}={value!r}. Expected a number > 0.")


def check_new_files(paths, overwrite: bool) -> None:
    """The overwrite rule of everything that writes a user's file: FileExistsError for one that exists, unless `overwrite`.

    Every `keras-vit` command that writes files the user names takes it as `--overwrite` (README,
    "Command line"); the library's writers as `overwrite=`.

    Args:
        paths: iterable of str or path-like. The files (or folders) about to be written.
        overwrite: bool. Replace what exists.

    Example:

    >>> check_new_files([__file__, "no-such-file.npz"], overwrite=True)
    >>> check_new_files(["no-such-file.npz", __file__], overwrite=False)
    Traceback (most recent call last):
    ...
    FileExistsError: '..._validation.py' already exists; pass overwrite=True (--overwrite) to replace it.
    """
    existing = [os.path.abspath(os.fspath(path)) for path in paths if os.path.lexists(path)]
    if existing and not overwrite:
        more = f" (and {len(existing) - 1} more of the files to write)" if len(existing) > 1 else ""
        raise FileExistsError(f"{existing[0]!r} already exists{more}; pass overwrite=True (--overwrite) to replace it.")


def check_writable_folder(name: str, path) -> None:
    """Raises ValueError unless `path` is a folder, or can be created, and a file can be written in it.

    It writes and removes a probe folder in the nearest existing folder, as permission bits
    alone do not tell (a read-only file system, or root).

    Example:

    >>> import tempfile
    >>> check_writable_folder("output_dir", os.path.join(tempfile.mkdtemp(), "new", "folder"))
    >>> check_writable_folder("output_dir", __file__)
    Traceback (most recent call last):
    ...
    ValueError: Invalid output_dir=...: it is a file. Expected a folder (existing or to be created).
    """
    path = os.path.abspath(os.fspath(path))
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"Invalid {name}={path!r}: it is a file. Expected a folder (existing or to be created).")
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ValueError(f"Invalid {name}={path!r}: {existing!r} is a file, so the folder cannot be created there.")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".tmp-write-probe-", dir=existing))
    except OSError as error:
        raise ValueError(f"Invalid {name}={path!r}: cannot write in {existing!r} ({error.strerror}).") from None


def check_number_in(name: str, value, low: float, high: float, *, include_low: bool = True,
                    include_high: bool = True) -> None:
    """Raises ValueError unless `value` is a real number (not NaN, not bool) within [low, high].

    Args:
        name: str. The argument's name, for the message.
        value: the value to check.
        low: float. Lower bound (may be -inf).
        high: float. Upper bound (may be inf).
        include_low: bool. Whether `low` itself is allowed. Defaults to True.
        include_high: bool. Whether `high` itself is allowed. Defaults to True.

    Example:

    >>> check_number_in("label_smoothing", 0.1, 0, 1, include_high=False)
    >>> check_number_in("learning_rate", float("nan"), 0, float("inf"), include_low=False, include_high=False)
    Traceback (most recent call last):
    ...
    ValueError: Invalid learning_rate=nan. Expected a number in (0, inf).
    """
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and value == value
    if ok:
        ok = (low <= value if include_low else low < value) and (value <= high if include_high else value < high)
    if not ok:
        interval = f"{'[' if include_low else '('}{low:g}, {high:g}{']' if include_high else ')'}"
        raise ValueError(f"Invalid {name}={value!r}. Expected a number in {interval}.")


def check_non_negative_int(name: str, value) -> None:
    """Raises ValueError unless `value` is an int >= 0."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"Invalid {name}={value!r}. Expected an integer >= 0.")


def check_seed(name: str, value) -> None:
    """Raises ValueError unless `value` is an int in [0, 2**32 - 1], the seeds NumPy and Keras take."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**32:
        raise ValueError(f"Invalid {name}={value!r}. Expected an integer in [0, 2**32 - 1].")
