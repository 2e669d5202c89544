"""Device strings: parsing, options, refusals, and the default set."""

from __future__ import annotations

import pytest
import torch

from placer.errors import PlacerError
from placer.measure.devices import Device, default_devices, parse_bytes, parse_device, parse_devices


def test_options_are_parsed():
    d = parse_device("cpu:1[threads=2,mem=1.5GiB]")
    assert (d.kind, d.index, d.threads, d.mem_cap) == ("cpu", 1, 2, int(1.5 * 2**30))
    assert d.name == "cpu:1" and d.torch_device == "cpu"
    assert parse_device("cpu").name == "cpu"


def test_sizes_accept_binary_and_decimal_units():
    assert parse_bytes("4GiB") == 4 * 2**30 and parse_bytes("512MB") == 512 * 10**6 and parse_bytes("10") == 10
    with pytest.raises(PlacerError, match="512MiB"):
        parse_bytes("lots")


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
