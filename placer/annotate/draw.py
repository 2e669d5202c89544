"""A picture of a placement: the graph laid out in layers by topological depth, nodes coloured
by device, edges that cross devices drawn dark. Uses matplotlib without pyplot (no global state)."""

from __future__ import annotations

from pathlib import Path

from placer.errors import PlacerError
from placer.graph.opgraph import OpGraph
from placer.graph.structure import node_reads
from placer.placement import Placement

_LABEL_LIMIT = 80     # above this many nodes, op-type labels would only be ink
_MAX_INCHES = 60.0


def layered_layout(graph: OpGraph) -> dict[str, tuple[float, float]]:
    """Node -> (x, y): x is the node's depth (longest path from a graph input), y its place in
    that layer, layers centred on y = 0."""
    producer = {t: name for name, op in graph.nodes.items() for t in op.outputs if t}
    depth: dict[str, int] = {}
    for name, op in graph.nodes.items():  # topological order: producers first
        preds = [depth[producer[t]] for t in node_reads(op.proto) if t in producer]
        depth[name] = 1 + max(preds, default=-1)
    layers: dict[int, list[str]] = {}
    for name, d in depth.items():
        layers.setdefault(d, []).append(name)
    pos = {}
    for d, names in layers.items():
        for i, name in enumerate(names):
            pos[name] = (float(d), i - (len(names) - 1) / 2)
    return pos


def draw_placement(graph: OpGraph, placement: Placement, path: str | Path, title: str | None = None) -> Path:
    """Draw `placement` over `graph` into an image file (format from the suffix, e.g. .png, .svg)."""
    return draw_groups(graph, placement.nodes, list(placement.devices), path, title=title)


def draw_groups(graph: OpGraph, group_of: dict[str, str], groups: list[str], path: str | Path, *,
                marked: set[tuple[str, str]] | None = None, marked_label: str = "crosses devices",
                title: str | None = None) -> Path:
    """Draw `graph` with each node coloured by its group (a device; for a plan, also a split op's
    device set), `groups` in legend order; the `marked` edges (default: those between groups)
    drawn dark, named `marked_label` in the legend."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.collections import LineCollection
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
    except ImportError:
        raise PlacerError("drawing a placement needs matplotlib; pip install matplotlib") from None

    pos = layered_layout(graph)
    producer = {t: name for name, op in graph.nodes.items() for t in op.outputs if t}
    same, cross = [], []
    for name, op in graph.nodes.items():
        for src in dict.fromkeys(producer[t] for t in node_reads(op.proto) if t in producer):
            segment = (pos[src], pos[name])
            crossing = (src, name) in marked if marked is not None else group_of[src] != group_of[name]
            (cross if crossing else same).append(segment)

    depth = max((x for x, _ in pos.values()), default=0) + 1
    height = max((abs(y) for _, y in pos.values()), default=0) * 2 + 1
    fig = Figure(figsize=(min(_MAX_INCHES, max(6.0, depth * 0.25)), min(_MAX_INCHES, max(4.0, height * 0.45 + 1))))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.add_collection(LineCollection(same, colors="#c8c8c8", linewidths=0.6, zorder=1))
    ax.add_collection(LineCollection(cross, colors="#202020", linewidths=1.2, zorder=2))
    palette = _palette(len(groups))
    counts = {g: sum(1 for n in graph.nodes if group_of[n] == g) for g in groups}
    for i, group in enumerate(groups):
        names = [n for n in graph.nodes if group_of[n] == group]
        if names:
            ax.scatter([pos[n][0] for n in names], [pos[n][1] for n in names], s=36, color=palette[i],
                       edgecolors="black", linewidths=0.4, zorder=3)
    if len(graph.nodes) <= _LABEL_LIMIT:
        for name, op in graph.nodes.items():
            ax.annotate(op.op_type, pos[name], xytext=(0, 6), textcoords="offset points",
                        ha="center", fontsize=6, zorder=4)
    handles = [Line2D([], [], marker="o", linestyle="", color=palette[i], markeredgecolor="black",
                      label=f"{g} ({counts[g]} nodes)") for i, g in enumerate(groups)]
    handles.append(Line2D([], [], color="#202020", label=f"{marked_label} ({len(cross)} edges)"))
    # below the axes, so it never hides nodes
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=min(4, len(handles)),
              fontsize=8, frameon=False)
    ax.set_xlabel("topological depth")
    ax.set_yticks([])
    ax.autoscale_view()
    ax.margins(0.05, 0.15)
    ax.set_title(title or f"{graph.source or 'graph'}: {len(graph.nodes)} nodes on {len(groups)} devices",
                 fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")   # a wide legend (many devices, a plan's device sets) stays whole
    return path


def _palette(n: int) -> list:
    """`n` distinct colours: matplotlib's tab10, then tab20, for more devices."""
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]
