"""This machine's devices and the links between them, measured as the figures a cluster file holds
(`placer cluster describe-local` writes them; format: placer/hardware/catalogue/README.md).

Each device: its float32 GEMM peak (and float16 on tensor cores), memory bandwidth and launch
overhead, timed on the device's own worker thread as the engines run it, and how many times slower a
CPU device runs while another is busy (contention); identical devices share one set of figures.
Each link: the hand-over between virtual CPU devices in placer's torch engine, host<->GPU copies,
and peer copies between GPUs. Every model and link names its source: how it was measured.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass

from placer.devices import cpu_model_name, physical_memory
from placer.errors import PlacerError

GEMM_N = 1024
COPY_BYTES = 64 * 2**20
HANDOVER_BANDWIDTH = 1e15   # a hand-over between virtual CPU devices copies nothing: bytes cost ~nothing


@dataclass(frozen=True)
class MeasuredMachine:
    """The figures measured, as a cluster file holds them: each device as (name, model key,
    contention), each model's `DeviceModel` fields with its source, the links' `Link` fields, and
    the hosts copies pass through that hold no ops."""

    devices: list[tuple[str, str, float]]
    models: dict[str, dict]
    links: list[dict]
    hosts: list[str]


def measure_machine(devices, measured: str) -> MeasuredMachine:
    """Measure `devices` and the links between them; every source starts with `measured` (who
    measured, where and when)."""
    import torch

    from placer.engines.affinity import threads_and_cores

    threads, cores = threads_and_cores(devices)
    main_threads = torch.get_num_threads()
    try:
        measured_figures = {d.name: _measure_device(d, threads.get(d.name), cores.get(d.name)) for d in devices}
        for name, factor in _measure_contention([d for d in devices if d.kind == "cpu"]).items():
            measured_figures[name]["contention"] = factor
        figures = _alike_devices_alike(measured_figures, devices, threads)
        links, hosts = _measure_links(devices, measured)
    finally:
        torch.set_num_threads(main_threads)
    cpu_devices = [d for d in devices if d.kind == "cpu"]
    ram = physical_memory() or 16 * 2**30
    models = {}
    for d in devices:
        f = figures[d.name]
        if d.kind == "cpu":
            memory = d.mem_cap or max(1, ram // max(1, len(cpu_devices)))
            n = threads.get(d.name)
            name = f"{cpu_model_name()}, {n} thread{'s' if n != 1 else ''}"
            memory_note = ("its mem cap" if d.mem_cap else
                           f"this machine's RAM shared by {len(cpu_devices)} CPU device(s)")
        else:
            memory = d.mem_cap or torch.cuda.get_device_properties(d.index).total_memory
            name = torch.cuda.get_device_name(d.index)
            memory_note = "its mem cap" if d.mem_cap else "torch.cuda total_memory"
        source = (f"{measured}: float32 GEMM {GEMM_N}x{GEMM_N} best of 3 (2n^3/t)"
                  + (", float16 GEMM on tensor cores likewise" if f.get("tensor_float16") else "")
                  + f"; memory bandwidth: copy of {COPY_BYTES // 2**20} MiB into a tensor already allocated, "
                  f"2 x bytes / t, best of 3; launch: median time of adding two 1-element tensors; "
                  f"memory: {memory_note}")
        models[_model_key(d)] = {"name": name, "kind": d.kind, "peak_flops": {"float32": f["float32"]},
                                 "tensor_flops": {"float16": f["tensor_float16"]} if f.get("tensor_float16") else {},
                                 "memory_bandwidth_Bps": f["bandwidth"], "memory_bytes": int(memory),
                                 "launch_overhead_s": f["launch"], "source": source}
    return MeasuredMachine([(d.name, _model_key(d), figures[d.name].get("contention", 1.0)) for d in devices],
                           models, links, hosts)


def _model_key(device) -> str:
    """The device's own model in the file: each device is measured, so each has one."""
    return "local-" + device.name.replace(":", "")


def _alike_devices_alike(figures: dict[str, dict[str, float]], devices, threads) -> dict[str, dict[str, float]]:
    """Identical devices (the same spec but for the index, with the same threads: what the profiler
    calls a class) get the same figures, the best any of them measured (contention: the median): two virtual CPU devices
    read 157 and 173 GFLOPS here one run apart, and a model must not take that noise for a
    difference between them."""
    from dataclasses import replace

    classes: dict[str, list[str]] = {}
    for d in devices:
        key = str(replace(d, index=None, threads=threads.get(d.name))) if d.kind == "cpu" else d.name
        classes.setdefault(key, []).append(d.name)
    alike = {}
    for members in classes.values():
        # the best any measured (noise only slows a figure down), but contention, which noise moves
        # either way (a busy moment in the run alone, or in the run together): their median
        best = {k: (statistics.median if k == "contention" else min if k == "launch" else max)(
                    [figures[m][k] for m in members if k in figures[m]]) for k in figures[members[0]]}
        alike.update({m: dict(best) for m in members})
    return alike


def _on_device_threads(devices, threads: dict, cores: dict, task) -> dict[str, object]:
    """`task(device)` on each device's own worker thread (pinned and with its thread count, as the
    engines run it), all at once; each device's result."""
    results: dict[str, object] = {}
    error: list[BaseException] = []

    def work(device) -> None:
        import torch

        try:
            if cores.get(device.name):
                from placer.engines.affinity import pin_this_thread

                pin_this_thread(cores[device.name])
            if device.kind == "cpu" and threads.get(device.name):
                torch.set_num_threads(threads[device.name])
            results[device.name] = task(device)
        except BaseException as exc:  # noqa: BLE001 - raised again on the caller's thread
            error.append(exc)

    workers = [threading.Thread(target=work, args=(d,), name=f"describe-{d.name}") for d in devices]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if error:
        raise error[0]
    return results


def _measure_device(device, threads: int | None, cores: frozenset[int] | None) -> dict[str, float]:
    """GEMM peak, memory bandwidth and launch overhead, on the device's own worker thread."""
    return _on_device_threads([device], {device.name: threads}, {device.name: cores}, _device_figures)[device.name]


CONTENTION_BLOCKS = 16     # each chain: this many blocks of a conv, its scale, activation and residual add
CONTENTION_CHANNELS = 48   # at 28 x 28, batch 1: ops of 0.04-0.1 ms, as a batch-1 CNN's are
CONTENTION_ROUNDS = 5

# what a contention figure is, for the file's readers (`_measure_contention` measures it)
CONTENTION_SOURCE = (f"a chain of {CONTENTION_BLOCKS} CNN blocks ({CONTENTION_CHANNELS}-channel 3x3 conv, scale, "
                     "ReLU, residual add, 28 x 28, batch 1) on one device in placer's torch engine, against two such "
                     "chains side by side on two devices in one step, medians of interleaved steps")


def _measure_contention(devices) -> dict[str, float]:
    """How many times slower a CPU device runs its part of a step in placer's torch engine while
    another CPU device runs its own: a chain of CNN blocks on the first device alone, against two
    such chains, one per device, in one step (no tensor crosses between them), medians of
    interleaved steps. Virtual CPU devices share the memory bandwidth and caches, and the engine's
    Python thread per device shares the interpreter, whose lock every op's dispatch takes: small
    element-wise ops alone read 4.4x slower with both devices busy here, a conv 1.0x, so a figure
    from large torch ops alone (1.00-1.02) understates what a step sees. One device: nothing to share;
    the first two CPU devices' figure serves them all."""
    if len(devices) < 2:
        return {}
    from placer.placement import Placement

    names = [d.name for d in devices[:2]]
    one, two = _chains_graph(1), _chains_graph(2)
    steps = _interleaved_medians(devices[:2], {
        "alone": (one, Placement(names, {n: names[0] for n in one.nodes})),
        "side_by_side": (two, Placement(names, {n: names[int(n.startswith("chain1"))] for n in two.nodes}))},
        CONTENTION_ROUNDS, "the contention chains")
    factor = max(1.0, steps["side_by_side"] / steps["alone"])
    return {d.name: factor for d in devices}


def _interleaved_medians(devices, cases: dict, rounds: int, what: str) -> dict[str, float]:
    """The median step time of each case (label -> (graph, placement)) in placer's torch engine,
    the cases measured in turn, `rounds` times; a `PlacerError` naming `what` if one fails."""
    from placer.measure.measurer import MeasureProtocol, measurer_for

    measurers = {}   # one per graph: cases of one graph share it
    for graph, _ in cases.values():
        if id(graph) not in measurers:
            measurers[id(graph)] = measurer_for("torch", graph, devices, MeasureProtocol(warmup=5, repeats=15))
    steps: dict[str, list[float]] = {label: [] for label in cases}
    for _ in range(rounds):
        for label, (graph, placement) in cases.items():
            m = measurers[id(graph)].measure(placement)
            if not m.ok:
                raise PlacerError(f"describe-local: {what} failed on {', '.join(d.name for d in devices)}: {m.reason}")
            steps[label].append(m.step_time)
    return {label: statistics.median(times) for label, times in steps.items()}


def _chains_graph(chains: int):
    """`chains` independent chains of CONTENTION_BLOCKS CNN blocks from one input, each its own output."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from placer.kernels.loading import load_graph

    rng = np.random.default_rng(0)
    c = CONTENTION_CHANNELS
    nodes, weights, outputs = [], [], []
    for k in range(chains):
        x = "x"
        for b in range(CONTENTION_BLOCKS):
            p = f"chain{k}_{b}"
            weights += [numpy_helper.from_array((rng.standard_normal((c, c, 3, 3)) * 0.05).astype(np.float32), f"{p}_w"),
                        numpy_helper.from_array(np.full((1, c, 1, 1), 0.5, np.float32), f"{p}_scale")]
            nodes += [helper.make_node("Conv", [x, f"{p}_w"], [f"{p}_conv"], pads=[1, 1, 1, 1], name=f"{p}_conv"),
                      helper.make_node("Mul", [f"{p}_conv", f"{p}_scale"], [f"{p}_mul"], name=f"{p}_mul"),
                      helper.make_node("Relu", [f"{p}_mul"], [f"{p}_relu"], name=f"{p}_relu"),
                      helper.make_node("Add", [f"{p}_relu", x], [f"{p}_out"], name=f"{p}_add")]
            x = f"{p}_out"
        outputs.append(helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, c, 28, 28]))
    model = helper.make_model(helper.make_graph(
        nodes, "contention", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 28, 28])], outputs, weights),
        opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return load_graph(model)


def _device_figures(device) -> dict[str, float]:
    import torch

    where = device.torch_device

    def sync() -> None:
        if device.kind == "cuda":
            torch.cuda.synchronize(where)

    def best(fn, repeats: int = 3) -> float:
        fn()
        sync()
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - t)
        return min(times)

    a = torch.randn(GEMM_N, GEMM_N, device=where)
    b = torch.randn(GEMM_N, GEMM_N, device=where)
    figures = {"float32": 2 * GEMM_N**3 / best(lambda: torch.matmul(a, b))}
    if device.kind == "cuda" and torch.cuda.get_device_capability(device.index)[0] >= 7:
        ah, bh = a.half(), b.half()
        figures["tensor_float16"] = 2 * GEMM_N**3 / best(lambda: torch.matmul(ah, bh))
    big = torch.ones(COPY_BYTES // 4, dtype=torch.float32, device=where)
    into = torch.zeros_like(big)   # allocated and touched once: the copy times the memory, not page faults
    figures["bandwidth"] = 2 * COPY_BYTES / best(lambda: into.copy_(big))
    x, y = torch.ones(1, device=where), torch.ones(1, device=where)
    for _ in range(20):
        torch.add(x, y)
    sync()
    samples = []
    for _ in range(200):
        t = time.perf_counter()
        torch.add(x, y)
        sync()
        samples.append(time.perf_counter() - t)
    figures["launch"] = statistics.median(samples)
    return figures


def _measure_links(devices, measured: str) -> tuple[list[dict], list[str]]:
    """Links between the devices: a hand-over among the virtual CPU devices, host<->GPU copies,
    and peer copies where two GPUs can reach each other directly."""
    import torch

    from placer.costmodel.profiler import _handover_latency

    cpus = [d for d in devices if d.kind == "cpu"]
    gpus = [d for d in devices if d.kind == "cuda"]
    links: list[dict] = []
    hosts: list[str] = []
    if len(cpus) > 1:
        wake = min(_handover_latency(200) for _ in range(3))
        latency, bandwidth = _engine_handover(cpus[:2])
        links.append({"name": "handover-cpu", "members": [d.name for d in cpus], "bandwidth_Bps": bandwidth,
                      "latency_s": max(wake, latency),
                      "source": f"{measured}: what a tensor crossing devices adds to a step in placer's torch engine "
                                f"(chains of {HANDOVER_CHAIN} Relus alternating between two devices against the "
                                "same chain on one, medians of interleaved steps, per crossing: of 1 KiB tensors "
                                "the latency, at least the "
                                f"{wake * 1e6:.1f} us two threads take to wake each other; of 1 MiB ones against "
                                "1 KiB the bandwidth: the reader's core pulls the bytes from the writer's cache)"})
    if gpus:
        anchor = cpus[0].name if cpus else "host"
        if not cpus:
            hosts.append("host")
        for g in gpus:
            bandwidth, latency = _copy_figures("cpu", g.torch_device, pinned=True)
            links.append({"name": f"pcie-{g.name.replace(':', '')}", "members": [g.name, anchor],
                          "bandwidth_Bps": bandwidth, "latency_s": latency,
                          "source": f"{measured}: host->device copies of pinned memory, 1 KiB (latency) and "
                                    f"{COPY_BYTES // 2**20} MiB (bandwidth = bytes / (t - latency)), best of 3"})
        for i, a in enumerate(gpus):
            for b in gpus[i + 1:]:
                if torch.cuda.can_device_access_peer(a.index, b.index):
                    bandwidth, latency = _copy_figures(a.torch_device, b.torch_device, pinned=False)
                    links.append({"name": f"peer-{a.index}-{b.index}", "members": [a.name, b.name],
                                  "bandwidth_Bps": bandwidth, "latency_s": latency,
                                  "source": f"{measured}: peer copies {a.name}->{b.name}, 1 KiB (latency) and "
                                            f"{COPY_BYTES // 2**20} MiB (bandwidth), best of 3"})
    return links, hosts


HANDOVER_CHAIN = 64
HANDOVER_BYTES = (1024, 2**20)   # the chains' tensor sizes: the small one gives the latency, both the bandwidth


def _engine_handover(devices) -> tuple[float, float]:
    """(latency, bandwidth) of a tensor crossing from one virtual CPU device to another in placer's
    torch engine: chains of HANDOVER_CHAIN Relus placed alternately on two devices, against the
    same chain on the first alone, per crossing (medians, the two placements interleaved), once
    with small tensors (the latency) and once with 1 MiB ones (the bytes' cost: the reader's core
    pulls them from the writer's cache). It holds what the engine does at each crossing (publishing
    the tensor, waking the reader's thread, cold caches), which the threads' wake-up alone (a few
    microseconds) leaves out: measured here, 39 us a crossing of 1 KiB and 179 us of 1 MiB."""
    small, large = (_per_crossing(devices, nbytes) for nbytes in HANDOVER_BYTES)
    extra = large - small
    bandwidth = (HANDOVER_BYTES[1] - HANDOVER_BYTES[0]) / extra if extra > 0 else HANDOVER_BANDWIDTH
    return small, bandwidth


def _per_crossing(devices, nbytes: int) -> float:
    """Seconds one crossing of an `nbytes` tensor adds to a step (see `_engine_handover`)."""
    import onnx
    from onnx import TensorProto, helper

    from placer.kernels.loading import load_graph
    from placer.placement import Placement

    shape = [1, max(1, nbytes // 4)]
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"r{i}") for i in range(HANDOVER_CHAIN)]
    model = helper.make_model(helper.make_graph(
        nodes, "handover", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(f"t{HANDOVER_CHAIN}", TensorProto.FLOAT, shape)]),
        opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    graph = load_graph(model)
    names = [d.name for d in devices]
    steps = _interleaved_medians(devices, {
        "alone": (graph, Placement(names, {n: names[0] for n in graph.nodes})),
        "alternating": (graph, Placement(names, {n: names[i % 2] for i, n in enumerate(graph.nodes)}))},
        3, "the hand-over chain")
    return max(0.0, (steps["alternating"] - steps["alone"]) / (HANDOVER_CHAIN - 1))


def _copy_figures(src: str, dst: str, pinned: bool) -> tuple[float, float]:
    import torch

    gpus = [torch.device(d) for d in (src, dst) if d.startswith("cuda")]

    def sync() -> None:
        for d in gpus:
            torch.cuda.synchronize(d)

    def timed(nbytes: int) -> float:
        x = torch.empty(nbytes // 4, dtype=torch.float32, device=src)
        if pinned:
            x = x.pin_memory()
        times = []
        for i in range(4):
            sync()
            t = time.perf_counter()
            x.to(dst, non_blocking=True)
            sync()
            if i:
                times.append(time.perf_counter() - t)
        return min(times)

    latency = timed(1024)
    big = timed(COPY_BYTES)
    return COPY_BYTES / max(big - latency, 1e-9), latency
