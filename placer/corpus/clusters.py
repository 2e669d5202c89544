"""Clusters to learn on: the catalogue's, and clusters sampled around it.

A sampled cluster is built the way the catalogue's are (one CPU per machine, each GPU on a PCIe
link to its machine's CPU, optionally an NVLink mesh or an NVSwitch between a machine's GPUs, a
network link between machines' CPUs), with models drawn from `catalogue_models()` and link figures
drawn from the standards the catalogue cites, so every cluster the policy sees is one that could
exist. A sampled cluster never has the devices of a held-out cluster (same models, same machines).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import numpy as np

from placer.hardware import Cluster, ClusterDevice, DeviceModel, Link, catalogue_models, catalogue_names, load_cluster

MIN_DEVICES, MAX_DEVICES = 2, 8
# per direction, bytes/s, as the catalogue's files cite them
PCIE_BPS = (15.75e9, 31.5e9, 63e9)                 # PCIe 3.0 / 4.0 / 5.0 x16
NVLINK_BPS = (25e9, 50e9, 150e9, 300e9)            # one NVLink 2 lane .. an A100 bridge
NVSWITCH_BPS = (150e9, 300e9, 450e9)               # a GPU's NVSwitch port (A100, H100)
NETWORK_BPS = (1.25e9, 3.125e9, 12.5e9, 25e9)      # 10/25/100 GbE, 200 Gb InfiniBand
SOURCE = "sampled by placer.corpus around the catalogue: catalogue device models, link figures of PCIe 3-5, " \
         "NVLink, NVSwitch and 10-200 Gb networks as the catalogue's files cite them"


def signature(cluster: Cluster) -> tuple:
    """What makes two clusters the same hardware for held-out purposes: the device models and the
    machines they sit in (names and link figures aside)."""
    per_machine = Counter((d.machine, d.model.key) for d in cluster.devices)
    machines = sorted(tuple(sorted((k, n) for (m, k), n in per_machine.items() if m == machine))
                      for machine in {d.machine for d in cluster.devices})
    return tuple(machines)


def catalogue_clusters(names: tuple[str, ...] | list[str] | None = None) -> list[Cluster]:
    """The catalogue's clusters (all, or the ones named), in name order."""
    return [load_cluster(name) for name in (names if names is not None else catalogue_names())]


def sample_cluster(rng: np.random.Generator | int, n_devices: int | None = None,
                   avoid: tuple[tuple, ...] = ()) -> Cluster:
    """A cluster of `n_devices` devices (CPUs included; 2-8, drawn when None): one or two machines,
    heterogeneous GPUs from the catalogue, varied PCIe, NVLink and network links. `avoid` lists
    signatures (`signature`) it must not have; it is redrawn until it has none of them."""
    rng = np.random.default_rng(rng)
    if n_devices is not None and not MIN_DEVICES <= n_devices <= MAX_DEVICES:
        raise ValueError(f"a sampled cluster has {MIN_DEVICES} to {MAX_DEVICES} devices, not {n_devices}")
    for _ in range(100):
        cluster = _draw(rng, n_devices if n_devices is not None else int(rng.integers(MIN_DEVICES, MAX_DEVICES + 1)))
        if signature(cluster) not in avoid:
            return cluster
    raise RuntimeError(f"could not draw a {n_devices}-device cluster outside the {len(avoid)} avoided ones")


def _draw(rng: np.random.Generator, n: int) -> Cluster:
    models = catalogue_models()
    cpus = sorted(k for k, m in models.items() if m.kind == "cpu")
    gpus = sorted(k for k, m in models.items() if m.kind == "cuda")
    machines = 2 if n >= 4 and rng.random() < 0.4 else 1
    gpu_counts = _split(n - machines, machines, rng)
    devices: list[ClusterDevice] = []
    links: list[Link] = []
    hosts: list[str] = []
    gpu_index = 0
    for m, count in enumerate(gpu_counts):
        machine = f"m{m}"
        cpu = f"cpu:{m}"
        devices.append(ClusterDevice(cpu, models[str(rng.choice(cpus))], machine))
        # a machine's GPUs are one model, or (half the time) each drawn on its own
        same = rng.random() < 0.5
        first = str(rng.choice(gpus))
        pcie = float(rng.choice(PCIE_BPS))
        names = []
        for _ in range(count):
            name = f"cuda:{gpu_index}"
            gpu_index += 1
            names.append(name)
            devices.append(ClusterDevice(name, models[first if same else str(rng.choice(gpus))], machine))
            links.append(Link(f"pcie-{name}", (name, cpu), pcie, 10e-6, SOURCE))
        links += _gpu_fabric(names, machine, hosts, rng)
    if machines == 2:
        links.append(Link("network", ("cpu:0", "cpu:1"), float(rng.choice(NETWORK_BPS)),
                          round(float(rng.uniform(5, 20)), 1) * 1e-6, SOURCE))
    # named by its content, so the same draw has the same name in every process
    content = repr([(d.name, d.model.key, d.machine) for d in devices] + [(l.members, l.bandwidth_Bps) for l in links])
    name = f"sampled-{n}dev-{hashlib.sha256(content.encode()).hexdigest()[:8]}"
    cluster = Cluster(name=name, description=f"{n} devices on {machines} machine(s), sampled around the catalogue",
                      devices=tuple(devices), links=tuple(links), hosts=tuple(hosts), source=SOURCE)
    for a in cluster.device_names:   # every device reaches every other (a PlacerError here is a bug)
        for b in cluster.device_names:
            cluster.route(a, b)
    return cluster


def _split(total: int, parts: int, rng: np.random.Generator) -> list[int]:
    """`total` GPUs over `parts` machines, at least one each."""
    if parts == 1:
        return [total]
    first = int(rng.integers(1, total))
    return [first, total - first]


def _gpu_fabric(names: list[str], machine: str, hosts: list[str], rng: np.random.Generator) -> list[Link]:
    """Links between one machine's GPUs: none (PCIe through the CPU only), a pairwise NVLink mesh,
    or an NVSwitch (a host with one port link per GPU)."""
    if len(names) < 2:
        return []
    kind = rng.choice(("pcie", "nvlink", "nvswitch"))
    if kind == "nvlink":
        bandwidth = float(rng.choice(NVLINK_BPS))
        return [Link(f"nvlink-{a}-{b}", (a, b), bandwidth, 5e-6, SOURCE)
                for i, a in enumerate(names) for b in names[i + 1:]]
    if kind == "nvswitch":
        switch = f"nvswitch:{machine}"
        hosts.append(switch)
        bandwidth = float(rng.choice(NVSWITCH_BPS))
        return [Link(f"nvswitch-{a}", (a, switch), bandwidth, 5e-6, SOURCE) for a in names]
    return []


def _toml(value) -> str:
    """A TOML value, floats exact (repr), so that a written cluster loads as the same figures."""
    if isinstance(value, str):
        return json.dumps(value)   # a JSON string is a valid TOML basic string
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value)
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }" if value else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def _model_table(model: DeviceModel) -> dict:
    return {"name": model.name, "kind": model.kind, "peak_flops": model.peak_flops, "tensor_flops": model.tensor_flops,
            "memory_bandwidth_Bps": model.memory_bandwidth_Bps, "memory_bytes": model.memory_bytes,
            "launch_overhead_s": model.launch_overhead_s, "source": model.source}


def write_cluster(cluster: Cluster, path: str | Path) -> Path:
    """`cluster` as a cluster TOML file (the catalogue's format) that `load_cluster` reads back as
    the same cluster, so a sampled one can be shown, compared on and placed for by file (--cluster)."""
    lines = [f"name = {_toml(cluster.name)}", f"description = {_toml(cluster.description)}",
             f"source = {_toml(cluster.source)}"]
    if cluster.hosts:
        lines.append(f"hosts = {_toml(list(cluster.hosts))}")
    catalogue = catalogue_models()
    own = {}
    for d in cluster.devices:
        lines += ["", "[[device]]", f"name = {_toml(d.name)}", f"model = {_toml(d.model.key)}",
                  f"machine = {_toml(d.machine)}", f"contention = {_toml(d.contention)}"]
        if catalogue.get(d.model.key) != d.model:   # not the catalogue's: the file carries its figures
            own[d.model.key] = d.model
    for link in cluster.links:
        lines += ["", "[[link]]", f"name = {_toml(link.name)}", f"members = {_toml(list(link.members))}",
                  f"bandwidth_Bps = {_toml(link.bandwidth_Bps)}", f"latency_s = {_toml(link.latency_s)}",
                  f"source = {_toml(link.source)}"]
    for key, model in own.items():
        lines += ["", f"[models.{json.dumps(key)}]"] + [f"{k} = {_toml(v)}" for k, v in _model_table(model).items()]
    path = Path(path)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
