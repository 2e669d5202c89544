"""The layering of `placer`: every import goes down, none goes up, and no module is in a circle.

Imports are read from the source (ast), inside functions too, so a lazy import cannot hide an
upward dependency. A package may import its own modules and those of the layers below it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

import placer

ROOT = Path(placer.__file__).parent

# Bottom first. Packages on one line are side by side: they may not import each other.
LAYERS = [
    ("placer", "placer.errors", "placer.devices", "placer.placement", "placer.interrupts"),
    ("placer.graph", "placer.hardware"),
    ("placer.annotate", "placer.program"),
    ("placer.kernels",),
    ("placer.engines",),
    ("placer.measure",),
    ("placer.costmodel",),
    ("placer.placers",),
    # plans lower to an OpGraph and Placement that the costmodel's simulator prices; their exact
    # solver extends the placers' model (`placer.placers.exact`)
    ("placer.plans",),
    ("placer.evaluate", "placer.env", "placer.workers", "placer.corpus"),
    ("placer.policy",),
    ("placer.jobs",),
    ("placer.commands", "placer.cli"),
]
# Engines sit side by side under `placer.engines`: neither imports the other.
SIDE_BY_SIDE = [("placer.engines.torch", "placer.engines.onnxruntime")]
BOTTOM = set(LAYERS[0])


def module_name(path: Path) -> str:
    parts = list(path.with_suffix("").relative_to(ROOT.parent).parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in ROOT.rglob("*.py")}


def imported(path: Path, known: dict[str, Path]) -> set[str]:
    """The placer modules a file imports, anywhere in it (`from a import b` counts as a.b when
    that is a module, else as a)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                names.add(full if full in known else node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module":
            names.update(arg.value for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str))
    return {n for n in names if n == "placer" or n.startswith("placer.")}


def owner(module: str, units: list[str]) -> str:
    """The longest unit (package or bottom module) that `module` belongs to."""
    if module in BOTTOM:
        return module
    return max((u for u in units if module == u or module.startswith(u + ".")), key=len)


def import_graph() -> nx.DiGraph:
    known = modules()
    graph = nx.DiGraph()
    for name, path in known.items():
        graph.add_node(name)
        for target in imported(path, known):
            if target != name:
                graph.add_edge(name, target)
    return graph


def layer_of() -> dict[str, int]:
    return {unit: level for level, units in enumerate(LAYERS) for unit in units}


def upward_imports(graph: nx.DiGraph) -> list[str]:
    """Edges from a unit to one in a higher layer or beside it (the CLI's lazy dispatch to its
    own commands is the CLI's job, and allowed)."""
    level = layer_of()
    units = list(level)
    bad = []
    for a, b in graph.edges:
        for left, right in SIDE_BY_SIDE:
            if (a.startswith(left) and b.startswith(right)) or (a.startswith(right) and b.startswith(left)):
                bad.append(f"{a} -> {b} (side by side)")
        ua, ub = owner(a, units), owner(b, units)
        if ua == ub or ub in BOTTOM and ua in BOTTOM and ub != "placer":
            continue
        if (ua, ub) == ("placer.cli", "placer.commands"):
            continue
        if level[ub] >= level[ua]:
            bad.append(f"{a} -> {b}")
    return sorted(set(bad))


def test_every_package_is_in_a_layer():
    units = set(layer_of())
    packages = {module_name(p) for p in ROOT.glob("*/__init__.py")} | {module_name(p) for p in ROOT.glob("*.py")}
    assert packages <= units, f"packages in no layer: {sorted(packages - units)}; add them to LAYERS"


def test_no_import_goes_up():
    assert upward_imports(import_graph()) == []


def test_no_module_is_in_a_circle():
    circles = [sorted(c) for c in nx.strongly_connected_components(import_graph()) if len(c) > 1]
    assert circles == []


CLI = ("placer.commands", "placer.cli")


def reads_the_command_line(path: Path) -> bool:
    """Whether a module imports argparse or names an argparse Namespace (in code, not in prose)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == "argparse" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "argparse":
            return True
        if isinstance(node, (ast.Name, ast.Attribute)) and getattr(node, "id", getattr(node, "attr", None)) == \
                "Namespace":
            return True
    return False


def below_the_cli_reading_the_command_line(paths: dict[str, Path]) -> list[str]:
    return sorted(name for name, path in paths.items()
                  if not name.startswith(CLI) and reads_the_command_line(path))


def test_nothing_below_the_cli_reads_the_command_line():
    """Jobs and packages take typed settings: only `placer.commands` and `placer.cli` parse arguments."""
    assert below_the_cli_reading_the_command_line(modules()) == []


def test_the_command_line_check_sees_an_argparse_import(tmp_path):
    module = tmp_path / "job.py"
    module.write_text("import argparse\n\ndef run(args: argparse.Namespace):\n    return args.samples\n")
    assert below_the_cli_reading_the_command_line({"placer.jobs.job": module}) == ["placer.jobs.job"]
    assert below_the_cli_reading_the_command_line({"placer.commands.job": module}) == []


def test_the_check_sees_an_upward_import_put_back():
    """The check itself can fail: an upward edge, an edge between the engines and a circle are each refused."""
    graph = import_graph()
    graph.add_edge("placer.graph.opgraph", "placer.measure.measurement")
    assert upward_imports(graph) == ["placer.graph.opgraph -> placer.measure.measurement"]
    graph.add_edge("placer.engines.torch.executor", "placer.engines.onnxruntime.placed")
    assert "placer.engines.torch.executor -> placer.engines.onnxruntime.placed (side by side)" in upward_imports(graph)
    circle = nx.DiGraph([("placer.graph.fold", "placer.graph.opgraph"), ("placer.graph.opgraph", "placer.graph.fold")])
    assert [sorted(c) for c in nx.strongly_connected_components(circle) if len(c) > 1]


SIMULATION = ["placer.costmodel.simulator", "placer.costmodel.batch_simulator", "placer.costmodel.sim_program",
              "placer.costmodel.lower_bound", "placer.costmodel.training_costs", "placer.costmodel.contention"]


ENGINE_IMPLEMENTATIONS = ("placer.engines.torch", "placer.engines.onnxruntime")


def engines_reached(graph: nx.DiGraph, module: str) -> list[str]:
    """The engine modules `module` imports, directly or not (the protocol and the failure
    reasons are plain data every layer above may read)."""
    return sorted(m for m in nx.descendants(graph, module) if m.startswith(ENGINE_IMPLEMENTATIONS))


def test_the_simulator_reaches_no_engine_even_through_other_modules():
    graph = import_graph()
    assert {m: engines_reached(graph, m) for m in SIMULATION} == {m: [] for m in SIMULATION}


def test_the_engine_check_sees_a_plan_that_builds_torch_callables():
    """The simulator once planned a training step through the torch engine's planner."""
    graph = import_graph()
    graph.add_edge("placer.program.training_plan", "placer.engines.torch.backward")
    assert "placer.engines.torch.backward" in engines_reached(graph, "placer.costmodel.simulator")


COMMANDS_MOST_LINES = 1200


def test_the_cli_stays_thin():
    """`placer.commands` parses arguments and prints: the jobs and their texts live below it."""
    lines = sum(len(p.read_text().splitlines()) for p in (ROOT / "commands").glob("*.py"))
    assert lines < COMMANDS_MOST_LINES, f"placer/commands/ has {lines} lines; move work below it (placer.jobs)"
