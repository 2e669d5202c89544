"""The code blocks of the README and of docs/, read as tests/test_docs.py checks and runs them.

A fenced block says what it is by its language tag: ```shell (commands a reader types), ```python
(a script) or ```text (output, a diagram: never run). Here are the blocks of each page, a shell
block's commands as argument lists (comments dropped, `&&` and `|` split), and what a command
or script reads and writes, so that a test can tell whether it runs as written (everything it
reads exists, or a command before it on the page writes it) or names the reader's own files.
"""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = ("shell", "python", "text")

# The reader's own files, which a page names as examples: a command that reads one is checked
# (its flags, names and the rest of its files) but cannot run here. A path with <...> in it
# (runs/<run>/placement.json) is one of them too.
PLACEHOLDERS = {"model.onnx", "vad.onnx", "decoder.onnx", "sample.npz", "p.json", "plan.json", "mine.json",
                "theirs.json", "my_cluster.toml", "profile.json", "parts/"}

# The options of placer commands that name a file or folder the command reads, and those it writes.
READS = {"--graph", "--placement", "--inputs", "--include-rl", "--include-placement", "--targets", "--policy",
         "--cluster"}
WRITES = {"-o", "--out", "--outputs", "--split", "--run-dir", "--profile"}
FILE_LIKE = re.compile(r"(/|\.(onnx|json|npz|toml|pt|png))$")


@dataclass(frozen=True)
class Block:
    """A fenced code block: its page, the line its fence opens on, its language tag, its text."""

    page: Path
    line: int
    lang: str
    text: str

    @property
    def where(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page.name
        return f"{page}:{self.line}"


@dataclass(frozen=True)
class Command:
    """One command of a shell block, as its argument list."""

    block: Block
    argv: tuple[str, ...]

    def __str__(self) -> str:
        return shlex.join(self.argv)

    @property
    def kind(self) -> str:
        """'placer zoo', 'placer cluster show', 'pip', ...: what decides how it is checked and run."""
        if self.argv[0] != "placer":
            return self.argv[0]
        words = [a for a in self.argv[1:] if not a.startswith("-")][:2]
        return " ".join(["placer", *words[:2 if words and words[0] in ("cluster", "zoo") else 1]])


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of `page`, in order."""
    out, lines, opened = [], page.read_text().split("\n"), None
    for i, line in enumerate(lines, 1):
        if line.startswith("```"):
            if opened is None:
                opened = (i, line[3:].strip())
            else:
                out.append(Block(page, opened[0], opened[1], "\n".join(lines[opened[0]:i - 1])))
                opened = None
    return out


def indented_code(page: Path) -> list[int]:
    """Lines markdown reads as an indented code block (four spaces after a blank line, not in a
    list or a fence): such a block has no language tag to say what it is."""
    found, inside, last = [], False, ""   # last: the last line with text before this one
    lines = page.read_text().split("\n")
    for i, line in enumerate(lines):
        if line.startswith("```"):
            inside = not inside
        elif (not inside and line.startswith("    ") and line.strip() and i and not lines[i - 1].strip()
              and not re.match(r"([-*]|\d+\.)\s|\s", last)):
            found.append(i + 1)
        last = line if line.strip() else last
    return found


def commands(block: Block) -> list[Command]:
    """The commands of a shell block: continuation lines joined, comments dropped, `&&`, `|` and
    `;` between commands split."""
    text = re.sub(r"\\\n", " ", block.text)
    out = []
    for line in text.split("\n"):
        current: list[str] = []
        for token in shlex.split(line, comments=True) + ["&&"]:
            if token in ("&&", "|", ";"):
                if current:
                    out.append(Command(block, tuple(current)))
                current = []
            else:
                current.append(token)
    return out


def placer_files(argv: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(what it reads, what it writes) of a placer command: the values of `READS` and `WRITES`
    that name files (inspect's --profile is read; --run-dir with --resume is read too), and a
    cluster file `cluster show` takes."""
    reads, writes = [], []
    sub = next((a for a in argv[1:] if not a.startswith("-")), "")
    for flag, value in zip(argv, argv[1:]):
        read = flag in READS or (flag == "--profile" and sub == "inspect") or (flag == "--run-dir" and "--resume" in argv)
        if read and (flag not in ("--cluster", "--policy") or FILE_LIKE.search(value)):
            reads.append(value)
        elif flag in WRITES:
            writes.append(value)
    words = [a for a in argv[1:] if not a.startswith("-")]
    if words[:2] == ["cluster", "show"] and len(words) > 2 and words[2].endswith(".toml"):
        reads.append(words[2])
    return reads, writes


def python_files(block: Block) -> list[str]:
    """The file-like string constants a python block holds: what it reads."""
    return [n.value for n in ast.walk(ast.parse(block.text))
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and FILE_LIKE.search(n.value)]


def is_placeholder(path: str) -> bool:
    return path in PLACEHOLDERS or ("<" in path and ">" in path)


def written_before(path: str, written: set[str]) -> bool:
    """`path` or a folder above it was written by a command before."""
    parts = Path(path).parts
    return any(str(Path(*parts[:k])) in written for k in range(1, len(parts) + 1))
