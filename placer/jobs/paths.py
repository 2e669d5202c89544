"""Output paths, tried before any work: a job that will write a file checks it can, first."""

from __future__ import annotations

import tempfile
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
