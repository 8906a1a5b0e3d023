"""One look across every figure and every run: a fixed colour per framework, hollow flags."""

from __future__ import annotations

import zlib

# Fixed colours: a framework is the same colour in every chart of every run.
FRAMEWORK_COLOURS = {
    "gevent": "#1f77b4",
    "eventlet": "#ff7f0e",
    "tornado": "#2ca02c",
    "twisted": "#d62728",
    "aiohttp": "#9467bd",
    "nginx": "#7f7f7f",
    "node-http": "#8c564b",
    "node-express": "#e377c2",
    "eventmachine": "#bcbd22",
}
_SPARE_COLOURS = ("#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173")
HOLLOW_FLAGS = frozenset({"driver_bound", "noisy", "cpu_contended"})
_RUN_LINESTYLES = ("-", "-.", ":", (0, (5, 1)))
DPI = 150


def colour_for(framework: str) -> str:
    """The framework's colour; an unknown name always gets the same spare colour."""
    if framework in FRAMEWORK_COLOURS:
        return FRAMEWORK_COLOURS[framework]
    return _SPARE_COLOURS[zlib.crc32(framework.encode()) % len(_SPARE_COLOURS)]


def linestyle_for(run_index: int):
    """Overlaid runs differ by line style (the first run solid)."""
    return _RUN_LINESTYLES[run_index % len(_RUN_LINESTYLES)]
