"""placer.hardware.cluster_toml: a cluster written as TOML loads back with its figures (to 4
significant digits), its contention where there is one, and its hosts."""

from __future__ import annotations

import pytest

from placer.hardware import load_cluster
from placer.hardware.cluster_toml import cluster_toml, toml_value

MODEL = {"name": "A GPU", "kind": "cuda", "peak_flops": {"float32": 1.23456e13}, "tensor_flops": {},
         "memory_bandwidth_Bps": 9e11, "memory_bytes": 16 * 2**30, "launch_overhead_s": 5e-6, "source": "measured"}
LINKS = [{"name": "pcie", "members": ["cuda:0", "host"], "bandwidth_Bps": 1.2e10, "latency_s": 1e-5,
          "source": "measured"},
         {"name": "pcie1", "members": ["cuda:1", "host"], "bandwidth_Bps": 1.2e10, "latency_s": 1e-5,
          "source": "measured"}]


def test_a_written_cluster_loads_back_with_its_figures(tmp_path):
    path = tmp_path / "box.toml"
    path.write_text(cluster_toml("box", "two GPUs", "measured here", [("cuda:0", "gpu", 1.25), ("cuda:1", "gpu", 1.0)],
                                 {"gpu": MODEL}, LINKS, ["host"], header="Written by a test.",
                                 contention_source="a chain on one device against two"))
    text = path.read_text()
    assert text.startswith("# Written by a test.\n") and "# contention: a chain on one device against two" in text
    cluster = load_cluster(str(path))
    assert cluster.name == "box" and list(cluster.hosts) == ["host"] and cluster.device_names == ["cuda:0", "cuda:1"]
    assert [d.contention for d in cluster.devices] == [1.25, 1.0]
    assert cluster.devices[0].model.peak_flops["float32"] == 1.235e13   # 4 significant digits
    assert cluster.route("cuda:0", "cuda:1") and len(cluster.links) == 2


def test_a_figure_that_is_not_finite_is_not_written():
    with pytest.raises(ValueError):
        toml_value(float("inf"))
