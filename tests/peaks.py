"""The peak memory a job adds, run in a fresh interpreter and read from Linux's VmHWM: getrusage's
ru_maxrss carries over from the forking parent (pytest's own size), so a delta of it can read 0."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the peak memory from /proc")


def peak_growth(setup: str, job: str, *args: str) -> int:
    """Bytes by which the peak resident memory grew while `job` ran (`setup` run first: the imports,
    whose memory is not the job's); both are Python code that reads `sys.argv[1:]` = `args`."""
    script = "\n".join([textwrap.dedent(setup), "import re, sys",
                        "def peak(): return int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))",
                        "before = peak()", textwrap.dedent(job), "print((peak() - before) * 1024)"])
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return int(re.findall(r"-?\d+", done.stdout)[-1])
