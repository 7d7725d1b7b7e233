"""What every sub-command module shares: the flag that names a library argument, the skipped-files line."""

from __future__ import annotations


def option_flag(field: str) -> str:
    """The flag of a library argument, as the library's checks name it for the command line."""
    from keras_vit.train_options import flag_name

    return flag_name(field)


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
