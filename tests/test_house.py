"""`python -m benchmarks house` measures what it says: layers, cycles, imports back up, lines of code.

Checked on a small package written here, whose shape is known, and once on keras_vit itself.
"""

from __future__ import annotations

import pathlib
import textwrap

from benchmarks import house

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _package(tmp_path, files):
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path / "pkg"


def test_layers_cycles_and_imports_back_up_of_a_known_package(tmp_path):
    package = _package(tmp_path, {
        "__init__.py": "",
        "base.py": '''
            def helper():
                from pkg.top import run  # inside a function, back up to a module that imports this one
                return run
        ''',
        "sub/__init__.py": "from pkg.sub.inner import value\n",
        "sub/inner.py": "from pkg import base\nvalue = 1\n",
        "top.py": "from pkg.sub import inner\n\n\ndef run():\n    return inner.value\n",
        "a.py": "from pkg import b\n",
        "b.py": "import pkg.a\n",
    })
    figures = house.measure(package, top=3)
    assert figures["units"] == 6 and figures["modules"] == 7  # pkg.sub and pkg.sub.inner are one unit
    layers = {unit: number for number, units in enumerate(figures["layers"]) for unit in units}
    assert layers["pkg.base"] == 0 and layers["pkg.sub"] == 1 and layers["pkg.top"] == 2
    assert figures["cycles"] == [["pkg.a", "pkg.b"]]
    assert ["pkg.base", "pkg.top", False] in figures["back_up"]
    assert ["pkg.a", "pkg.b", True] in figures["back_up"]  # a cycle's imports run both ways
    assert len(figures["back_up"]) == 3


def test_lines_of_code_leave_out_the_signature_docstring_comments_and_blank_lines(tmp_path):
    package = _package(tmp_path, {"__init__.py": "", "f.py": '''
        def long(a,
                 b):
            """Docstring.

            More.
            """
            # a comment

            x = a
            return x + b


        class C:
            def method(self):
                return 1
    '''})
    figures = house.measure(package, max_lines=10)
    assert figures["longest_functions"][:2] == [(2, "pkg.f:long"), (1, "pkg.f:C.method")]
    assert figures["over_max_lines"] == ["pkg.f"]


def test_keras_vit_runs_downward():
    figures = house.measure(ROOT / "keras_vit")
    assert figures["cycles"] == [] and figures["back_up"] == [], figures["back_up"]


def test_ci_runs_the_readme_test_command_as_written():
    readme = (ROOT / "README.md").read_text()
    setup = readme[readme.index("Install the test dependencies and run the test suite:"):]
    command = next(line.strip() for line in setup.splitlines()[1:] if line.startswith("    "))
    assert command.startswith("pip install -e \".[test,parity]\"") and command.endswith("pytest -q")
    assert f"({command})" in (ROOT / ".ci" / "run").read_text()
