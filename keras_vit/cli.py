"""The `keras-vit` command line: one sub-command per job (train, evaluate, export, predict, inspect).

Each job adds a function `_add_<job>(subparsers)` that registers its sub-parser and sets
`func=<handler>`, and lists it in `_COMMANDS`. Handlers take the parsed arguments and return an
exit code. User mistakes (ValueError, FileNotFoundError) print one clear line and exit 2 without
a traceback; set KERAS_VIT_DEBUG=1 to see the traceback.
"""

from __future__ import annotations

import argparse
import os
import sys


def build_parser() -> argparse.ArgumentParser:
    """Returns the argument parser of `keras-vit`."""
    from keras_vit import __version__

    parser = argparse.ArgumentParser(
        prog="keras-vit",
        description="Vision Transformers for Keras: train, evaluate, export and inspect.",
    )
    parser.add_argument("--version", action="version", version=f"keras_vit {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add_command in _COMMANDS:
        add_command(subparsers)
    return parser


_COMMANDS = []


def main(argv=None) -> int:
    """Runs `keras-vit` with `argv` (default: sys.argv[1:]) and returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return args.func(args) or 0
    except (ValueError, FileNotFoundError) as error:
        if os.environ.get("KERAS_VIT_DEBUG"):
            raise
        print(f"keras-vit {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
