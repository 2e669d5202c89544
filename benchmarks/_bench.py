"""Helpers shared by the benchmark scripts: zoo graphs at given options, interleaved timing."""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import graphs
from placer.kernels.loading import load_graph
from placer.graph.opgraph import OpGraph


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

    from placer.measure.measurer import random_feeds

    graph = zoo_graph(name, **options)
    module, example = graphs.build_model(name, **options)
    feeds = random_feeds(graph, seed=0)
    inputs = tuple(torch.from_numpy(feeds[i.name]) for i in graph.inputs)
    assert all(a.shape == b.shape for a, b in zip(inputs, example))
    return graph, module, feeds, inputs


def interleaved(runs: dict[str, Callable[[], object]], rounds: int, warmup: int = 1, seed: int = 0
                ) -> dict[str, list[float]]:
    """Time each callable once per round, in a shuffled order (seeded), so slow drifts of the
    machine hit all alike and none always runs right after the same other one."""
    import random

    for _ in range(warmup):
        for fn in runs.values():
            fn()
    order = list(runs)
    shuffle = random.Random(seed).shuffle
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(rounds):
        shuffle(order)
        for key in order:
            start = time.perf_counter()
            runs[key]()
            times[key].append(time.perf_counter() - start)
    return times


def paired(times: dict[str, list[float]], name: str, reference: str):
    """`name`'s time over `reference`'s, paired over the rounds of `interleaved`: the median of the
    per-round ratios with its 95% interval (`placer.measure.intervals`)."""
    from placer.measure.intervals import paired_ratio

    return paired_ratio(times[name], times[reference])


def median(values: list[float]) -> float:
    return statistics.median(values)


def eager_row(name: str, nodes: int, runner: "ThreadRunner", eager: Callable[[], object],
              engine: Callable[[], object], rounds: int, width: int = 11):
    """Time `eager` (on `runner`'s thread) and `engine` interleaved, print the row (model, nodes,
    both medians in ms, engine / eager paired over the rounds with its 95% interval) and return
    that ratio (an `Interval`)."""
    times = interleaved({"eager": lambda: runner(eager), "engine": engine}, rounds)
    e, x = median(times["eager"]), median(times["engine"])
    ratio = paired(times, "engine", "eager")
    print(f"{name:14s} {nodes:5d} {e * 1e3:9.2f} {x * 1e3:{width}.2f} {ratio.value:6.3f} "
          f"[{ratio.low:.3f}, {ratio.high:.3f}]", flush=True)
    return ratio


class ThreadRunner:
    """Runs callables on one dedicated thread with its own intra-op thread count, as a worker of
    the executor does, so that eager baselines see the same threading as the engine."""

    def __init__(self, threads: int) -> None:
        import queue

        self._jobs: queue.Queue = queue.Queue()
        self._done: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._loop, args=(threads,), daemon=True)
        self._thread.start()

    def _loop(self, threads: int) -> None:
        import torch

        torch.set_num_threads(threads)
        while True:
            fn = self._jobs.get()
            if fn is None:
                return
            try:
                self._done.put((True, fn()))
            except BaseException as exc:  # noqa: BLE001
                self._done.put((False, exc))

    def __call__(self, fn: Callable[[], object]) -> object:
        self._jobs.put(fn)
        ok, value = self._done.get()
        if not ok:
            raise value
        return value

    def close(self) -> None:
        self._jobs.put(None)


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
