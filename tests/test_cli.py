import subprocess
import sys

import keras_vit
from keras_vit import cli


def test_version_and_help(capsys):
    assert cli.main([]) == 0
    assert "keras-vit" in capsys.readouterr().out
    result = subprocess.run([sys.executable, "-m", "keras_vit.cli", "--version"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    assert keras_vit.__version__ in result.stdout


def test_import_and_version_load_no_tensorflow():
    # `import keras_vit` and `keras-vit --version` must answer without Keras or TensorFlow.
    code = (
        "import sys, keras_vit\n"
        "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules, 'import keras_vit'\n"
        "from keras_vit import cli\n"
        "try:\n    cli.main(['--version'])\nexcept SystemExit:\n    pass\n"
        "print('TF' if 'tensorflow' in sys.modules or 'keras' in sys.modules else 'NO_TF')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == [f"keras_vit", keras_vit.__version__, "NO_TF"]
