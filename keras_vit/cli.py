"""The `keras-vit` command line."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    """Returns the argument parser of `keras-vit`, one sub-command per job."""
    from keras_vit import __version__

    parser = argparse.ArgumentParser(
        prog="keras-vit",
        description="Vision Transformers for Keras: train, evaluate, export and inspect.",
    )
    parser.add_argument("--version", action="version", version=f"keras_vit {__version__}")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv=None) -> int:
    """Runs `keras-vit` with `argv` (default: sys.argv[1:]) and returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
