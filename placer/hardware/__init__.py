"""Hardware as plain data: the cluster a placement is made for, which need not be this machine.

A cluster is a TOML file or a catalogue entry (`placer cluster list`); every figure names its
source, a datasheet or a measurement. The cost model reads it through `Cluster`: the devices with
their model's figures (`DeviceModel`), and the links a copy crosses (`Cluster.route`).

The TOML format (the shipped files are in `placer/hardware/catalogue/`, described in its README.md)::

    name = "paper-4xk40"
    description = "One CPU and 4 Tesla K40 over PCIe 3.0"
    source = "Mirhoseini et al., ICML 2017, section 4"
    hosts = ["pcie-slot:0", "pcie-slot:1"]   # optional: nodes copies pass through that hold no ops
                                             # (PCIe slots and switches, NVSwitch, a machine's host)
    [[device]]
    name = "cpu:0"                 # what placements call it: cpu:K or cuda:N, no options
    model = "xeon-e5-2699-v3"      # a catalogue model (placer/hardware/catalogue/models.toml) or [models.<key>]
    machine = "m0"                 # optional, default "m0"

    [[link]]
    name = "pcie-gpu0"
    members = ["cuda:0", "pcie-slot:0"]   # devices or hosts; more than 2 members = a shared bus
    bandwidth = "15.75 GB/s"       # per direction: B/s, KB/s, MB/s, GB/s, TB/s (decimal), KiB/s..GiB/s,
                                   # Gbit/s; or a number in B/s (key bandwidth_Bps also accepted)
    latency = "10 us"              # ns, us, ms, s; or a number in s (latency_s)
    source = "PCI-SIG PCIe 3.0 base spec: 8 GT/s x16, 128b/130b = 15.75 GB/s per direction"

    [models.my-gpu]                # a file's own model: every DeviceModel field
    name = "My GPU"
    kind = "cuda"                  # or "cpu"
    peak_flops = { float32 = "10 TFLOPS", float64 = "0.3 TFLOPS" }   # float32/float16/float64/bfloat16
    tensor_flops = { float16 = "80 TFLOPS" }   # optional; float32 here means TF32
    memory_bandwidth = "500 GB/s"  # or memory_bandwidth_Bps = 5e11
    memory = "12 GiB"              # or memory_bytes = 12884901888
    launch_overhead = "5 us"       # or launch_overhead_s = 5e-6
    source = "My GPU datasheet, 2024"

A copy from one device to another follows `Cluster.route`: the path through hosts and CPU devices
(never through a GPU, which does not forward another's copy) that minimises the sum of latencies
plus 1 MiB over its slowest bandwidth, fewest links on a tie. `placer cluster describe-local` writes
this machine as such a file, from measurements.
"""

from placer.hardware.cluster import (Cluster, ClusterDevice, DeviceModel, Link, catalogue_models, catalogue_names,
                                     load_cluster, route_figures, route_time)

__all__ = ["Cluster", "ClusterDevice", "DeviceModel", "Link", "catalogue_models", "catalogue_names", "load_cluster",
           "route_figures", "route_time"]
