"""The instant commands load nothing heavy: each runs in a fresh interpreter and the modules it
left loaded are read (not its time, which depends on the machine)."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

HEAVY = ("torch", "torch_geometric", "onnxruntime", "ortools", "scipy", "matplotlib")


def heavy_modules_loaded(argv: list[str]) -> list[str]:
    """The heavy modules loaded once `placer ARGV` has run in a fresh interpreter."""
    code = (f"import sys\nfrom placer.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))")
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    return ast.literal_eval(ran.stdout.splitlines()[-1])


@pytest.mark.parametrize("argv", [
    ["--help"],
    ["trian"],   # misspelt: argparse lists the commands
    ["cluster", "list"],
    ["cluster", "show", "dgx1-v100"],
    ["zoo", "list"],
], ids=" ".join)
def test_a_listing_loads_no_heavy_module(argv):
    assert heavy_modules_loaded(argv) == []


def test_the_check_sees_a_command_that_loads_torch():
    """Exporting from the zoo builds the model in torch, even for a name it refuses."""
    assert "torch" in heavy_modules_loaded(["zoo", "export", "alexnet"])
