"""What every sub-command module shares: the flag that names a library argument, text files read, the skipped-files line."""

from __future__ import annotations


def option_flag(field: str) -> str:
    """The flag of a library argument, as the library's checks name it for the command line."""
    from keras_vit.train_options import flag_name

    return flag_name(field)


def text_lines(flag: str, path: str, expected: str) -> list:
    """The non-empty lines of the UTF-8 text file `path`, given as `flag`; ValueError naming both where it is none.

    `expected` says what the file should hold ("prompts with {} where the label goes, one per line").
    """
    try:
        with open(path, encoding="utf-8") as file:
            lines = [line.rstrip("\r\n") for line in file if line.strip()]
    except UnicodeDecodeError as error:
        raise ValueError(f"Invalid {flag}={path!r}: not UTF-8 text ({bad_byte(error)}). Expected {expected}.") from None
    if not lines:
        raise ValueError(f"Invalid {flag}={path!r}: the file holds no line of text. Expected {expected}.")
    return lines


def bad_byte(error: UnicodeDecodeError) -> str:
    """Where a UnicodeDecodeError found its bad byte, in a few words."""
    return f"byte 0x{error.object[error.start]:02x} at offset {error.start}"


def print_skipped(files) -> None:
    """Prints the line of `keras_vit.training.report.skipped_line` for the corrupt image files a command left out
    (each once; a folder's held-out share lists the same ones as its training share), nothing for none.

    Every command that reads a folder calls it once its data has been read (`train` prints the same
    line in its summary).
    """
    files = list(dict.fromkeys(files))
    if files:
        from keras_vit.training.report import skipped_line

        print(skipped_line(files))
