"""Measured figures as data (harness/data/measured.toml, harness.measured): the shipped
file reads, every entry says where it came from, and a bad file is refused by name."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from harness.connection_plan import AGENT_KB_PER_CONNECTION, SERVER_MEMORY
from harness.measured import (
    MEASURED_PATH,
    load_measured,
    measured,
    measured_value,
    measurements_under,
)

HOST = """
version = 1
[hosts.box]
what = "a test box"
cpus = 2
memory_gib = 4.0
open_files = 1024
"""
ENTRY = """
[[measured]]
name = "agent_kb_per_connection"
value = 3.1
unit = "KiB/connection"
host = "box"
date = 2026-12-06
runs = ["20261206-034115.200-ws-ramp"]
command = "harness compare ..."
figure = "the agents' RSS over the connections"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "measured.toml"
    path.write_text(text)
    return path


def test_every_shipped_figure_says_where_it_came_from() -> None:
    table = load_measured(MEASURED_PATH)
    assert table, "no figures shipped"
    for entry in table.values():
        assert entry.unit and entry.command and entry.figure
        assert entry.host.cpus >= 1
        assert datetime.date(2026, 1, 1) <= entry.date <= datetime.date.today()


def test_the_plan_reads_its_figures_from_the_file() -> None:
    servers = measurements_under("server_memory.", "KiB/connection")
    assert list(SERVER_MEMORY) == list(servers)  # the file's order is the plan's
    node = SERVER_MEMORY["node-http"]
    assert node.kb_per_connection == servers["node-http"].value
    assert node.measured_connections == servers["node-http"].at["connections"]
    assert measured()["agent_kb_per_connection"].value == AGENT_KB_PER_CONNECTION


def test_a_figure_is_asked_for_in_its_unit() -> None:
    assert measured_value("closing_s_per_connection", "s/connection") > 0
    with pytest.raises(ValueError, match="measured in KiB/connection, not MB"):
        measured_value("agent_kb_per_connection", "MB")
    with pytest.raises(ValueError, match="no measured figure 'nope'"):
        measured_value("nope", "s")


def test_a_file_of_another_version_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, HOST.replace("version = 1", "version = 2") + ENTRY)
    with pytest.raises(ValueError, match="version 2 is not 1"):
        load_measured(path)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (('host = "box"', 'host = "elsewhere"'), "host 'elsewhere' is not described"),
        (("date = 2026-12-06", 'date = "yesterday"'), "is not a date"),
        (('unit = "KiB/connection"\n', ""), r"missing \['unit'\]"),
        (("value = 3.1", "value = 3.1\nsource = 1"), r"unknown \['source'\]"),
        (('runs = ["20261206-034115.200-ws-ramp"]', 'runs = ["last night"]'), "not run ids"),
        (("value = 3.1", 'value = "3.1"'), "value must be a number"),
    ],
)
def test_a_bad_entry_is_refused_by_name(tmp_path: Path, change: tuple[str, str], said: str) -> None:
    path = write(tmp_path, HOST + ENTRY.replace(*change))
    with pytest.raises(ValueError, match=said):
        load_measured(path)


def test_a_figure_measured_twice_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="measured twice"):
        load_measured(write(tmp_path, HOST + ENTRY + ENTRY))
