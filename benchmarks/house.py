"""The shape of the code: module sizes, the layers its imports make, imports back up, the longest functions.

`python -m benchmarks house` reads the package's sources (it imports nothing of them) and prints:

- every module's lines, and how many pass `--max-lines` (600, the house's limit);
- the units (a top-level module, or a subpackage with all its modules) in layers: a unit's layer
  is one above the highest of the units it imports at module level; import cycles among units;
- the imports running back up: a unit importing (at module level or inside a function) one that
  imports it, directly or through others, at module level;
- the `--top` longest functions in lines of code of their bodies (no signature, blank, comment or
  docstring lines).

Example:

    python -m benchmarks house                 # keras_vit
    python -m benchmarks house --package PATH --top 20 --json
"""

from __future__ import annotations

import argparse
import ast
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
MAX_LINES = 600


def _modules(package: pathlib.Path) -> dict:
    """Dotted module name -> path, for every .py file under `package`."""
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _unit(name: str, top: str) -> str:
    """The unit of a dotted module name: `top.layers` for `top.layers.patches`, `top` for the package's own `__init__`."""
    parts = name.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else top


def _imports(tree: ast.Module, module: str, is_package: bool, known: set):
    """(imported module, at module level) for each import in `tree`, relative ones resolved.

    `from a import b` imports the module `a.b` where `known` has it, else `a` (b is a name in it).
    """
    deferred = {id(node) for function in ast.walk(tree) if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
                for node in ast.walk(function) if node is not function}
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for name in names:
            yield name, id(node) not in deferred


def _unit_graph(package: pathlib.Path, modules: dict):
    """{unit: {imported unit: at module level}} between the package's own units."""
    top = package.name
    units = {_unit(name, top) for name in modules}
    graph = {unit: {} for unit in units}
    for name, path in modules.items():
        source = _unit(name, top)
        tree = ast.parse(path.read_text(), str(path))
        for imported, module_level in _imports(tree, name, path.name == "__init__.py", set(modules)):
            target = _unit(imported, top)
            if imported.split(".")[0] != top or target == source or target not in units:
                continue
            graph[source][target] = graph[source].get(target, False) or module_level
    return graph


def _reachable(graph: dict, start: str) -> set:
    """Units reachable from `start` through module-level imports."""
    seen, todo = set(), [start]
    while todo:
        for target, module_level in graph[todo.pop()].items():
            if module_level and target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def layers(graph: dict) -> tuple[dict, list]:
    """({unit: layer, 0 the lowest}, [cycles]) of the module-level imports; a cycle's units share a layer."""
    reach = {unit: _reachable(graph, unit) for unit in graph}
    cycles = sorted({tuple(sorted(u for u in reach[unit] if unit in reach[u])) for unit in graph if unit in reach[unit]})
    layer = {}

    def level(unit):
        if unit not in layer:
            layer[unit] = 0  # a cycle's own edges are not followed again
            below = [level(t) for t, module_level in graph[unit].items() if module_level and unit not in reach[t]]
            layer[unit] = 1 + max(below, default=-1)
        return layer[unit]

    for unit in sorted(graph):
        level(unit)
    return layer, cycles


def back_up(graph: dict) -> list:
    """(importing unit, imported unit, at module level) where the imported one imports the importer."""
    reach = {unit: _reachable(graph, unit) for unit in graph}
    return sorted((source, target, module_level) for source, targets in graph.items()
                  for target, module_level in targets.items() if source in reach[target])


def _code_lines(node, lines: list) -> int:
    """Lines of code of a function's body: its lines less blank, comment-only and docstring lines.

    The signature is not counted: a builder's keyword arguments (`keras_vit.ViT` takes 45) are
    its declaration, not steps a reader follows.
    """
    body = node.body
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    return sum(1 for number in range(body[0].lineno, node.end_lineno + 1)
               if lines[number - 1].strip() and not lines[number - 1].strip().startswith("#"))


def functions(package: pathlib.Path, modules: dict) -> list:
    """(lines of code, "module:qualified name") of every function and method, longest first."""
    found = []
    for name, path in modules.items():
        text = path.read_text()
        lines = text.splitlines()

        def visit(node, prefix):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found.append((_code_lines(child, lines), f"{name}:{prefix}{child.name}"))
                    visit(child, f"{prefix}{child.name}.")
                elif isinstance(child, ast.ClassDef):
                    visit(child, f"{prefix}{child.name}.")
                else:
                    visit(child, prefix)

        visit(ast.parse(text, str(path)), "")
    return sorted(found, key=lambda item: (-item[0], item[1]))


def measure(package: pathlib.Path, max_lines: int = MAX_LINES, top: int = 10) -> dict:
    """The house's figures for the package at `package` (a folder with `__init__.py`)."""
    package = pathlib.Path(package).resolve()
    modules = _modules(package)
    sizes = {name: len(path.read_text().splitlines()) for name, path in modules.items()}
    graph = _unit_graph(package, modules)
    layer, cycles = layers(graph)
    by_layer = {}
    for unit, number in sorted(layer.items()):
        by_layer.setdefault(number, []).append(unit)
    return {
        "modules": len(modules),
        "lines": sum(sizes.values()),
        "largest": sorted(sizes.items(), key=lambda item: (-item[1], item[0]))[:top],
        "over_max_lines": sorted(name for name, size in sizes.items() if size > max_lines),
        "max_lines": max_lines,
        "units": len(graph),
        "layers": [by_layer[number] for number in sorted(by_layer)],
        "cycles": [list(cycle) for cycle in cycles],
        "back_up": [list(row) for row in back_up(graph)],
        "longest_functions": functions(package, modules)[:top],
    }


def report(figures: dict) -> str:
    """The figures as text."""
    out = [f"{figures['modules']} modules, {figures['lines']:,} lines; "
           f"{len(figures['over_max_lines'])} over {figures['max_lines']} lines: {', '.join(figures['over_max_lines']) or '-'}",
           "largest modules: " + ", ".join(f"{name} {size}" for name, size in figures["largest"]),
           f"{figures['units']} units (top-level modules and subpackages) in {len(figures['layers'])} layers, "
           f"{len(figures['cycles'])} import cycles, {len(figures['back_up'])} imports back up a layer"]
    out += [f"  layer {number}: {', '.join(units)}" for number, units in enumerate(figures["layers"])]
    out += [f"  cycle: {' <-> '.join(cycle)}" for cycle in figures["cycles"]]
    out += [f"  back up: {source} imports {target} ({'module level' if module_level else 'inside a function'})"
            for source, target, module_level in figures["back_up"]]
    out.append("longest functions (lines of code):")
    out += [f"  {size:4d}  {name}" for size, name in figures["longest_functions"]]
    return "\n".join(out)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks house", description=__doc__.splitlines()[0])
    parser.add_argument("--package", default=str(ROOT / "keras_vit"), help="the package folder (default: keras_vit)")
    parser.add_argument("--max-lines", type=int, default=MAX_LINES, help="module size limit (default: 600)")
    parser.add_argument("--top", type=int, default=10, help="how many of the longest functions and modules (default: 10)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    figures = measure(args.package, args.max_lines, args.top)
    print(json.dumps(figures, indent=1) if args.json else report(figures))
    return figures


if __name__ == "__main__":
    main()
