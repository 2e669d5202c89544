"""Clusters as plain data: device models, devices, links, and the route a copy takes.

A cluster is read from a TOML file or from the catalogue shipped in `placer/hardware/catalogue/`
(the format is described in `placer/hardware/__init__.py` and `catalogue/README.md`). Every figure
carries its source: a model's `source` names the datasheet, a link's the standard or the measurement.
"""

from __future__ import annotations

import functools
import heapq
import re
import socket
import tomllib
from decimal import Decimal
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from placer.devices import mixes_cpu_with_virtual_cpus, parse_bytes, parse_device
from placer.errors import PlacerError

CATALOGUE = Path(__file__).parent / "catalogue"
DTYPES = ("float32", "float16", "float64", "bfloat16")
KINDS = ("cpu", "cuda")
ROUTE_PROBE_BYTES = 2**20   # route() ranks paths by the time of a 1 MiB copy
LOCAL_SOURCE = "measured by placer cluster describe-local"   # + " on <hostname>, <ISO date>"


@dataclass(frozen=True)
class DeviceModel:
    """One kind of device, with the figures of its datasheet."""

    key: str                        # catalogue key, e.g. "tesla-k40"
    name: str                       # "NVIDIA Tesla K40"
    kind: str                       # "cpu" or "cuda"
    peak_flops: dict[str, float]    # dtype -> FLOP/s on CUDA cores / CPU SIMD, dense
    tensor_flops: dict[str, float]  # dtype -> FLOP/s on tensor cores, dense; {} without tensor cores
    memory_bandwidth_Bps: float     # bytes/s
    memory_bytes: int
    launch_overhead_s: float        # per-op launch/dispatch overhead
    source: str                     # the datasheet (name, year) the figures come from

    def __hash__(self) -> int:      # the dicts are not hashable; the figures are
        return hash((self.key, self.name, self.kind, tuple(sorted(self.peak_flops.items())),
                     tuple(sorted(self.tensor_flops.items())), self.memory_bandwidth_Bps, self.memory_bytes,
                     self.launch_overhead_s, self.source))

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "name": self.name, "kind": self.kind, "peak_flops": dict(self.peak_flops),
                "tensor_flops": dict(self.tensor_flops), "memory_bandwidth_Bps": self.memory_bandwidth_Bps,
                "memory_bytes": self.memory_bytes, "launch_overhead_s": self.launch_overhead_s,
                "source": self.source}


@dataclass(frozen=True)
class ClusterDevice:
    """A device placements can use: its name (`cuda:0`), its model and the machine it sits in."""

    name: str
    model: DeviceModel
    machine: str = "m0"
    # runs this many times slower while another device of its machine is busy: virtual CPU devices
    # share the machine's memory bandwidth and caches (measured by describe-local; 1: not modelled)
    contention: float = 1.0


@dataclass(frozen=True)
class Link:
    """A connection between devices and hosts. Two members: a point-to-point link, full duplex (a
    copy each way at once); more: a shared bus that every copy between any two of its members
    crosses, one at a time."""

    name: str
    members: tuple[str, ...]
    bandwidth_Bps: float            # per direction
    latency_s: float
    source: str


@dataclass(frozen=True)
class Cluster:
    """Devices, the hosts between them (non-placeable nodes such as a machine's host memory or a
    PCIe switch) and the links that join them."""

    name: str
    description: str
    devices: tuple[ClusterDevice, ...]
    links: tuple[Link, ...]
    hosts: tuple[str, ...] = ()
    source: str = ""

    @property
    def device_names(self) -> list[str]:
        return [d.name for d in self.devices]

    def device(self, name: str) -> ClusterDevice:
        for d in self.devices:
            if d.name == name:
                return d
        raise PlacerError(f"cluster {self.name} has no device {name!r}; its devices are "
                          f"{', '.join(self.device_names)}")

    def route(self, src: str, dst: str) -> tuple[Link, ...]:
        """The links a copy from src to dst crosses, in order (() when src == dst): the path over
        devices and hosts (links as hyperedges) with the least latency_sum + 1 MiB / min bandwidth;
        fewer links on a tie. A copy passes through hosts and CPU devices (host memory, where a
        staged copy lands), never through a GPU: a GPU does not forward another's copy. No path:
        PlacerError naming both devices."""
        cache = self._route_cache
        if (src, dst) not in cache:
            cache[(src, dst)] = self._find_route(src, dst)
        return cache[(src, dst)]

    def occupied(self, src: str, dst: str) -> tuple[str, ...]:
        """What a copy from src to dst holds while it runs, one name per link of its route: a
        point-to-point link only in the direction it crosses it ("name:from->to"; a link's bandwidth
        is per direction, as PCIe and NVLink carry both at once), a shared bus (three members or
        more) whole, whichever way it is crossed."""
        held = []
        at = src
        route = self.route(src, dst)
        for k, link in enumerate(route):
            if len(link.members) == 2:
                to = link.members[1] if link.members[0] == at else link.members[0]
                held.append(f"{link.name}:{at}->{to}")
            else:
                to = dst if k + 1 == len(route) else next(m for m in link.members if m in route[k + 1].members)
                held.append(link.name)
            at = to
        return tuple(held)

    @functools.cached_property
    def _route_cache(self) -> dict[tuple[str, str], tuple[Link, ...]]:
        """(src, dst) -> route; a plain dict, so that a cluster that has routed still pickles."""
        return {}

    def _find_route(self, src: str, dst: str) -> tuple[Link, ...]:
        self.device(src)
        self.device(dst)
        if src == dst:
            return ()
        relays = set(self.hosts) | {d.name for d in self.devices if d.model.kind == "cpu"}
        found = _best_route(self.links, relays, src, dst)
        if found is None:
            raise PlacerError(f"cluster {self.name} has no path from {src} to {dst}; add a link that joins them "
                              "(directly or through a host)")
        return found

    def is_this_machine(self) -> bool:
        """Whether the cluster is this machine, as `placer cluster describe-local` wrote it here:
        measured on this host (its source says so), one machine, and every device present."""
        from placer.devices import not_on_this_machine

        measured_here = self.source.startswith(f"{LOCAL_SOURCE} on {socket.gethostname() or 'localhost'},")
        return measured_here and len({d.machine for d in self.devices}) == 1 and \
            not not_on_this_machine([parse_device(n) for n in self.device_names])

    def device_specs(self) -> list[str]:
        """Device strings with the memory capacity as a cap, for placer's device parser:
        "cuda:0[mem=12884901888]" (bytes), "cpu:0[mem=...]"."""
        return [f"{d.name}[mem={d.model.memory_bytes}]" for d in self.devices]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "source": self.source,
                "devices": [{"name": d.name, "machine": d.machine, "contention": d.contention, "model": d.model.to_dict()}
                            for d in self.devices],
                "links": [{"name": link.name, "members": list(link.members), "bandwidth_Bps": link.bandwidth_Bps,
                           "latency_s": link.latency_s, "source": link.source} for link in self.links],
                "hosts": list(self.hosts)}


def route_figures(links: Iterable[Link]) -> tuple[float, float]:
    """A route's latency (its links' latencies summed) and bandwidth (its slowest link's)."""
    links = list(links)
    return sum(link.latency_s for link in links), min(link.bandwidth_Bps for link in links)


def route_time(links: Iterable[Link], nbytes: float) -> float:
    """Seconds a copy of `nbytes` takes over `links` (0 with none): the one route-cost formula, by
    which the route is chosen, the roofline model prices a copy and `placer cluster show` describes it."""
    links = list(links)
    if not links:
        return 0.0
    latency, bandwidth = route_figures(links)
    return latency + nbytes / bandwidth


def _best_route(links: Iterable[Link], relays: set[str], src: str, dst: str) -> tuple[Link, ...] | None:
    """The path's cost is not additive (its slowest link counts once), so for each bandwidth floor
    b: the least-latency path (then fewest links) over links of bandwidth >= b; the best of those.
    The optimum's own floor finds a path at least as good, so the search is exact."""
    links = list(links)
    best: tuple[tuple[float, int], tuple[Link, ...]] | None = None
    for floor in sorted({link.bandwidth_Bps for link in links}):
        path = _least_latency(links, relays, src, dst, floor)
        if path is None:
            continue
        cost = route_time(path, ROUTE_PROBE_BYTES)
        key = (round(cost, 12), len(path))
        if best is None or key < best[0]:
            best = (key, path)
    return None if best is None else best[1]


def _least_latency(links: list[Link], relays: set[str], src: str, dst: str,
                   floor: float) -> tuple[Link, ...] | None:
    """Dijkstra on (latency, hops) over the links of bandwidth >= floor; only `src` and the relays
    (hosts, CPU devices) are left from, so no GPU sits inside the path."""
    usable = [link for link in links if link.bandwidth_Bps >= floor]
    at: dict[str, list[int]] = {}
    for i, link in enumerate(usable):
        for member in link.members:
            at.setdefault(member, []).append(i)
    done: set[str] = set()
    queue: list[tuple[float, int, int, str, tuple[int, ...]]] = [(0.0, 0, 0, src, ())]
    counter = 0
    while queue:
        latency, hops, _, node, path = heapq.heappop(queue)
        if node in done:
            continue
        done.add(node)
        if node == dst:
            return tuple(usable[i] for i in path)
        if node != src and node not in relays:
            continue
        for i in at.get(node, []):
            for other in usable[i].members:
                if other != node and other not in done:
                    counter += 1
                    heapq.heappush(queue, (round(latency + usable[i].latency_s, 15), hops + 1, counter, other,
                                           path + (i,)))
    return None


# --- units -----------------------------------------------------------------------------------------

_NUMBER = r"\s*([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)\s*"
_BANDWIDTH = {"B/s": "1", "kB/s": "1e3", "KB/s": "1e3", "MB/s": "1e6", "GB/s": "1e9", "TB/s": "1e12",
              "KiB/s": 2**10, "MiB/s": 2**20, "GiB/s": 2**30, "TiB/s": 2**40,
              "bit/s": "0.125", "kbit/s": "125", "Mbit/s": "125e3", "Gbit/s": "125e6", "Tbit/s": "125e9",
              "Mb/s": "125e3", "Gb/s": "125e6", "Tb/s": "125e9", "Gbps": "125e6"}
_TIME = {"s": "1", "ms": "1e-3", "us": "1e-6", "µs": "1e-6", "ns": "1e-9"}
_FLOPS = {"FLOPS": "1", "FLOP/s": "1", "GFLOPS": "1e9", "GFLOP/s": "1e9", "TFLOPS": "1e12", "TFLOP/s": "1e12",
          "PFLOPS": "1e15", "PFLOP/s": "1e15"}


def _quantity(value: Any, units: dict[str, str | int], what: str, example: str) -> float:
    """A number in the base unit, or a string "<number> <unit>"."""
    if isinstance(value, bool):
        raise PlacerError(f"cannot read {what} {value!r}; write it like {example!r} or as a number")
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        m = re.fullmatch(_NUMBER + r"(\S*)\s*", str(value))
        if not m or m.group(2) not in units:
            raise PlacerError(f"cannot read {what} {value!r}; write it like {example!r} (units: "
                              f"{', '.join(units)}) or as a number in {next(iter(units))}")
        number = float(Decimal(m.group(1)) * Decimal(units[m.group(2)]))   # exact: "5 us" is 5e-06
    if number < 0:
        raise PlacerError(f"{what} {value!r} is negative; give a figure >= 0")
    return number


def parse_bandwidth(value: Any, what: str = "the bandwidth") -> float:
    """'15.75 GB/s' -> 15.75e9 bytes/s (decimal GB; GiB/s binary; Gbit/s bits); a number is B/s."""
    return _quantity(value, _BANDWIDTH, what, "15.75 GB/s")


def parse_time(value: Any, what: str = "the latency") -> float:
    """'10 us' -> 1e-5 s; a number is seconds."""
    return _quantity(value, _TIME, what, "10 us")


def parse_flops(value: Any, what: str = "the FLOP rate") -> float:
    """'4.29 TFLOPS' -> 4.29e12 FLOP/s; a number is FLOP/s."""
    return _quantity(value, _FLOPS, what, "19.5 TFLOPS")


def _size(value: Any, what: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return parse_bytes(value.replace(" ", ""))
        except PlacerError:
            pass
    raise PlacerError(f"cannot read {what} {value!r}; write it like '12 GiB' or '16 GB' or as a number of bytes")


# --- loading ---------------------------------------------------------------------------------------

_MODEL_FIELDS = {"key", "name", "kind", "peak_flops", "tensor_flops", "memory_bandwidth", "memory_bandwidth_Bps",
                 "memory", "memory_bytes", "launch_overhead", "launch_overhead_s", "source"}
_DEVICE_FIELDS = {"name", "model", "machine", "contention"}
_LINK_FIELDS = {"name", "members", "bandwidth", "bandwidth_Bps", "latency", "latency_s", "source"}
_CLUSTER_FIELDS = {"name", "description", "source", "hosts", "device", "link", "models"}


def _check_fields(table: Any, allowed: set[str], where: str, origin: str) -> dict:
    if not isinstance(table, dict):
        raise PlacerError(f"{where} in {origin} is not a table of key = value lines; see "
                          "placer/hardware/catalogue/README.md for the format")
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise PlacerError(f"unknown field {unknown[0]!r} in {where} in {origin}; the fields are "
                          f"{', '.join(sorted(allowed))}")
    return table


def _required(table: dict, names: tuple[str, ...], where: str, origin: str) -> Any:
    """The first of `names` present (a field and its alias); missing: a one-line error."""
    for name in names:
        if name in table:
            return table[name]
    raise PlacerError(f"{where} in {origin} has no {' or '.join(repr(n) for n in names)}; add it (see "
                      "placer/hardware/catalogue/README.md for the format)")


def _text(value: Any, what: str, origin: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise PlacerError(f"{what} in {origin} must be a non-empty string, not {value!r}")
    return value.strip()


def _flops_table(value: Any, what: str, origin: str) -> dict[str, float]:
    if not isinstance(value, dict):
        raise PlacerError(f"{what} in {origin} must be a table of dtype = rate, like "
                          "{ float32 = \"19.5 TFLOPS\" }")
    out = {}
    for dtype, rate in value.items():
        if dtype not in DTYPES:
            raise PlacerError(f"unknown dtype {dtype!r} in {what} in {origin}; use {', '.join(DTYPES)} "
                              "(TF32 tensor cores: float32)")
        out[dtype] = parse_flops(rate, f"{what}.{dtype} in {origin}:")
    return out


def _model_from_table(key: str, table: Any, origin: str) -> DeviceModel:
    where = f"model {key!r}"
    table = _check_fields(table, _MODEL_FIELDS, where, origin)
    kind = _required(table, ("kind",), where, origin)
    if kind not in KINDS:
        raise PlacerError(f"{where} in {origin} has kind {kind!r}; use 'cpu' or 'cuda'")
    peak = _flops_table(_required(table, ("peak_flops",), where, origin), f"{where} peak_flops", origin)
    if "float32" not in peak:   # the figure every op falls back on (integer ops, dtypes not listed)
        raise PlacerError(f"{where} in {origin} gives no float32 peak_flops; give at least float32")
    return DeviceModel(
        key=table.get("key", key), name=_text(_required(table, ("name",), where, origin), f"{where} name", origin),
        kind=kind, peak_flops=peak,
        tensor_flops=_flops_table(table.get("tensor_flops", {}), f"{where} tensor_flops", origin),
        memory_bandwidth_Bps=parse_bandwidth(_required(table, ("memory_bandwidth", "memory_bandwidth_Bps"), where,
                                                       origin), f"{where} memory_bandwidth in {origin}:"),
        memory_bytes=_size(_required(table, ("memory", "memory_bytes"), where, origin),
                           f"{where} memory in {origin}:"),
        launch_overhead_s=parse_time(_required(table, ("launch_overhead", "launch_overhead_s"), where, origin),
                                     f"{where} launch_overhead in {origin}:"),
        source=_text(_required(table, ("source",), where, origin), f"{where} source", origin))


def _read_toml(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlacerError(f"no cluster file {path}; give a .toml file that exists or a catalogue name "
                          f"({', '.join(catalogue_names())})") from None
    except OSError as exc:
        raise PlacerError(f"cannot read {path}: {exc.strerror or exc}; check the path and its permissions") from exc
    except UnicodeDecodeError as exc:
        raise PlacerError(f"cannot read {path}: not UTF-8 text ({exc.reason}); save it as UTF-8 TOML") from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = " ".join(str(exc).split())
        raise PlacerError(f"{path} is not valid TOML: {message}; fix the file") from exc


@functools.lru_cache(maxsize=1)
def _catalogue_models() -> dict[str, DeviceModel]:
    path = CATALOGUE / "models.toml"
    data = _read_toml(path)
    return {key: _model_from_table(key, table, str(path)) for key, table in data.items()}


def catalogue_models() -> dict[str, DeviceModel]:
    """Every device model of the catalogue, by key."""
    return dict(_catalogue_models())


def catalogue_names() -> list[str]:
    """The catalogue's cluster names (one file each in catalogue/clusters/)."""
    return sorted(p.stem for p in (CATALOGUE / "clusters").glob("*.toml"))


def load_cluster(name_or_path: str) -> Cluster:
    """A catalogue name ("paper-4xk40") or a path to a .toml file; a problem is one PlacerError line."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    if path.suffix != ".toml" and not path.is_file():
        if text in catalogue_names():
            path = CATALOGUE / "clusters" / f"{text}.toml"
        else:
            raise PlacerError(f"unknown cluster {text!r}; use a catalogue name ({', '.join(catalogue_names())}) "
                              "or a path to a .toml file")
    return _cluster_from_dict(_read_toml(path), str(path), default_name=path.stem)


def _table_list(data: dict, key: str, origin: str) -> list:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise PlacerError(f"'{key}' in {origin} must be an array of tables; write each as [[{key}]]")
    return value


def _cluster_from_dict(data: dict, origin: str, default_name: str) -> Cluster:
    _check_fields(data, _CLUSTER_FIELDS, "the cluster", origin)
    models = dict(_catalogue_models())
    own = data.get("models", {})
    if not isinstance(own, dict):
        raise PlacerError(f"'models' in {origin} must be tables [models.<key>]")
    for key, table in own.items():
        models[key] = _model_from_table(key, table, origin)

    hosts = data.get("hosts", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) and h for h in hosts):
        raise PlacerError(f"'hosts' in {origin} must be a list of names, like hosts = [\"host:m0\"]")

    devices: list[ClusterDevice] = []
    for i, table in enumerate(_table_list(data, "device", origin)):
        where = f"[[device]] number {i + 1}"
        _check_fields(table, _DEVICE_FIELDS, where, origin)
        name = _text(_required(table, ("name",), where, origin), f"{where} name", origin)
        try:
            parsed = parse_device(name)
        except PlacerError as exc:
            raise PlacerError(f"device {name!r} in {origin}: {exc}") from None
        if str(parsed) != name or parsed.name != name:
            raise PlacerError(f"device {name!r} in {origin}: give the plain name ({parsed.name}); its memory "
                              "comes from its model")
        model_key = _text(_required(table, ("model",), where, origin), f"{where} model", origin)
        if model_key not in models:
            raise PlacerError(f"unknown model {model_key!r} for device {name} in {origin}; the catalogue's models "
                              f"are {', '.join(sorted(_catalogue_models()))}, or define it in a [models.{model_key}] "
                              "table")
        model = models[model_key]
        if model.kind != parsed.kind:
            raise PlacerError(f"device {name} in {origin} has model {model_key!r}, a {model.kind} device; "
                              f"use a {parsed.kind} model or a {model.kind}:N name")
        machine = table.get("machine", "m0")
        if not isinstance(machine, str) or not machine:
            raise PlacerError(f"{where} in {origin}: machine must be a name like \"m0\"")
        contention = table.get("contention", 1.0)
        if isinstance(contention, bool) or not isinstance(contention, (int, float)) or not contention >= 1.0:
            raise PlacerError(f"device {name} in {origin}: contention must be a number of at least 1 (how many times "
                              f"slower it runs while another device of its machine is busy), not {contention!r}")
        devices.append(ClusterDevice(name=name, model=model, machine=machine, contention=float(contention)))
    if not devices:
        raise PlacerError(f"{origin} declares no device; add at least one [[device]] with name and model")
    names = [d.name for d in devices]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise PlacerError(f"device {dupes[0]} is declared twice in {origin}; give each device once")
    if mixes_cpu_with_virtual_cpus([parse_device(n) for n in names]):
        raise PlacerError(f"{origin} mixes 'cpu' with virtual CPU devices 'cpu:K'; name them cpu:0, cpu:1, ...")
    clash = sorted(set(hosts) & set(names))
    if clash:
        raise PlacerError(f"{clash[0]!r} in {origin} is both a device and a host; give the host another name")

    nodes = set(names) | set(hosts)
    links: list[Link] = []
    for i, table in enumerate(_table_list(data, "link", origin)):
        where = f"[[link]] number {i + 1}"
        _check_fields(table, _LINK_FIELDS, where, origin)
        name = _text(_required(table, ("name",), where, origin), f"{where} name", origin)
        where = f"link {name!r}"
        members = _required(table, ("members",), where, origin)
        if not isinstance(members, list) or len(members) < 2 or not all(isinstance(m, str) for m in members) \
                or len(set(members)) != len(members):
            raise PlacerError(f"{where} in {origin}: members must list two or more different devices or hosts")
        for member in members:
            if member not in nodes:
                raise PlacerError(f"{where} in {origin} names {member!r}, which is neither a device "
                                  f"({', '.join(names)}) nor a declared host ({', '.join(hosts) or 'none'}); "
                                  "declare it in hosts = [...] or fix the name")
        bandwidth = parse_bandwidth(_required(table, ("bandwidth", "bandwidth_Bps"), where, origin),
                                    f"{where} bandwidth in {origin}:")
        if bandwidth <= 0:
            raise PlacerError(f"{where} in {origin} has bandwidth 0; give its bandwidth per direction")
        links.append(Link(name=name, members=tuple(members), bandwidth_Bps=bandwidth,
                          latency_s=parse_time(_required(table, ("latency", "latency_s"), where, origin),
                                               f"{where} latency in {origin}:"),
                          source=_text(_required(table, ("source",), where, origin), f"{where} source", origin)))
    link_names = [link.name for link in links]
    dupes = sorted({n for n in link_names if link_names.count(n) > 1})
    if dupes:
        raise PlacerError(f"link {dupes[0]!r} is declared twice in {origin}; give each link its own name")

    cluster = Cluster(name=_text(data.get("name", default_name), "name", origin),
                      description=str(data.get("description", "")).strip(), devices=tuple(devices),
                      links=tuple(links), hosts=tuple(hosts), source=str(data.get("source", "")).strip())
    _check_connected(cluster, origin)
    return cluster


def _check_connected(cluster: Cluster, origin: str) -> None:
    """Every device reaches every other (through hosts and CPU devices, as a copy does)."""
    names = cluster.device_names
    for i, src in enumerate(names):
        for dst in names[i + 1:]:
            try:
                cluster.route(src, dst)
            except PlacerError:
                raise PlacerError(f"the devices of {origin} are not all connected: no path from {src} to {dst} "
                                  "(a copy passes through hosts and CPU devices, never through a GPU); add a "
                                  "[[link]] that joins them") from None
