"""`import placer` alone registers placer/DevicePlacement-v0, and the README's Gymnasium snippet
runs as written (on a small model instead of resnet50)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from testgraphs import branches

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_snippet() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    return next(b for b in blocks if "placer/DevicePlacement-v0" in b)


def test_import_placer_registers_the_environment_and_the_readme_snippet_runs(tmp_path):
    model = tmp_path / "model.onnx"
    onnx.save(branches(4, 2), str(model))
    snippet = readme_snippet()
    assert '"resnet50.onnx"' in snippet and "import placer  #" in snippet
    # placer.env is not imported by anyone here: `import placer` must be enough.
    check = "import sys\nassert 'placer.env' not in sys.modules\n"
    code = snippet.replace('"resnet50.onnx"', repr(str(model))).replace("env = gymnasium.make", check + "env = gymnasium.make")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    reward, terminated, step_time, counts = done.stdout.split(" ", 3)
    assert float(reward) == pytest.approx(-float(step_time) ** 0.5) and terminated == "True"
    assert sum(ast.literal_eval(counts).values()) == 17 and set(ast.literal_eval(counts)) <= {"cpu:0", "cpu:1"}
