"""A cluster written as the TOML text `load_cluster` reads (format: catalogue/README.md):
`placer cluster describe-local` writes this machine with it."""

from __future__ import annotations

import json
import math


def cluster_toml(name: str, description: str, source: str, devices: list[tuple[str, str, float]], models: dict,
                 links: list[dict], hosts: list[str], *, header: str, contention_source: str) -> str:
    """The TOML text of a cluster: `devices` as (name, model key, contention; 1, the loader's
    default, is left out), `models` (key -> `DeviceModel` fields), `links` (`Link` fields). `header`
    is the first comment line; `contention_source`, what a contention figure is, is written once
    above the devices when one has a figure."""
    lines = [f"# {header}",
             "# Format: placer/hardware/catalogue/README.md. Figures are in base units (FLOP/s, B/s, bytes, s).",
             "", f"name = {toml_value(name)}", f"description = {toml_value(description)}",
             f"source = {toml_value(source)}"]
    if hosts:
        lines.append(f"hosts = {toml_value(hosts)}")
    if any(contention > 1.0 for _, _, contention in devices):
        lines += ["", f"# contention: {contention_source}"]
    for device, model, contention in devices:
        lines += ["", "[[device]]", f"name = {toml_value(device)}", f"model = {toml_value(model)}",
                  'machine = "m0"'] + ([f"contention = {contention:.3f}"] if contention > 1.0 else [])
    for link in links:
        lines += ["", "[[link]]"] + [f"{k} = {toml_value(v)}" for k, v in link.items()]
    for key, model in models.items():
        lines += ["", f"[models.{key}]"] + [f"{k} = {toml_value(v)}" for k, v in model.items()]
    return "\n".join(lines) + "\n"


def toml_value(value) -> str:
    """`value` (a string, bool, int, float, dict or list of them) as TOML; a float to 4 significant
    digits, more than a measurement holds."""
    if isinstance(value, str):
        return json.dumps(value)   # a JSON string is a valid TOML basic string
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot write {value} to TOML")
        return repr(float(f"{value:.4g}"))
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }" if value else "{}"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(type(value))
