"""Helpers shared by the benchmark scripts: zoo graphs at given options, callables timed in
interleaved rounds (`placer.measure.rounds`), an eager thread (`placer.engines.threads`)."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path

import graphs
from placer.engines.threads import DeviceThread, DeviceThreads, Job
from placer.graph.opgraph import OpGraph
from placer.kernels.loading import load_graph
from placer.measure.intervals import Interval
from placer.measure.rounds import Candidate, RoundsProtocol, RoundsResult, measure_in_rounds


def zoo_path(name: str, **options: int) -> Path:
    """The zoo model's ONNX file at `options` (exported once into the zoo cache)."""
    if not options:
        return graphs.resolve(f"{name}.onnx")
    tag = "-".join(f"{k}{v}" for k, v in sorted(options.items()))
    path = graphs.cache_dir() / "bench" / f"{name}-{tag}.onnx"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        graphs.export(name, path, **options)
    return path


def save_json(out: str | Path, data) -> None:
    """Write a benchmark's figures as JSON (folders made as needed) and say where."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"saved {out}")


def zoo_graph(name: str, **options: int) -> OpGraph:
    return load_graph(zoo_path(name, **options))


def zoo_model_and_inputs(name: str, **options: int):
    """(graph, the zoo's torch module with the same weights, seeded feeds, the same values as the
    module's inputs in the graph's input order)."""
    import torch

    from placer.graph.feeds import random_feeds

    graph = zoo_graph(name, **options)
    module, example = graphs.build_model(name, **options)
    feeds = random_feeds(graph, seed=0)
    inputs = tuple(torch.from_numpy(feeds[i.name]) for i in graph.inputs)
    assert all(a.shape == b.shape for a, b in zip(inputs, example))
    return graph, module, feeds, inputs


class CallableRun:
    """A callable as a run of `placer.measure.rounds.measure_in_rounds`: each step times one call."""

    def __init__(self, fn: Callable[[], object]) -> None:
        self.fn = fn
        self.peak_memory: dict[str, int] = {}

    def step(self) -> float:
        start = time.perf_counter()
        self.fn()
        return time.perf_counter() - start

    def close(self) -> None:
        pass


def exact_rounds(rounds: int, warmup: int = 1, seed: int = 0) -> RoundsProtocol:
    """Exactly `rounds` interleaved rounds after `warmup` (at least 6): the precision cannot stop
    them early (the fewest rounds are also the most) and no time cap stops them late."""
    return RoundsProtocol(warmup=warmup, min_rounds=rounds, max_rounds=rounds, max_seconds=math.inf, seed=seed)


def measure_callables(runs: dict[str, Callable[[], object]], rounds: int, reference: str, warmup: int = 1,
                      seed: int = 0) -> RoundsResult:
    """Time each callable once per round in a shuffled (seeded) order, exactly `rounds` rounds after
    `warmup` (`measure_in_rounds`), so that the machine's drifts hit all alike; `reference` is what
    the paired ratios are taken against. A callable that fails is the benchmark's error."""
    candidates = [Candidate(name, lambda fn=fn: CallableRun(fn)) for name, fn in runs.items()]
    result = measure_in_rounds(candidates, exact_rounds(rounds, warmup, seed), reference=reference)
    failed = {n: f"{m.failure}: {m.reason}" for n, m in result.measurements.items() if not m.ok}
    if failed:
        raise RuntimeError(f"failed in the rounds: {failed}")
    return result


def eager_row(name: str, nodes: int, runner: "ThreadRunner", eager: Callable[[], object],
              engine: Callable[[], object], rounds: int, width: int = 11) -> Interval:
    """Time `eager` (on `runner`'s thread) and `engine` interleaved, print the row (model, nodes,
    both medians in ms, engine / eager paired over the rounds with its 95% interval) and return
    that ratio (an `Interval`)."""
    result = measure_callables({"eager": lambda: runner(eager), "engine": engine}, rounds, reference="eager")
    e, x = result.interval("eager").value, result.interval("engine").value
    ratio = result.ratio("engine", "eager")
    print(f"{name:14s} {nodes:5d} {e * 1e3:9.2f} {x * 1e3:{width}.2f} {ratio.format_ratio()}", flush=True)
    return ratio


class _Call(Job):
    """One call handed to a `ThreadRunner`'s thread, and what it returned."""

    def __init__(self, fn: Callable[[], object], n_threads: int, timeout_s: float | None) -> None:
        super().__init__(n_threads, timeout_s)
        self.fn = fn
        self.result: object = None


class ThreadRunner:
    """Runs callables on one dedicated thread with its own intra-op thread count, as a device
    thread of the executor does (`placer.engines.threads`, set up once on its thread), so that
    eager baselines see the same threading as the engine. A failing call raises its error
    (as the engines do: a `KernelError` from it)."""

    def __init__(self, threads: int) -> None:
        import torch

        self._threads = DeviceThreads(lambda: [DeviceThread("eager", self._work,
                                                            setup=lambda: torch.set_num_threads(threads))])
        self._threads.start()

    @staticmethod
    def _work(job: Job) -> None:
        assert isinstance(job, _Call)
        job.result = job.fn()

    def __call__(self, fn: Callable[[], object]) -> object:
        job = self._threads.new_job(None, lambda n, timeout_s: _Call(fn, n, timeout_s))
        self._threads.run(job, None)
        assert isinstance(job, _Call)
        return job.result

    def close(self) -> None:
        self._threads.close()


def machine_note() -> str:
    """Cores and load, printed with every benchmark: figures on a busy machine are noisier."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    import torch

    return f"{cores} cores, load average {load:.2f}, torch {torch.__version__}"


class SessionRun:
    """A plain `InferenceSession` of the whole model as a `PlacementRun`: what a user would run."""

    def __init__(self, model_bytes: bytes, threads: int, feeds: dict, spinning: bool = True) -> None:
        import onnxruntime as ort

        from placer.devices import parse_device
        from placer.engines.onnxruntime.sessions import session_options

        options = session_options(parse_device("cpu"), threads, spinning=spinning)
        self.session = ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
        self.feeds = feeds
        self.peak_memory: dict[str, int] = {}

    def step(self) -> float:
        start = time.perf_counter()
        self.session.run(None, self.feeds)
        return time.perf_counter() - start

    def close(self) -> None:
        self.session = None
