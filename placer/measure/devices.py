"""Moved to `placer.devices` (annotate, env and placers parse devices too); this name stays only
until the last importer moves."""

from placer.devices import (SYNTAX, Device, as_devices, check_available, cuda_count, default_devices,  # noqa: F401
                            device_kind, parse_bytes, parse_device, parse_devices)
