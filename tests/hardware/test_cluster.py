"""placer.hardware: the catalogue loads with a source for every figure, routes follow the links a
copy really crosses, and a bad cluster file is one line that says what to do."""

from __future__ import annotations

import json
import pickle

import pytest

from placer.devices import parse_device
from placer.errors import PlacerError
from placer.hardware import (Cluster, DeviceModel, catalogue_models, catalogue_names, load_cluster, route_figures,
                             route_time)
from placer.hardware.cluster import parse_bandwidth, parse_flops, parse_time

REQUIRED = {"paper-4xk40", "paper-2xk40", "dgx1-v100", "4xa100-nvlink", "8xh100-nvlink", "2xt4-pcie", "cpu-rtx4090",
            "2x2gpu-25gbe", "cpu-fast-slow-gpu", "v100-k40-mix"}


def names(route) -> list[str]:
    return [link.name for link in route]


def write(tmp_path, text: str, name: str = "box.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def one_line_error(path, *fragments: str) -> str:
    with pytest.raises(PlacerError) as info:
        load_cluster(str(path))
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


GPU_MODEL = """
[models.my-gpu]
name = "My GPU"
kind = "cuda"
peak_flops = { float32 = "10 TFLOPS", float64 = "0.3 TFLOPS" }
tensor_flops = { float16 = "80 TFLOPS" }
memory_bandwidth = "500 GB/s"
memory = "12 GiB"
launch_overhead = "5 us"
source = "My GPU datasheet (2024)"
"""

TWO_GPUS = """
name = "my-box"
description = "a CPU and two of my GPUs"
hosts = ["switch"]
[[device]]
name = "cpu:0"
model = "xeon-e5-2699-v3"
[[device]]
name = "cuda:0"
model = "my-gpu"
[[device]]
name = "cuda:1"
model = "my-gpu"
[[link]]
name = "pcie0"
members = ["cuda:0", "switch"]
bandwidth = "15.75 GB/s"
latency = "5 us"
source = "PCIe 3.0"
[[link]]
name = "pcie1"
members = ["cuda:1", "switch"]
bandwidth = 15.75e9
latency_s = 5e-6
source = "PCIe 3.0"
[[link]]
name = "uplink"
members = ["switch", "cpu:0"]
bandwidth = "15.75 GB/s"
latency = "5 us"
source = "PCIe 3.0"
""" + GPU_MODEL


# --- the catalogue ---------------------------------------------------------------------------------

def test_the_catalogue_has_the_clusters_of_the_issue():
    assert REQUIRED <= set(catalogue_names())


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_every_catalogue_cluster_loads_with_a_source_for_every_figure(name):
    cluster = load_cluster(name)
    assert cluster.name == name and cluster.description and cluster.source
    assert any(d.model.kind == "cpu" for d in cluster.devices), "every catalogue cluster has a CPU device"
    for d in cluster.devices:
        parse_device(d.name)
        m = d.model
        assert m.source and m.name and m.kind == parse_device(d.name).kind
        assert m.peak_flops.get("float32", 0) > 0 and all(v > 0 for v in m.tensor_flops.values())
        assert m.memory_bandwidth_Bps > 0 and m.memory_bytes > 0 and m.launch_overhead_s > 0
    for link in cluster.links:
        assert link.source and link.bandwidth_Bps > 0 and link.latency_s >= 0 and len(link.members) >= 2
    json.dumps(cluster.to_dict())   # JSON-ready


def test_every_catalogue_model_has_a_source_and_its_datasheet_figures():
    models = catalogue_models()
    assert all(isinstance(m, DeviceModel) and m.source for m in models.values())
    k40, h100 = models["tesla-k40"], models["h100-sxm5-80gb"]
    assert k40.peak_flops == {"float32": 4.29e12, "float64": 1.43e12} and k40.tensor_flops == {}
    assert k40.memory_bandwidth_Bps == 288e9 and k40.memory_bytes == 12 * 2**30
    assert h100.tensor_flops["bfloat16"] == pytest.approx(989.4e12) and h100.memory_bandwidth_Bps == 3.35e12


def test_device_specs_carry_the_memory_cap_placer_parses():
    cluster = load_cluster("paper-4xk40")
    specs = cluster.device_specs()
    assert specs[1] == "cuda:0[mem=12884901888]"
    assert [parse_device(s).mem_cap for s in specs] == [d.model.memory_bytes for d in cluster.devices]
    assert [parse_device(s).name for s in specs] == cluster.device_names


def test_a_cluster_is_plain_hashable_data_that_pickles_after_routing():
    a, b = load_cluster("dgx1-v100"), load_cluster("dgx1-v100")
    assert isinstance(a, Cluster) and a == b and hash(a) == hash(b)
    route = a.route("cuda:0", "cuda:5")
    assert a.route("cuda:0", "cuda:5") is route   # cached
    copy = pickle.loads(pickle.dumps(a))        # e.g. to a worker process
    assert copy == a and copy.route("cuda:0", "cuda:5") == route
    assert a.device("cuda:3").model.key == "tesla-v100-sxm2-16gb"
    with pytest.raises(PlacerError, match="no device 'cuda:9'"):
        a.device("cuda:9")


# --- routes ----------------------------------------------------------------------------------------

def test_paper_4xk40_gpu_to_gpu_crosses_the_shared_bridge_and_both_pcie_links():
    cluster = load_cluster("paper-4xk40")
    assert names(cluster.route("cuda:0", "cuda:1")) == ["pcie-gpu0", "pcie-host-bridge", "pcie-gpu1"]
    assert names(cluster.route("cuda:2", "cpu:0")) == ["pcie-gpu2", "pcie-host-bridge"]
    # every GPU's copies to the host share the one bridge
    assert {names(cluster.route(f"cuda:{i}", "cpu:0"))[-1] for i in range(4)} == {"pcie-host-bridge"}
    assert cluster.route("cuda:1", "cuda:1") == ()


def test_dgx1_routes_over_nvlink_where_a_pair_has_one_and_through_the_host_side_where_not():
    cluster = load_cluster("dgx1-v100")
    assert names(cluster.route("cuda:0", "cuda:3")) == ["nvlink-0-3"]
    assert cluster.route("cuda:0", "cuda:3")[0].bandwidth_Bps == 50e9      # two NVLinks
    assert cluster.route("cuda:0", "cuda:1")[0].bandwidth_Bps == 25e9      # one
    far = names(cluster.route("cuda:0", "cuda:5"))                        # no NVLink: not forwarded by a GPU
    assert far == ["pcie-gpu0", "pcie-uplink0", "qpi", "pcie-uplink2", "pcie-gpu5"]
    nvlink_pairs = {tuple(link.members) for link in cluster.links if link.name.startswith("nvlink")}
    assert len(nvlink_pairs) == 16


def test_a_cross_machine_copy_crosses_the_network_link():
    cluster = load_cluster("2x2gpu-25gbe")
    assert names(cluster.route("cuda:0", "cuda:3")) == ["pcie-gpu0", "net-25gbe", "pcie-gpu3"]
    assert names(cluster.route("cuda:2", "cuda:3")) == ["nvlink-2-3"]
    assert cluster.device("cuda:3").machine == "m1"


def test_nvswitch_pairs_cross_both_ports():
    cluster = load_cluster("8xh100-nvlink")
    route = cluster.route("cuda:1", "cuda:6")
    assert names(route) == ["nvlink-port1", "nvlink-port6"] and min(l.bandwidth_Bps for l in route) == 450e9


def test_a_route_costs_its_latencies_plus_the_bytes_over_its_slowest_link():
    route = load_cluster("paper-4xk40").route("cuda:0", "cuda:1")   # PCIe, host bridge, PCIe
    latency, bandwidth = route_figures(route)
    assert latency == pytest.approx(sum(link.latency_s for link in route)) and latency > route[0].latency_s
    assert bandwidth == min(link.bandwidth_Bps for link in route)
    assert route_time(route, 2**20) == pytest.approx(latency + 2**20 / bandwidth)
    assert route_time((), 2**20) == 0.0


def test_the_route_weighs_latency_against_bandwidth_and_prefers_fewer_links_on_a_tie(tmp_path):
    base = """
hosts = ["h"]
[[device]]
name = "cpu:0"
model = "xeon-e5-2699-v3"
[[device]]
name = "cpu:1"
model = "xeon-e5-2699-v3"
"""
    def link(name, members, bandwidth, latency):
        return (f'\n[[link]]\nname = "{name}"\nmembers = {json.dumps(members)}\nbandwidth = "{bandwidth}"\n'
                f'latency = "{latency}"\nsource = "test"\n')

    # slow direct (1 MiB at 1 GB/s ~ 1 ms) against fast two-hop (2 x 10 us + 1 MiB at 100 GB/s ~ 30 us)
    path = write(tmp_path, base + link("slow", ["cpu:0", "cpu:1"], "1 GB/s", "1 us")
                 + link("a", ["cpu:0", "h"], "100 GB/s", "10 us") + link("b", ["h", "cpu:1"], "100 GB/s", "10 us"))
    assert names(load_cluster(str(path)).route("cpu:0", "cpu:1")) == ["a", "b"]
    # the same cost one link or two: the one link
    path = write(tmp_path, base + link("a", ["cpu:0", "h"], "100 GB/s", "5 us")
                 + link("b", ["h", "cpu:1"], "100 GB/s", "5 us")
                 + link("direct", ["cpu:0", "cpu:1"], "100 GB/s", "10 us"))
    assert names(load_cluster(str(path)).route("cpu:0", "cpu:1")) == ["direct"]


def test_a_gpu_does_not_forward_a_copy(tmp_path):
    path = write(tmp_path, """
[[device]]
name = "cuda:0"
model = "tesla-k40"
[[device]]
name = "cuda:1"
model = "tesla-k40"
[[device]]
name = "cuda:2"
model = "tesla-k40"
[[link]]
name = "l01"
members = ["cuda:0", "cuda:1"]
bandwidth = "25 GB/s"
latency = "5 us"
source = "test"
[[link]]
name = "l12"
members = ["cuda:1", "cuda:2"]
bandwidth = "25 GB/s"
latency = "5 us"
source = "test"
""")
    one_line_error(path, "not all connected", "cuda:0", "cuda:2")


# --- a user's file ---------------------------------------------------------------------------------

def test_a_user_file_with_its_own_model_loads(tmp_path):
    cluster = load_cluster(str(write(tmp_path, TWO_GPUS)))
    gpu = cluster.device("cuda:1").model
    assert (gpu.key, gpu.kind, gpu.source) == ("my-gpu", "cuda", "My GPU datasheet (2024)")
    assert gpu.peak_flops == {"float32": 10e12, "float64": 0.3e12} and gpu.tensor_flops == {"float16": 80e12}
    assert (gpu.memory_bandwidth_Bps, gpu.memory_bytes, gpu.launch_overhead_s) == (500e9, 12 * 2**30, 5e-6)
    assert cluster.device("cpu:0").machine == "m0" and cluster.hosts == ("switch",)
    assert names(cluster.route("cuda:0", "cuda:1")) == ["pcie0", "pcie1"]
    assert names(cluster.route("cuda:0", "cpu:0")) == ["pcie0", "uplink"]
    assert cluster.links[1].bandwidth_Bps == 15.75e9 and cluster.links[1].latency_s == 5e-6


def test_units():
    assert parse_bandwidth("15.75 GB/s") == 15.75e9 and parse_bandwidth("1 GiB/s") == 2**30
    assert parse_bandwidth("25 Gbit/s") == 3.125e9 and parse_bandwidth(7) == 7.0
    assert parse_time("10 us") == pytest.approx(1e-5) and parse_time("2 ms") == 2e-3 and parse_time(0.5) == 0.5
    assert parse_flops("4.29 TFLOPS") == 4.29e12
    with pytest.raises(PlacerError, match="15.75 GB/s"):
        parse_bandwidth("fast")


# --- errors: one line each -------------------------------------------------------------------------

def test_a_missing_file(tmp_path):
    one_line_error(tmp_path / "nope.toml", "no cluster file", "nope.toml")


def test_an_unknown_catalogue_name():
    one_line_error("dgx-9000", "unknown cluster 'dgx-9000'", "paper-4xk40")


def test_malformed_toml_gives_tomllibs_message(tmp_path):
    one_line_error(write(tmp_path, 'name = "x"\n[[device]\nname = "cpu:0"\n'), "not valid TOML", "line 2")


def test_an_unknown_model_lists_the_catalogues(tmp_path):
    text = TWO_GPUS.replace('model = "my-gpu"\n[[device]]', 'model = "tesla-k99"\n[[device]]', 1)
    one_line_error(write(tmp_path, text), "unknown model 'tesla-k99'", "cuda:0", "tesla-k40", "h100-sxm5-80gb",
                   "[models.tesla-k99]")


def test_a_link_member_that_is_neither_a_device_nor_a_host(tmp_path):
    one_line_error(write(tmp_path, TWO_GPUS.replace('["cuda:1", "switch"]', '["cuda:7", "switch"]')),
                   "link 'pcie1'", "'cuda:7'", "neither a device", "hosts")


def test_a_device_string_placer_cannot_parse(tmp_path):
    one_line_error(write(tmp_path, TWO_GPUS.replace('name = "cuda:1"', 'name = "gpu:1"')), "unknown device 'gpu:1'")
    one_line_error(write(tmp_path, TWO_GPUS.replace('name = "cuda:1"', 'name = "cuda:1[mem=4GiB]"')),
                   "plain name (cuda:1)")


def test_a_missing_required_field(tmp_path):
    one_line_error(write(tmp_path, TWO_GPUS.replace('latency = "5 us"\nsource = "PCIe 3.0"\n[[link]]\nname = "pcie1"',
                                                    'source = "PCIe 3.0"\n[[link]]\nname = "pcie1"')),
                   "link 'pcie0'", "no 'latency' or 'latency_s'")
    one_line_error(write(tmp_path, TWO_GPUS.replace('source = "My GPU datasheet (2024)"\n', '')),
                   "model 'my-gpu'", "no 'source'")


def test_devices_not_all_connected(tmp_path):
    text = TWO_GPUS.replace('members = ["switch", "cpu:0"]', 'members = ["switch", "cuda:0"]')
    one_line_error(write(tmp_path, text), "not all connected", "cpu:0")


def test_a_model_of_the_wrong_kind_and_an_unknown_field(tmp_path):
    one_line_error(write(tmp_path, TWO_GPUS.replace('name = "cpu:0"\nmodel = "xeon-e5-2699-v3"',
                                                    'name = "cpu:0"\nmodel = "tesla-k40"')), "cuda device")
    one_line_error(write(tmp_path, TWO_GPUS.replace('latency = "5 us"', 'latncy = "5 us"', 1)),
                   "unknown field 'latncy'")


def test_a_devices_contention_is_read_and_must_be_at_least_one(tmp_path):
    text = TWO_GPUS.replace('name = "cpu:0"\n', 'name = "cpu:0"\ncontention = 1.25\n', 1)
    assert 'contention = 1.25' in text
    cluster = load_cluster(str(write(tmp_path, text)))
    assert cluster.device("cpu:0").contention == 1.25 and cluster.device("cuda:0").contention == 1.0
    one_line_error(write(tmp_path, text.replace("1.25", "0.5")), "contention must be a number of at least 1", "cpu:0")
