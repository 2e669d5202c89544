"""Settings every test shares."""

import importlib
import os
import signal

import pytest


@pytest.fixture(autouse=True)
def quick_exact_solver(request, monkeypatch):
    """Local search starts from the exact solver's placement too, so most tests that place run
    CP-SAT: there it stops after a tenth of its default deterministic work (0.25 of a work unit
    instead of 2.5), which keeps the suite in minutes. Its placements stay deterministic and it
    stays the same solver for local search and for the `exact` baseline beside it. The solver's
    own tests (test_exact.py) run it at its defaults."""
    if request.path.name != "test_exact.py":
        exact = importlib.import_module("placer.placers.exact")
        monkeypatch.setattr(exact, "WORK_PER_SECOND", exact.WORK_PER_SECOND / 10)


@pytest.fixture
def ctrl_c_raises():
    """Ctrl-C raises KeyboardInterrupt, as in a terminal, also where the suite was started in the
    background by a shell without job control, which makes every child ignore SIGINT."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="session")
def local_ray():
    """One local Ray runtime for every test that asks for it (tests/workers, Ray rollouts):
    starting one takes seconds, and shutting it down more."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def pytest_configure(config):
    """Under pytest-xdist each worker is one process of several on the machine's cores: torch's
    default of one thread per core in each of them oversubscribes the cores, and OpenMP threads
    spin while they wait. One thread per worker's share of the cores keeps the suite's wall time
    to what its work takes. Code that sets its own thread count (a device's threads) still does."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1:
        import torch
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        torch.set_num_threads(max(1, cores // workers))
