"""The sub-commands of `keras-vit`, one module per job: `add(subparsers)` registers it, `run(args)` runs it.

`keras_vit.cli` lists them and owns the parser and the error rule (a user mistake: one line, exit 2).
"""
