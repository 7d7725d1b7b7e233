"""Console entry point of `keras-vit`: answers --help without importing TensorFlow.

`import keras_vit` imports Keras and TensorFlow (seconds, and log lines), because the package
registers its layers and training objects on import. Parsing the command line needs none of
that, so `main` creates the `keras_vit` package module without running its `__init__`, imports
`keras_vit.cli` (which imports no TensorFlow to parse) and parses: `--help` and usage errors end
there. Before a command runs, `keras_vit.cli` runs the package's `__init__` in that same module
object, exactly what `import keras_vit` would have done, so commands see the whole package.
"""

import importlib.util
import sys


def main(argv=None) -> int:
    """Runs `keras-vit` with `argv` (default: sys.argv[1:]) and returns the exit code."""
    if "keras_vit" not in sys.modules:
        package = importlib.util.module_from_spec(importlib.util.find_spec("keras_vit"))
        package.__keras_vit_init_deferred__ = True  # keras_vit.cli runs the __init__ before a command
        sys.modules["keras_vit"] = package
    from keras_vit import cli

    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
