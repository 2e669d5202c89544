"""Output paths, tried before any work: a job that will write a file checks it can, first, and a
run folder is what the job is asked to make of it (a new run, or a resume)."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from placer.errors import PlacerError


def check_writable(path, option: str, *, folder: bool = False) -> Path:
    """`path` as a `Path`, once writing there has been tried: a file (its folder, and the file
    itself when it exists) or, with `folder`, a folder. Leaves nothing behind; a `PlacerError`
    naming `option` when it cannot be written, so that no long work starts first."""
    path = Path(path)
    where = path if folder else path.parent
    if path.is_dir() != folder and path.exists():
        raise PlacerError(f"{option} {path} is {'a file' if folder else 'a folder'}; "
                          f"give {'a folder' if folder else 'a file path'}")
    created = [p for p in (where, *where.parents) if not p.exists()]
    try:
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=where):
            pass
        if path.exists() and not folder:
            path.open("ab").close()   # an existing file must be writable too, and stays as it is
    except OSError as exc:
        raise PlacerError(f"cannot write {option} {path}: {exc.strerror or exc}; "
                          "give a path you can write to") from None
    finally:
        for made in created:   # deepest first; only the empty folders this check made
            try:
                made.rmdir()
            except OSError:
                pass
    return path


def run_folder(run_dir: str | Path | None, resume: bool, name: str, holds_run: Callable[[Path], bool],
               missing: str) -> Path:
    """The folder a job's run writes to: `run_dir`, else runs/<name>-<date>-<time>; refused in one
    line when a new run would go into a folder that `holds_run`, or a resume into one that does not
    (`missing`, with {run_dir} in it, says so)."""
    if run_dir is None:
        if resume:
            raise PlacerError("--resume needs the --run-dir of the run to continue")
        return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir = Path(run_dir)
    if not resume and holds_run(run_dir):
        raise PlacerError(f"{run_dir} already holds a run; add --resume to continue it or pick another --run-dir")
    if resume and not holds_run(run_dir):
        raise PlacerError(missing.format(run_dir=run_dir))
    return run_dir
