"""Every script in examples/ runs with --smoke, offline, and prints what its header promises."""

import os
import pathlib
import subprocess
import sys

import pytest

EXAMPLES = sorted(pathlib.Path(__file__).resolve().parents[1].joinpath("examples").glob("*.py"))


def test_every_example_has_a_header():
    assert EXAMPLES, "examples/ has no scripts"
    for path in EXAMPLES:
        header = path.read_text().split('"""')[1]
        for field in ("Command:", "Expected runtime:", "--smoke"):
            assert field in header, f"{path.name}: header lacks {field!r}"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_smoke_run(path, tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    result = subprocess.run(
        [sys.executable, str(path), "--smoke"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert result.stdout.strip(), f"{path.name} printed nothing"
