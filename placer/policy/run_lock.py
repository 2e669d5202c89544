"""One run at a time in a run folder.

A run holds an advisory lock (`flock`) on `run_dir/.lock` while it writes there; the kernel drops
it when the process ends, killed or not, so a stale lock never blocks a resume. A second run into
the same folder is refused in one line that names the process holding it.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from placer.errors import PlacerError

LOCK = ".lock"


@contextmanager
def hold_run_folder(run_dir: Path, command: str = "placer train") -> Iterator[None]:
    """Lock `run_dir` (made if missing) for this process; a folder this call made and nothing
    else wrote to is removed again on the way out, so a run refused early leaves nothing."""
    run_dir = Path(run_dir)
    made = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    handle = open(run_dir / LOCK, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise PlacerError(f"{run_dir} is in use by {holder}; wait for it to end, or use another --run-dir") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{command} (process {os.getpid()})\n")
    handle.flush()
    try:
        yield
    finally:
        if made and [p.name for p in run_dir.iterdir()] == [LOCK]:
            (run_dir / LOCK).unlink()
            run_dir.rmdir()
        handle.close()   # drops the lock
