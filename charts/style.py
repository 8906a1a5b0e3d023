"""One look across every figure and every run: a fixed colour per framework, a colour and a
marker of its own for every other server in a run, hollow flags."""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass

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
# For the other servers of a run (given as commands, variants): colours apart from the
# fixed ones and from each other (tab20's light halves and darker tones), in the order
# they are handed out.
SPARE_COLOURS = (
    "#17becf",
    "#393b79",
    "#637939",
    "#8c6d31",
    "#843c39",
    "#7b4173",
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
    "#ff9896",
    "#c5b0d5",
    "#c49c94",
    "#f7b6d2",
    "#dbdb8d",
    "#9edae5",
    "#000000",
    "#6b6ecf",
    "#b5cf6b",
    "#e7ba52",
    "#d6616b",
)
# Markers in the order servers get them: a server's marker tells it apart where two
# colours are hard to tell apart (and, past every colour, where colours repeat).
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")
HOLLOW_FLAGS = frozenset({"driver_bound", "noisy", "cpu_contended"})
_RUN_LINESTYLES = ("-", "-.", ":", (0, (5, 1)))
DPI = 150


@dataclass(frozen=True)
class Look:
    """How one server is drawn in a run's figures."""

    colour: str
    marker: str


def colour_for(framework: str) -> str:
    """The framework's fixed colour; another name always gets the same spare colour (a
    chart of one server at a time: trend). A run's figures use `palette`, which keeps
    servers apart."""
    if framework in FRAMEWORK_COLOURS:
        return FRAMEWORK_COLOURS[framework]
    return SPARE_COLOURS[zlib.crc32(framework.encode()) % len(SPARE_COLOURS)]


def palette(frameworks: Iterable[str]) -> dict[str, Look]:
    """A look per server of a run, no two alike: each framework keeps its fixed colour,
    the other servers take the spare colours in order (sorted by name, so a run draws the
    same way each time), then the fixed colours of frameworks not in the run; every
    server gets the next marker in MARKERS. Past every colour, a server takes the first
    (colour, marker) pair no other server has."""
    names = sorted(set(frameworks))
    fixed = {FRAMEWORK_COLOURS[n] for n in names if n in FRAMEWORK_COLOURS}
    spare = iter(c for c in (*SPARE_COLOURS, *FRAMEWORK_COLOURS.values()) if c not in fixed)
    looks: dict[str, Look] = {}
    for index, name in enumerate(names):
        colour = FRAMEWORK_COLOURS.get(name) or next(spare, None)
        if colour is not None:
            looks[name] = Look(colour, MARKERS[index % len(MARKERS)])
            continue
        used = set(looks.values())
        looks[name] = next(
            Look(c, m)
            for m in MARKERS
            for c in (*FRAMEWORK_COLOURS.values(), *SPARE_COLOURS)
            if Look(c, m) not in used
        )
    return looks


def linestyle_for(run_index: int):
    """Overlaid runs differ by line style (the first run solid)."""
    return _RUN_LINESTYLES[run_index % len(_RUN_LINESTYLES)]
