"""`import placer` alone registers placer/DevicePlacement-v0; the README's Gymnasium snippet runs as
written (its zoo name, resnet50.onnx, is exported on first use, as --graph does) and prints what the
README says; and an editable install still registers it when run beside a checkout folder named placer."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
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


def test_the_readme_snippet_runs_as_written_and_prints_what_the_readme_says(tmp_path):
    snippet = readme_snippet()
    assert 'graph="resnet50.onnx"' in snippet and "import placer  #" in snippet
    said = snippet.rstrip().splitlines()[-1]
    assert said.startswith("# "), "the snippet's last line is a comment holding what it prints"
    assert not (tmp_path / "resnet50.onnx").exists()   # the zoo name, not a file beside it
    done = _python(snippet, tmp_path, tmp_path / "cache")
    assert done.returncode == 0, done.stderr
    assert done.stdout == said.removeprefix("# ") + "\n"
    reward, terminated, step_time, _ = done.stdout.split(" ", 3)
    assert float(reward) == pytest.approx(-float(step_time) ** 0.5, abs=1e-4)   # reward = -sqrt(step time)
    assert "exporting zoo model resnet50" in done.stderr   # the README says so: on stderr, on first use
    assert _python(snippet, tmp_path, tmp_path / "cache").stdout == done.stdout   # and again, the export cached


def test_an_editable_install_beside_a_checkout_folder_named_placer_still_registers_the_environment(tmp_path):
    """`pip install -e .` with setuptools' import hook lost to a folder named placer in the current
    directory: Python took it as an empty namespace package, so nothing registered the environment and
    gymnasium.make raised NamespaceNotFound. pyproject.toml's package-dir makes the install a path
    entry, where the real package beats such a folder. Built here from a copy of the project's
    packaging (its pyproject.toml and the modules `import placer` runs) in a checkout named placer."""
    pytest.importorskip("setuptools")
    checkout = tmp_path / "placer"
    (checkout / "placer").mkdir(parents=True)
    (checkout / "graphs").mkdir()
    (checkout / "graphs" / "__init__.py").write_text("")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, checkout / name)
    for name in ("__init__.py", "errors.py", "placement.py"):
        shutil.copy(ROOT / "placer" / name, checkout / "placer" / name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    build = subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta; "
                            "print(build_meta.build_editable(sys.argv[1]))", str(tmp_path / "wheel")],
                           capture_output=True, text=True, timeout=120, cwd=checkout, env=env)
    assert build.returncode == 0, build.stderr[-2000:]
    site = tmp_path / "site"
    zipfile.ZipFile(tmp_path / "wheel" / build.stdout.strip().splitlines()[-1]).extractall(site)

    # the wheel's install alone: the environment's own install of placer (a path entry or an import
    # hook, whichever it is) is taken away first, so that only the wheel's mechanism decides
    code = ("import os, sys\n"
            "sys.path[:] = [p for p in sys.path if not os.path.isfile(os.path.join(p, 'placer', '__init__.py'))]\n"
            "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]\n"
            f"import site; site.addsitedir({str(site)!r})\n"   # the install, as the wheel's .pth files make it
            "import gymnasium, placer\n"
            "print(placer.__file__)\n"
            "assert 'placer/DevicePlacement-v0' in gymnasium.registry")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env=env)   # beside the checkout folder named placer
    assert done.returncode == 0, done.stderr[-2000:]
    assert Path(done.stdout.strip()) == checkout / "placer" / "__init__.py"
