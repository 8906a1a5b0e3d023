"""What a run writes beside run.json: steps.csv (one row per case and step, autobench-like,
for spreadsheets), the case folders' layout (`case_folder`) and FILES.md, the index of
what each file is."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from model.files import atomic_writer, write_text_atomically
from model.results import Case, Run

STEPS_CSV_COLUMNS = (
    "framework",
    "scenario",
    "sink",
    "driver",
    "process_model",
    "affinity",
    "protocol",
    "status",
    "step",
    "offered",
    "unit",
    "achieved",
    "replies",
    "errors_total",
    "error_rate",
    "latency_avg_ms",
    "latency_p50_ms",
    "latency_p90_ms",
    "latency_p99_ms",
    "latency_p99.9_ms",
    "latency_p99.99_ms",
    "latency_max_ms",
    "latency_p99_uncorrected_ms",
    "server_cpu_pct",
    "agent_cpu_pct",
    "rss_max_bytes",
    "tick_avg_ms",
    "tick_max_ms",
    "probe_ms",
    "flags",
    "bottleneck",
)


def write_steps_csv(run: Run, path: Path) -> None:
    """One row per case and step (a case without steps: one row, its step cells empty);
    written atomically, as run.json is."""
    with atomic_writer(path, newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(STEPS_CSV_COLUMNS)
        for case in run.cases:
            head = [
                case.framework,
                case.scenario,
                case.sink,
                case.driver,
                case.process_model,
                case.affinity.get("mode"),
                case.protocol,
                case.status,
            ]
            if not case.steps:
                writer.writerow(head + [""] * (len(STEPS_CSV_COLUMNS) - len(head)))
            for index, step in enumerate(case.steps):
                latency = step.latency_ms
                uncorrected = step.latency_uncorrected_ms or {}
                writer.writerow(
                    [
                        *head,
                        index,
                        step.offered,
                        step.unit,
                        step.achieved,
                        step.replies,
                        step.errors["total"],
                        step.error_rate,
                        latency["avg"],
                        latency["p50"],
                        latency["p90"],
                        latency["p99"],
                        latency["p99.9"],
                        latency["p99.99"],
                        latency["max"],
                        uncorrected.get("p99"),
                        step.server_cpu_pct,
                        step.agent_cpu_pct,
                        step.rss_max_bytes,
                        step.tick_ms.get("avg"),
                        step.tick_ms.get("max"),
                        step.probe_ms,
                        " ".join(step.flags),
                        step.bottleneck,
                    ]
                )


# -- the run's folder: one folder per case, its ramp and rounds inside -----------------------
RAMP_FOLDER = "ramp"


def case_folder(
    run_dir: Path, key: str, *, repeat: int = 0, repeats: int = 1, round_label: str | None = None
) -> Path:
    """Where one pass of a case keeps its files: `<run>/<case key>/ramp/` (`ramp-r2/` …
    per repeat when the profile repeats), `<run>/<case key>/round-2-of-5/` per
    confirmation round (`round-1-of-5-trial-at-50/` per trial of a first round tried at
    tied loads)."""
    if round_label is not None:
        return run_dir / key / "-".join(re.findall(r"[A-Za-z0-9.]+", round_label))
    return run_dir / key / (RAMP_FOLDER + (f"-r{repeat + 1}" if repeats > 1 else ""))


def ramp_dir(run_dir: Path, case: Case) -> Path:
    """The case's (first) ramp folder: `<case key>/ramp/`, or in a run of the old layout
    (before harness 24: each ramp and round a sibling folder) `<case key>/` itself."""
    folder = run_dir / case.key
    for name in (RAMP_FOLDER, f"{RAMP_FOLDER}-r1"):
        if (folder / name).is_dir():
            return folder / name
    return folder


FILE_MEANINGS = (
    ("run.json", "the run: host, versions, configuration, every case with its steps, rounds "
     "and summary (docs/results.md)"),
    ("steps.csv", "one row per case and step, for spreadsheets"),
    ("report.html", "the report: verdict, summary, charts (one page; `harness report` redraws it)"),
    ("charts/*.png", "the report's figures, drawn from run.json"),
    ("FILES.md", "this index"),
)  # fmt: skip
PASS_MEANINGS = (
    ("monitor.csv", "the per-second monitor: CPU per core, the server's CPU and RSS, the "
     "load's CPU, the server's telemetry"),
    ("raw/", "the load generator's own output, as it wrote it (`stepNNN-K.txt` per step "
     "and driver process; a fleet's per host)"),
)  # fmt: skip


PROFILED_MEANING = (
    "With --cpu-profile a case has one more pass, `profiled-round/`: one round at the peak, "
    "kept out of the intervals, with a sampler attached to the server's process tree "
    "(py-spy for Python, perf otherwise). Besides the above it holds `profile.folded` "
    "(the sampled stacks as collapsed stacks, root first, `frame;frame;leaf COUNT`: "
    "flamegraph.pl, speedscope and inferno open it) and `sampler/` (the sampler's own "
    "output and log; perf's `perf.data`)."
)


def files_index(run: Run, passes: dict[str, list[str]]) -> str:
    """FILES.md: what each file and folder of the run is. `passes`: each case key → the
    folders of its passes found on disk (`ramp`, `round-1-of-5`, …)."""
    lines = [f"# Run {run.run_id}", "", "| path | what |", "| --- | --- |"]
    lines += [f"| `{path}` | {what} |" for path, what in FILE_MEANINGS]
    lines += [
        "",
        "## Cases",
        "",
        "Each case has one folder, named by its identity (framework, scenario, sink, driver, "
        "process model, affinity mode); inside, one folder per pass: `ramp/` (the ramp that "
        "found the peak; `ramp-r2/` … per repeat) and `round-R-of-N/` (each confirmation "
        "round at the peak; `round-1-of-N-trial-at-C/` each trial of a first round tried "
        "at tied concurrencies C). Each pass holds:",
        "",
    ]
    lines += [f"- `{path}`: {what}" for path, what in PASS_MEANINGS]
    if any(case.summary.cpu_profile for case in run.cases):
        lines += ["", PROFILED_MEANING]
    lines += ["", "| case folder | status | passes |", "| --- | --- | --- |"]
    for case in run.cases:
        found = passes.get(case.key, [])
        status = case.status_text + (f" ({case.error})" if case.error else "")
        folders = ", ".join(f"`{name}/`" for name in found) or "none (nothing ran)"
        lines.append(
            f"| `{case.key}/` | {' '.join(status.replace('|', '/').split())} | {folders} |"
        )
    return "\n".join(lines) + "\n"


def write_files_index(run: Run, run_dir: Path) -> None:
    """FILES.md of the run, from its cases and the pass folders on disk (atomically)."""
    passes = {
        case.key: sorted(p.name for p in (run_dir / case.key).iterdir() if p.is_dir())
        if (run_dir / case.key).is_dir()
        else []
        for case in run.cases
    }
    write_text_atomically(run_dir / "FILES.md", files_index(run, passes))
