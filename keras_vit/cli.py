"""The `keras-vit` command line: the parser, the error rule and the list of sub-commands, one module each.

Each job lives in `keras_vit.commands.<job>` (train, evaluate, export, predict, inspect, embed,
fewshot, knn): `add(subparsers)` registers its sub-parser and sets `func=run`; `run(args)` takes
the parsed arguments and returns an exit code. A new job is a new module and one entry in
`_COMMANDS`.

Parsing imports no TensorFlow, so `--help` and `--version` answer at once: `import keras_vit`
loads no Keras, the command modules' top levels import only the standard library and numpy, and
their `add` functions import only TensorFlow-free modules (`keras_vit.configs`,
`keras_vit.choices`); `run` imports what it needs. The console script `keras-vit` is
`keras_vit.cli:main`.

User mistakes (ValueError, FileNotFoundError, FileExistsError) and a failed download (ConnectionError)
print one clear line and exit 2 without a traceback; set KERAS_VIT_DEBUG=1 to see the traceback.

One overwrite rule (README, "Command line"): a command that writes files the user names refuses
ones that exist unless `--overwrite` is passed (`_validation.check_new_files`, before any work).
"""

from __future__ import annotations

import argparse
import os
import sys

from keras_vit.commands import embed, evaluate, export, fewshot, inspect, knn, predict, pretrain, search, train, zeroshot


def build_parser() -> argparse.ArgumentParser:
    """Returns the argument parser of `keras-vit`; building it imports no TensorFlow.

    Example:

    >>> args = build_parser().parse_args(["train", "--epochs", "1"])
    >>> args.command, args.epochs, args.dataset, args.stem
    ('train', 1, 'sample', 'auto')
    """
    parser = _Parser(
        prog="keras-vit",
        description="Vision Transformers for Keras: train, evaluate, export and inspect.",
    )
    parser.add_argument("--version", action=_VersionAction)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add_command in _COMMANDS:
        add_command(subparsers)
    return parser


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose mistakes (an unknown flag, a bad number) print one line, not the usage block; exit 2.

    Sub-commands get this class too (argparse makes them of the parent's class).
    """

    def __init__(self, *args, **kwargs):
        # An abbreviation (--epoch for --epochs) would change meaning the day a flag it also
        # abbreviates is added, in scripts that worked: flags are spelled out.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _VersionAction(argparse.Action):
    """--version: prints keras_vit's version, which lives in the package's __init__."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help="show the version and exit"):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from keras_vit import __version__

        print(f"keras_vit {__version__}")
        parser.exit()


# Each job's module (keras_vit.commands.<job>) registers its sub-parser; the order is `--help`'s.
_COMMANDS = [train.add, evaluate.add, export.add, predict.add, inspect.add, embed.add, fewshot.add, knn.add,
             zeroshot.add, search.add, pretrain.add]


def main(argv=None) -> int:
    """Runs `keras-vit` with `argv` (default: sys.argv[1:]) and returns the exit code.

    Args:
        argv: list of str or None. The arguments after the program name. Defaults to None.

    Example (a user mistake prints one line on stderr and gives exit code 2):

    >>> main(["evaluate", "no-such-model.keras"])
    2
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return args.func(args) or 0
    except (ValueError, FileNotFoundError, FileExistsError, ConnectionError) as error:
        if os.environ.get("KERAS_VIT_DEBUG"):
            raise
        print(f"keras-vit {args.command}: error: {error}", file=sys.stderr)
        return 2
    except Exception as error:
        from keras_vit.export import ExportFailed

        if not isinstance(error, ExportFailed) or os.environ.get("KERAS_VIT_DEBUG"):
            raise
        # Not the user's mistake: one paragraph (the converter's dump is in the log it names), exit 1.
        print(f"keras-vit {args.command}: {error}", file=sys.stderr)
        return 1



if __name__ == "__main__":
    sys.exit(main())
