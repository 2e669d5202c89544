"""`placer cluster list|show|describe-local`: the catalogue as a table and as JSON, a bad file as one
line and exit 2, and this machine written as a cluster file that loads back."""

from __future__ import annotations

import json

import pytest

from placer.cli import main
from placer.hardware import catalogue_names, load_cluster

BOX = """
name = "box"
[[device]]
name = "cpu:0"
model = "xeon-e5-2699-v3"
[[device]]
name = "cuda:0"
model = "tesla-k40"
[[link]]
name = "pcie0"
members = ["cuda:0", "cpu:0"]
bandwidth = "15.75 GB/s"
latency = "10 us"
source = "PCIe 3.0"
"""


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(["cluster", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_list_names_every_cluster_with_its_device_count_and_models(capsys):
    code, out, _ = run(capsys, "list")
    assert code == 0
    line = next(l for l in out.splitlines() if l.startswith("paper-4xk40 "))
    assert "5" in line.split() and "1x xeon-e5-2699-v3, 4x tesla-k40" in line and "Mirhoseini" in line
    assert all(any(l.startswith(name + " ") for l in out.splitlines()) for name in catalogue_names())


def test_list_json(capsys):
    code, out, _ = run(capsys, "list", "--json")
    rows = {row["name"]: row for row in json.loads(out)}
    assert code == 0 and set(rows) == set(catalogue_names())
    assert rows["dgx1-v100"]["devices"] == 10 and rows["dgx1-v100"]["models"]["tesla-v100-sxm2-16gb"] == 8


@pytest.mark.parametrize("name", catalogue_names())
def test_show_json_gives_devices_with_their_model_and_figures_and_the_links(name, capsys):
    code, out, _ = run(capsys, "show", name, "--json")
    data = json.loads(out)
    assert code == 0 and data == load_cluster(name).to_dict()
    assert data["name"] == name and data["devices"] and data["links"]
    for device in data["devices"]:
        model = device["model"]
        assert device["name"] and device["machine"] and model["key"] and model["source"]
        assert model["peak_flops"]["float32"] > 0 and model["memory_bandwidth_Bps"] > 0
        assert model["memory_bytes"] > 0 and model["launch_overhead_s"] > 0 and "tensor_flops" in model
    for link in data["links"]:
        assert len(link["members"]) >= 2 and link["bandwidth_Bps"] > 0 and link["latency_s"] >= 0 and link["source"]


def test_show_prints_figures_links_and_routes(capsys):
    code, out, _ = run(capsys, "show", "paper-4xk40")
    assert code == 0
    for expected in ("tesla-k40", "4.29", "288", "12", "NVIDIA Tesla K40 GPU Accelerator datasheet (2013)",
                     "pcie-host-bridge", "(shared bus)", "cuda:0 <-> cuda:1",
                     "pcie-gpu0 > pcie-host-bridge > pcie-gpu1", "pcie-host-bridge (10 pairs)"):
        assert expected in out, expected
    code, out, _ = run(capsys, "show", "dgx1-v100")
    assert "cuda:0 <-> cuda:3  direct" in out and "nvlink-0-3" in out


def test_show_takes_a_file(tmp_path, capsys):
    path = tmp_path / "box.toml"
    path.write_text(BOX)
    code, out, _ = run(capsys, "show", str(path))
    assert code == 0 and "cpu:0 <-> cuda:0  direct  pcie0" in out


@pytest.mark.parametrize("text, fragments", [
    ('name = "x"\n[[device\n', ["is not valid TOML", "line 2"]),
    (BOX.replace('"tesla-k40"', '"tesla-k99"'), ["unknown model 'tesla-k99'", "tesla-k40"]),
    (BOX.replace('["cuda:0", "cpu:0"]', '["cuda:1", "cpu:0"]'), ["'cuda:1'", "neither a device", "declared host"]),
], ids=["malformed", "unknown-model", "missing-device"])
def test_a_bad_file_is_one_line_and_exit_2(tmp_path, capsys, text, fragments):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    code, out, err = run(capsys, "show", str(path))
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("error: ")
    for fragment in fragments:
        assert fragment in err, err


def test_an_unknown_name_is_one_line_and_exit_2(capsys):
    code, _, err = run(capsys, "show", "dgx-9000")
    assert code == 2 and err.count("\n") == 1 and "unknown cluster" in err and "paper-4xk40" in err


def test_describe_local_writes_a_file_that_loads_with_measured_figures(tmp_path, capsys):
    path = tmp_path / "here.toml"
    code, out, _ = run(capsys, "describe-local", "-o", str(path), "--devices", "cpu:0[threads=1],cpu:1[threads=1]")
    assert code == 0 and "wrote" in out
    cluster = load_cluster(str(path))
    assert cluster.device_names == ["cpu:0", "cpu:1"]
    for d in cluster.devices:
        m = d.model
        assert m.peak_flops["float32"] > 0 and m.memory_bandwidth_Bps > 0 and m.memory_bytes > 0
        assert 0 < m.launch_overhead_s < 0.01 and "measured by placer cluster describe-local" in m.source
    (link,) = cluster.links
    assert set(link.members) == {"cpu:0", "cpu:1"} and 0 < link.latency_s < 0.01 and "measured" in link.source
    assert cluster.route("cpu:0", "cpu:1") == (link,)
    # two virtual CPUs share the machine's memory: measured, at least 1, and not absurd
    assert all(1.0 <= d.contention < 10.0 for d in cluster.devices)
    assert len({d.contention for d in cluster.devices}) == 1   # identical devices, one figure (their median)
    # this machine, as --cluster asks before running anything for real; a catalogue cluster is not
    assert cluster.is_this_machine() and not load_cluster("paper-2xk40").is_this_machine()
    elsewhere = tmp_path / "elsewhere.toml"
    elsewhere.write_text(path.read_text().replace("describe-local on ", "describe-local on other-host-"))
    assert not load_cluster(str(elsewhere)).is_this_machine()


def test_describe_local_refuses_a_file_that_is_not_toml(tmp_path, capsys):
    code, _, err = run(capsys, "describe-local", "-o", str(tmp_path / "here.json"))
    assert code == 2 and err.count("\n") == 1 and "here.toml" in err
