"""Every code block of the README and of docs/ as written.

Each block says what it is (```shell, ```python or ```text; see `docblocks`). Every command and
script is checked: a placer command parses with placer's own parser (each flag exists and takes its
value), the zoo models, clusters, placers and devices it names exist, and each file it reads exists,
is written by a command before it on the page, or is one of the reader's own files
(`docblocks.PLACEHOLDERS`); pip installs through constraints.txt the versions it pins and extras
pyproject.toml has; a script's imports and the names it uses from them exist. Then what can run as
written runs, in a fresh folder, in the page's order: the quick commands (`QUICK`: seconds) and the
scripts in the default run; every runnable command, the long ones too (training for minutes), under
the `long` marker, which the default run leaves out (docs/testing.md). A script whose last line is
a comment after a print must print that comment.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import io
import os
import re
import subprocess
import sys
import tomllib
import warnings
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from docblocks import (LANGUAGES, PAGES, ROOT, Block, Command, blocks, commands, indented_code, is_placeholder,
                       placer_files, python_files, written_before)

# Commands that take seconds: they run in the default run.
QUICK = {"placer zoo list", "placer zoo export", "placer cluster list", "placer cluster show", "placer inspect"}
# Programs a page names that the tests check but never run, and why.
NEVER_RUN = {"pip": "installs packages", "python": "runs this suite or a maintainer's script",
             "tensorboard": "a server that runs until stopped", "jq": "reads what the command before it prints"}
PAGE_IDS = [str(p.relative_to(ROOT)) for p in PAGES]


def test_every_block_says_what_it_is():
    untagged = [f"{b.where}: ```{b.lang}" for p in PAGES for b in blocks(p) if b.lang not in LANGUAGES]
    indented = [f"{p.relative_to(ROOT)}:{n}" for p in PAGES for n in indented_code(p)]
    assert not untagged, f"tag each block ```shell, ```python or ```text: {untagged}"
    assert not indented, f"fence these indented code blocks with a language tag: {indented}"


@pytest.mark.parametrize("page", PAGES, ids=PAGE_IDS)
def test_every_command_and_script_names_what_exists(page):
    problems = check_page(page)
    assert not problems, "\n".join(problems)


def test_the_check_fails_on_a_misspelt_flag_an_unknown_model_and_a_file_nothing_writes(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```shell\nplacer train --graph inceptionv3.onnx --sampels 5\n"
                    "placer apply --graph resnet50.onnx --placement nothing.json -o x.onnx\n"
                    "placer zoo export resnet -o r.onnx\npip install -c constraints.txt torch==2.0.0\n```\n")
    problems = "\n".join(check_page(page))
    for said in ("unrecognized arguments: --sampels", "reads nothing.json", "zoo has no model resnet",
                 "torch==2.0.0, but constraints.txt pins torch=="):
        assert said in problems
    assert main_quietly(["train", "--graph", "inceptionv3.onnx"]) == 2   # and that graph is refused when run


@pytest.mark.parametrize("page", PAGES, ids=PAGE_IDS)
def test_the_quick_commands_and_the_scripts_run_as_written(page, tmp_path, monkeypatch, zoo_cache, capsys):
    run_page(page, {"quick"}, tmp_path, monkeypatch, zoo_cache, capsys)


@pytest.mark.long
@pytest.mark.parametrize("page", PAGES, ids=PAGE_IDS)
def test_every_runnable_command_runs_as_written(page, tmp_path, monkeypatch, zoo_cache, capsys):
    run_page(page, {"quick", "long"}, tmp_path, monkeypatch, zoo_cache, capsys)


@pytest.fixture(scope="module")
def zoo_cache(tmp_path_factory) -> Path:
    """One placer cache for every page: a zoo model is exported once."""
    return tmp_path_factory.mktemp("placer-cache")


# ---- what runs ----------------------------------------------------------------------------------

def plan(page: Path) -> list[tuple[Command | Block, str]]:
    """Each command and script of `page` with how it runs: 'quick', 'long', 'reader' (it reads the
    reader's own files, or what such a command writes) or 'never' (`NEVER_RUN`)."""
    out, ran = [], set()   # ran: what the commands that run write
    for block in blocks(page):
        if block.lang == "python":
            reads = python_files(block)
            out.append((block, "reader" if any(_from_reader(p, ran) for p in reads) else "quick"))
        elif block.lang == "shell":
            for cmd in commands(block):
                if cmd.argv[0] != "placer":
                    out.append((cmd, "never"))
                    continue
                reads, writes = placer_files(cmd.argv)
                how = "reader" if any(_from_reader(p, ran) for p in reads) else \
                    "quick" if cmd.kind in QUICK else "long"
                if how != "reader":
                    ran.update(writes)
                out.append((cmd, how))
    return out


def _from_reader(path: str, ran: set[str]) -> bool:
    """A file the reader has (or a command that cannot run here writes), not the zoo's or one written here."""
    return not (_zoo_name(path) or written_before(path, ran))


def run_page(page: Path, kinds: set[str], folder: Path, monkeypatch, cache: Path, capsys) -> None:
    """Run the commands and scripts of `page` whose plan is in `kinds`, in order, in `folder`."""
    monkeypatch.chdir(folder)
    monkeypatch.setenv("PLACER_CACHE", str(cache))
    for item, how in plan(page):
        if how not in kinds:
            continue
        lacks = _lacks(item) if isinstance(item, Command) else None
        if lacks:   # said, not skipped in silence: the run's warnings list it
            warnings.warn(f"{item.block.where}: `{item}` needs {lacks}, which this machine lacks")
        elif isinstance(item, Block):
            _run_script(item, folder, cache)
        else:
            code = main_quietly(list(item.argv[1:]))
            assert code == 0, f"{item.block.where}: `{item}` exited {code}:\n{capsys.readouterr().err[-2000:]}"


def _lacks(cmd: Command) -> str | None:
    """What this machine lacks to run `cmd`: GPUs, cores for its workers, a Ray cluster; None when nothing."""
    import torch

    argv = cmd.argv
    given = dict(zip(argv, argv[1:]))
    devices = [d for d in re.split(r",(?![^\[]*\])", given.get("--devices") or given.get("--device") or "") if d]
    workers = int(given.get("--workers", 1))
    gpus = workers * sum(d.startswith("cuda") for d in devices)
    if gpus > torch.cuda.device_count():
        return f"{gpus} GPUs"
    if workers > 1 and (os.cpu_count() or 1) < workers * len(devices):
        return f"{workers * len(devices)} cores for its workers"
    return "a running Ray cluster" if "--ray-address" in given else None


def main_quietly(argv: list[str]) -> int:
    from placer.cli import main

    with redirect_stdout(io.StringIO()):
        return main(argv)


def _run_script(block: Block, folder: Path, cache: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "PLACER_CACHE": str(cache)}
    done = subprocess.run([sys.executable, "-c", block.text], capture_output=True, text=True, timeout=600,
                          cwd=folder, env=env)
    assert done.returncode == 0, f"{block.where}:\n{done.stderr[-2000:]}"
    lines = block.text.rstrip().splitlines()
    if len(lines) > 1 and lines[-1].startswith("# ") and "print(" in lines[-2]:
        assert done.stdout == lines[-1].removeprefix("# ") + "\n", f"{block.where} prints {done.stdout!r}"


# ---- the checks ---------------------------------------------------------------------------------

def check_page(page: Path) -> list[str]:
    """What is wrong with the commands and scripts of `page`, one line each."""
    problems, written = [], set()
    for block in blocks(page):
        if block.lang == "python":
            problems += [f"{block.where}: {p}" for p in _check_script(block, written)]
        elif block.lang == "shell":
            for cmd in commands(block):
                check = {"placer": _check_placer, "pip": _check_pip, "python": _check_python}.get(cmd.argv[0])
                if check is None and cmd.argv[0] not in NEVER_RUN:
                    problems.append(f"{block.where}: `{cmd}`: {cmd.argv[0]} is no program the docs' test knows")
                said = check(cmd, written) if check else []
                problems += [f"{block.where}: `{cmd}`: {p}" for p in said]
    return problems


def _check_placer(cmd: Command, written: set[str]) -> list[str]:
    from placer.cli import build_parser, typed_command
    from placer.devices import parse_device
    from placer.errors import PlacerError
    from placer.hardware.cluster import catalogue_names
    from placer.placers import PLACERS

    argv, err = list(cmd.argv[1:]), io.StringIO()
    try:
        with redirect_stderr(err), redirect_stdout(io.StringIO()):
            args = build_parser(typed_command(argv)).parse_args(argv)
    except SystemExit:
        return [err.getvalue().strip().splitlines()[-1]]
    problems = []
    reads, writes = placer_files(cmd.argv)
    cluster = getattr(args, "cluster", None)
    if cluster and not cluster.endswith(".toml") and cluster not in catalogue_names():
        problems.append(f"the catalogue has no cluster {cluster}")
    if getattr(args, "command", None) == "zoo" and getattr(args, "name", None) and not _zoo_name(args.name):
        problems.append(f"the zoo has no model {args.name}")
    unknown = [p for p in (getattr(args, "placers", None) or "").split(",") if p and p not in PLACERS]
    problems += [f"no placer is called {p}" for p in unknown]
    for spec in re.split(r",(?![^\[]*\])", getattr(args, "devices", None) or getattr(args, "device", None) or ""):
        try:
            spec and parse_device(spec)
        except PlacerError as exc:
            problems.append(str(exc))
    for path in reads:
        if not (_zoo_name(path) or is_placeholder(path) or written_before(path, written) or (ROOT / path).exists()):
            problems.append(f"reads {path}, which no command before it writes; name the reader's own files as "
                            "tests/docblocks.py's PLACEHOLDERS does")
    written.update(writes)
    return problems


def _check_pip(cmd: Command, written: set[str]) -> list[str]:
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    argv, problems = cmd.argv, []
    for flag, value in zip(argv, argv[1:]):
        if flag == "-c" and not (ROOT / value).is_file():
            problems.append(f"there is no {value}")
        if flag == "-e":
            wanted = re.fullmatch(r"\.(?:\[([\w,]+)\])?", value)
            missing = [e for e in (wanted[1] or "").split(",") if e and e not in extras] if wanted else [value]
            problems += [f"pyproject.toml has no extra {e}" for e in missing]
    for arg in argv:
        name, _, version = arg.partition("==")
        if version and pins.get(name) != version:
            problems.append(f"installs {arg}, but constraints.txt pins {name}=={pins.get(name)}")
    return problems


def _check_python(cmd: Command, written: set[str]) -> list[str]:
    argv = cmd.argv
    if argv[1] != "-m":
        return [] if (ROOT / argv[1]).is_file() else [f"there is no {argv[1]}"]
    if importlib.util.find_spec(argv[2]) is None:
        return [f"there is no module {argv[2]}"]
    markers = {m.split(":")[0] for m in tomllib.loads((ROOT / "pyproject.toml").read_text())
               ["tool"]["pytest"]["ini_options"]["markers"]}
    expression = next((v for f, v in zip(argv, argv[1:]) if f == "-m" and v != "pytest"), "")
    named = set(re.findall(r"\w+", expression)) - {"and", "or", "not"}
    return [f"pytest has no marker {m}" for m in sorted(named - markers)]


def _check_script(block: Block, written: set[str]) -> list[str]:
    """Its imports and the names it uses of them exist; the files it reads exist or are the reader's."""
    try:
        tree = ast.parse(block.text)
    except SyntaxError as exc:
        return [f"does not parse: {exc}"]
    problems, modules = [], {}
    for node in ast.walk(tree):
        try:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    importlib.import_module(alias.name)
                    modules[alias.asname or alias.name.split(".")[0]] = alias.asname and alias.name
            elif isinstance(node, ast.ImportFrom):
                module = importlib.import_module(node.module)
                problems += [f"{node.module} has no {a.name}" for a in node.names if not hasattr(module, a.name)]
        except ImportError as exc:
            problems.append(str(exc))
    for node in ast.walk(tree):   # a.b.c with `a` an imported module: each attribute exists
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            chain = _chain(node)
            if chain and chain[0] in modules and not _resolves(chain, modules[chain[0]]):
                problems.append(f"{'.'.join(chain)} does not exist")
    for path in python_files(block):
        if not (_zoo_name(path) or is_placeholder(path) or written_before(path, written) or (ROOT / path).exists()):
            problems.append(f"reads {path}, which no command before it writes")
    return problems


def _chain(node: ast.AST) -> list[str] | None:
    names = []
    while isinstance(node, ast.Attribute):
        names.insert(0, node.attr)
        node = node.value
    return [node.id, *names] if isinstance(node, ast.Name) else None


def _resolves(chain: list[str], module: str | None) -> bool:
    """`a.b.c` from `import a` (or `import x.y as a`): importing the longest module prefix, then attributes."""
    parts = (module.split(".") if module else [chain[0]]) + chain[1:]
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        for attr in parts[k:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _zoo_name(path: str) -> bool:
    """`path` is a zoo model's name (inception_v3.onnx), exported on first use."""
    from graphs.registry import names, onnx_names

    return "/" not in path and path.removesuffix(".onnx") in names() + onnx_names()


def test_the_readme_is_short_and_opens_with_its_result_and_both_set_up_commands():
    """A newcomer's first screen: the headline result and the two set-up commands (the main job's and
    the tests') within the first 40 lines, the whole page at most 250."""
    lines = (ROOT / "README.md").read_text().splitlines()
    first = "\n".join(lines[:40])
    assert len(lines) <= 250
    assert "## What it finds" in first and "faster" in first
    assert "placer train --graph" in first and "python -m pytest" in first and first.count("pip install -c") >= 2
