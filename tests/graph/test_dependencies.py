"""`placer.graph` is the bottom of the tree: it imports nothing from the packages built on it."""

from __future__ import annotations

import ast
from pathlib import Path

import placer.graph
from placer.graph.load import load_graph
from testgraphs import branches

ABOVE = ("placer.measure", "placer.env", "placer.policy", "placer.placers", "placer.commands", "placer.annotate",
         "placer.cli")


def imported_modules(path: Path) -> set[str]:
    """Every module an `import` or `from ... import` of the file names (also inside functions)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module":
            names.update(arg.value for arg in node.args if isinstance(arg, ast.Constant))
    return names


def test_graph_imports_nothing_from_the_packages_above_it():
    files = sorted(Path(placer.graph.__file__).parent.glob("*.py"))
    assert len(files) > 5
    upward = {f"{path.name}: {name}" for path in files for name in imported_modules(path)
              if name == "importlib" or name.startswith(ABOVE)}
    assert not upward


def test_the_caller_says_which_ops_have_a_kernel():
    model = branches(2, 1)
    assert all(node.device_kinds == {"cpu", "cuda"} for node in load_graph(model).nodes.values())
    graph = load_graph(model, is_supported=lambda op_type, opset, domain: op_type != "Relu" and opset == 17)
    assert {n.name for n in graph.nodes.values() if not n.device_kinds} == {"relu0_0", "relu1_0"}
