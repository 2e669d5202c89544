"""Device strings: parsing, options, refusals, the default set, and devices given as objects or strings."""

from __future__ import annotations

import pytest
import torch

from placer.devices import Device, as_devices, default_devices, device_kind, parse_bytes, parse_device, parse_devices
from placer.errors import PlacerError


def test_options_are_parsed():
    d = parse_device("cpu:1[threads=2,mem=1.5GiB]")
    assert (d.kind, d.index, d.threads, d.mem_cap) == ("cpu", 1, 2, int(1.5 * 2**30))
    assert d.name == "cpu:1" and d.torch_device == "cpu"
    assert parse_device("cpu").name == "cpu"


def test_sizes_accept_binary_and_decimal_units():
    assert parse_bytes("4GiB") == 4 * 2**30 and parse_bytes("512MB") == 512 * 10**6 and parse_bytes("10") == 10
    with pytest.raises(PlacerError, match="512MiB"):
        parse_bytes("lots")


def test_devices_given_as_strings_or_objects_come_out_as_objects():
    given = parse_device("cpu:1[threads=1]")
    devices = as_devices(["cpu:0[mem=1KiB]", given, "cuda"])
    assert devices[1] is given
    assert [(d.name, d.mem_cap) for d in devices] == [("cpu:0", 1024), ("cpu:1", None), ("cuda:0", None)]


def test_the_kind_of_a_device_name_ignores_index_and_options():
    assert [device_kind(n) for n in ("cuda:1", "cpu:0", "cpu", "cpu[threads=2]")] == ["cuda", "cpu", "cpu", "cpu"]


@pytest.mark.parametrize("spec", ["tpu:0", "cpu:0[threads=0]", "cpu:0[speed=2]", "cpu:x"])
def test_bad_device_strings_are_user_errors(spec):
    with pytest.raises(PlacerError):
        parse_device(spec)


def test_device_lists_refuse_duplicates_and_mixing_cpu_with_virtual_cpus():
    assert [d.name for d in parse_devices("cpu:0[threads=1],cpu:1[threads=1]")] == ["cpu:0", "cpu:1"]
    with pytest.raises(PlacerError, match="twice"):
        parse_devices("cpu:0,cpu:0")
    with pytest.raises(PlacerError, match="do not mix"):
        parse_devices("cpu,cpu:0")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU")
def test_missing_gpu_is_refused_and_default_set_is_two_virtual_cpus():
    with pytest.raises(PlacerError, match="not on this machine"):
        parse_devices("cuda:0")
    assert [d.name for d in default_devices()] == ["cpu:0", "cpu:1"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_default_set_with_gpus_is_every_gpu_plus_the_cpu():
    names = [d.name for d in default_devices()]
    assert names[-1] == "cpu" and names[0] == "cuda:0"
    assert isinstance(default_devices()[0], Device)
