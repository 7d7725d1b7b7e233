"""Argument checks shared by layers and builders, so every bad input gets the same clear error."""

from __future__ import annotations

import os
import tempfile


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
