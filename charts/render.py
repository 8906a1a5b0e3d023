"""Render a results directory (or several, overlaid) into PNG figures and `report.html`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from charts.figure_kinds import ramp_kind
from charts.flame import flame_svg
from charts.report import FIGURE_CAPTIONS, write_report
from charts.style import DPI, palette
from model.errors import UserError
from model.results import Run, has_protocol_axis, read_run
from model.stacks import parse_folded

# matplotlib (charts.figures) loads where a figure is drawn: a missing run is said at once
if TYPE_CHECKING:
    from charts.figures import Series

# Host facts that must agree before two runs are drawn on one axis.
CHECKED_HOST_FACTS = ("cpu_model", "cores", "memory_bytes", "kernel")


def load_runs(run_dirs: Sequence[Path]) -> list[Run]:
    """Read every run; a missing or unreadable one is a one-line UserError."""
    runs = []
    for run_dir in run_dirs:
        path = run_dir / "run.json" if run_dir.is_dir() else run_dir
        if not path.is_file():
            raise UserError(f"{run_dir} holds no run.json: give a results/<run-id> directory")
        try:
            runs.append(read_run(path))
        except ValueError as error:
            raise UserError(f"{path}: {error}") from None
    return runs


def check_hosts_agree(runs: Sequence[Run]) -> None:
    """Refuse to overlay runs from different machines, naming the fact that differs."""
    first = runs[0]
    for other in runs[1:]:
        for fact in CHECKED_HOST_FACTS:
            if first.host.get(fact) != other.host.get(fact):
                raise UserError(
                    f"runs {first.run_id} and {other.run_id} were measured on different hosts "
                    f"({fact}: {first.host.get(fact)!r} vs {other.host.get(fact)!r}); "
                    "their numbers cannot share an axis"
                )


def check_units_agree(runs: Sequence[Run]) -> None:
    """Overlaid runs must ramp the same kind of load (rate, concurrency or connections) in
    the same kind of ramp (an h2-attacks run's peak round is closed loop too)."""
    units = {run.run_id: step.unit for run in runs for case in run.cases for step in case.steps[:1]}
    kinds = {run.run_id: ramp_kind(run.cases) for run in runs if units.get(run.run_id)}
    if len(set(units.values())) > 1 or len(set(kinds.values())) > 1:
        described = ", ".join(f"{run_id}: {units[run_id]} ({kinds[run_id]})" for run_id in units)
        raise UserError(f"runs ramp different loads ({described}); overlay like with like")


def build_series(runs: Sequence[Run]) -> list[Series]:
    """One series per case; labels grow only as much as needed to tell them apart."""
    from charts.figures import Series

    cases = [(index, run, case) for index, run in enumerate(runs) for case in run.cases]
    modes = {case.affinity.get("mode") for _, _, case in cases}
    models = {case.process_model for _, _, case in cases}
    protocols = has_protocol_axis([case for _, _, case in cases])
    series = []
    for index, run, case in cases:
        label = case.framework
        if len(models) > 1:
            label += f" {case.process_model}"
        if protocols:
            label += f" {case.protocol}"
        if len(modes) > 1:
            label += f" [{case.affinity.get('mode')}]"
        if len(runs) > 1:
            label += f" ({run.run_id})"
        series.append(Series(label, case.framework, index, case))
    looks = palette(one.framework for one in series)  # no two servers drawn alike
    return [dataclasses.replace(one, look=looks[one.framework]) for one in series]


def context_of(runs: Sequence[Run]) -> str:
    cases = [case for run in runs for case in run.cases]
    if not cases:
        return ""
    scenarios = sorted({c.scenario for c in cases})
    drivers = sorted({c.driver for c in cases})
    sinks = sorted({c.sink for c in cases})
    return f"{'/'.join(scenarios)} scenario, {'/'.join(drivers)}, {'/'.join(sinks)} sink"


def flame_graphs(runs: Sequence[Run], run_dirs: Sequence[Path]) -> dict[tuple[str, str], str]:
    """Each profiled case's flame graph (charts.flame), keyed by (run id, case key), from
    the profile.folded its run folder keeps (a case whose file is gone has none)."""
    flames = {}
    for run, run_dir in zip(runs, run_dirs, strict=False):
        for case in run.cases:
            name = (case.summary.cpu_profile or {}).get("file")
            path = run_dir / name if name else None
            if path is not None and path.is_file():
                folded = parse_folded(path.read_text(errors="replace"))
                flames[run.run_id, case.key] = flame_svg(folded, case.framework, case.framework)
    return flames


def remove_undrawn(charts_dir: Path, drawn: Mapping[str, Path]) -> None:
    """Remove each figure this harness can draw (FIGURE_CAPTIONS) that it did not draw
    now: a redrawn run keeps no chart of an earlier drawing that its report and the
    Markdown's links (charts/*.png) would still offer. Other files are left alone."""
    for name in FIGURE_CAPTIONS.keys() - drawn.keys():
        (charts_dir / f"{name}.png").unlink(missing_ok=True)


def render(
    run_dirs: Sequence[Path],
    out_dir: Path | None = None,
    links: Sequence[tuple[str, str]] = (),
) -> Path:
    """Draw every figure and write report.html; returns the report's path.

    One run: into its own directory (or `out_dir`). Several: overlaid, into `out_dir`
    (default: the first run's `overlay/` directory). `links` (label, relative URL): a
    line of links above the report's title.
    """
    runs = load_runs(run_dirs)
    check_hosts_agree(runs)
    check_units_agree(runs)
    from charts.figures import close_all, ramp_figures

    if out_dir is None:
        out_dir = run_dirs[0] if len(runs) == 1 else run_dirs[0] / "overlay"
    charts_dir = out_dir / "charts"
    charts_dir.mkdir(parents=True, exist_ok=True)
    figures = ramp_figures(build_series(runs), context_of(runs))
    images: dict[str, Path] = {}
    try:
        for name, figure in figures.items():
            path = charts_dir / f"{name}.png"
            figure.savefig(path, dpi=DPI)
            images[name] = path
    finally:
        close_all(figures)
    remove_undrawn(charts_dir, images)
    flames = flame_graphs(runs, run_dirs)
    return write_report(runs, images, out_dir / "report.html", links, flames)
