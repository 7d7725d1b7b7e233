"""Argument checks shared by layers and builders, so every bad input gets the same clear error."""

from __future__ import annotations


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


def check_positive_int(name: str, value) -> None:
    """Raises ValueError unless `value` is an int >= 1."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"Invalid {name}={value!r}. Expected an integer >= 1.")


def check_divisible(name: str, value: int, divisor_name: str, divisor: int) -> None:
    """Raises ValueError unless `divisor` divides `value`."""
    if value % divisor:
        raise ValueError(
            f"Invalid {name}={value!r}: it must be divisible by {divisor_name}={divisor}."
        )
