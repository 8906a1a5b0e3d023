"""Which figures a run draws, by the kind of ramp its cases ran: the one place that says so.

A figure against the offered load means something only for a ramp of one load: a
concurrency ramp draws its lines against connections in flight, an open-loop ramp against
the offered rate, a connection ramp against open connections. The h2-attacks profile's
rounds are no ramp (a closed-loop peak round, then paced rounds at a fraction of it), so
it draws none of those lines: its closed-loop peak round per server, and per attack the
goodput and the p99 its well-behaved clients kept. charts.figures holds the builder of
each name; a builder may return no figure (nothing it draws was measured) or, for
`connections`, several.

Standard library and model only: the CLI and the renderer read it without matplotlib.
"""

from __future__ import annotations

from collections.abc import Sequence

from model.results import Case

# each line against the ramp's load (charts.load_figures)
LOAD_LINES = ("throughput", "errors", "latency", "cpu", "memory")
# open loop: latency against the offered rate, and the spectrum at a rate every server held
OPEN_LOOP = ("latency_rate", "spectrum")
# bars per server, read at each case's peak (charts.peak_figures)
PER_SERVER = ("peak", "efficiency", "affinity", "protocols")

FIGURES_BY_RAMP_KIND: dict[str, tuple[str, ...]] = {
    "concurrency": (*LOAD_LINES, *PER_SERVER),
    "rate": (*LOAD_LINES, *OPEN_LOOP, *PER_SERVER),
    "constant-rate": (*LOAD_LINES, *OPEN_LOOP, *PER_SERVER),
    # conn_cpu, conn_rss, conn_rss_per_connection, conn_tick_max (charts.connection_figures)
    "connections": ("connections", *PER_SERVER),
    # the rounds' load is no ramp: their peak is the closed-loop round's, not the summary's
    # best step (which, with the rate fixed, would be a paced round)
    "h2-attacks": ("attacks", "attack_p99", "attack_peak"),
}

# the kind a ramp's steps say they are when no step is an attack round
KIND_OF_UNIT = {"concurrency": "concurrency", "req/s": "rate", "conns": "connections"}


def ramp_kind(cases: Sequence[Case]) -> str:
    """The kind of ramp `cases` ran (a key of FIGURES_BY_RAMP_KIND), read from their steps:
    h2-attacks when any step is an attack round (`figures.attack` set), otherwise by the
    first case's steps' unit. Not the profile's recorded ramp: a profile's connection ramp
    runs its WebSocket cases in open connections under a concurrency ramp, and a run made
    by hand records none."""
    steps = [step for case in cases for step in case.steps]
    if any(step.figures.attack is not None for step in steps):
        return "h2-attacks"
    return KIND_OF_UNIT[steps[0].unit] if steps else "concurrency"
