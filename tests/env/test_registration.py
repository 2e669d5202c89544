"""`import placer` alone registers placer/DevicePlacement-v0, and the README's Gymnasium snippet
runs as written: its zoo name (resnet50.onnx) is exported on first use, as --graph does."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def readme_snippet() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    return next(b for b in blocks if "placer/DevicePlacement-v0" in b)


def _python(code: str, cwd: Path, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "PLACER_CACHE": str(cache)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


def test_import_placer_alone_registers_the_environment(tmp_path):
    code = ("import sys, gymnasium, placer\nassert 'placer.env' not in sys.modules\n"
            "assert 'placer/DevicePlacement-v0' in gymnasium.registry")
    done = _python(code, tmp_path, tmp_path / "cache")
    assert done.returncode == 0, done.stderr


def test_the_readme_snippet_runs_as_written(tmp_path):
    snippet = readme_snippet()
    assert 'graph="resnet50.onnx"' in snippet and "import placer  #" in snippet
    assert not (tmp_path / "resnet50.onnx").exists()   # the zoo name, not a file beside it
    done = _python(snippet, tmp_path, tmp_path / "cache")
    assert done.returncode == 0, done.stderr
    reward, terminated, step_time, counts = done.stdout.split(" ", 3)
    assert float(reward) == pytest.approx(-float(step_time) ** 0.5) and terminated == "True"
    counts = ast.literal_eval(counts)
    assert sum(counts.values()) == 122 and set(counts) <= {"cpu:0", "cpu:1"}   # resnet50's nodes
