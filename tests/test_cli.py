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
