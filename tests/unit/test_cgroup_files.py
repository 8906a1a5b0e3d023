"""cgroup files read as figures (harness.cgroups.files), on text captured from this
machine's v1/v2 hybrid and from a v2 host, and what the runner makes of a reading
(CPU µs per request, throttling, an OOM kill, the intervals over rounds)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from harness.cgroups.files import (
    CgroupReading,
    format_size,
    parse_mountinfo,
    parse_proc_cgroup,
    parse_size,
    reading_v1,
    reading_v2,
    relative_path,
    v2_cpu_max,
)
from harness.cgroups.groups import FORCE_ENV, detect_support
from harness.connections import cgroup_kb_per_connection, held_cgroup_bytes
from harness.monitor import cgroup_step
from harness.run.analysis import (
    cpu_us_per_req,
    oom_reason,
    server_saturated,
    throttled,
    with_rounds,
)
from model.results import LATENCY_KEYS, Step, Summary
from model.step_figures import figures_from_dict
from tests.helpers import one_step_case

DATA = Path(__file__).resolve().parent.parent / "data" / "cgroups"


def text(name: str) -> str:
    return (DATA / name).read_text()


def test_a_v1_reading_adds_the_tcp_buffers_and_reads_throttling_and_oom_kills() -> None:
    reading = reading_v1(
        cpuacct_usage=text("v1_cpuacct.usage"),
        cpu_stat=text("v1_cpu.stat.throttled"),
        memory_usage="36982784\n",
        memory_max_usage="37314560\n",
        oom_control=text("v1_memory.oom_control.killed"),
        tcp_usage="4096\n",
        tcp_max_usage="65536\n",
    )
    assert reading.cpu_s == pytest.approx(int(text("v1_cpuacct.usage")) / 1e9)
    assert (reading.periods, reading.throttled_periods) == (21, 20)
    assert reading.throttled_s == pytest.approx(0.998706)
    assert reading.memory_bytes == 36982784 + 4096
    assert reading.memory_peak_bytes == 37314560 + 65536
    assert reading.oom_kills == 1


def test_an_unthrottled_v1_group_without_tcp_files_reads_zeros() -> None:
    reading = reading_v1(
        cpuacct_usage="0\n",
        cpu_stat=text("v1_cpu.stat.idle"),
        memory_usage="0\n",
        memory_max_usage="0\n",
        oom_control="oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
    )
    assert reading == CgroupReading(0.0, 0, 0, 0.0, 0, 0, 0)


def test_a_v2_reading_is_in_microseconds_and_memory_peak_may_be_absent() -> None:
    reading = reading_v2(
        cpu_stat=text("v2_cpu.stat"),
        memory_current="1048576\n",
        memory_peak="",  # before kernel 5.19
        memory_events=text("v2_memory.events"),
    )
    assert reading.cpu_s == pytest.approx(2.090758)
    assert (reading.periods, reading.throttled_periods) == (21, 20)
    assert reading.throttled_s == pytest.approx(1.001889)
    assert reading.memory_bytes == 1048576 and reading.memory_peak_bytes is None
    assert reading.oom_kills == 1


def test_this_machines_hierarchies_and_own_groups_are_found() -> None:
    mounts = parse_mountinfo(text("mountinfo_hybrid.txt"))
    v1 = {c: m.mountpoint for m in mounts if m.version == 1 for c in m.controllers}
    assert v1 == {
        "cpu": "/sys/fs/cgroup/cpu",
        "cpuacct": "/sys/fs/cgroup/cpuacct",
        "cpuset": "/sys/fs/cgroup/cpuset",
        "memory": "/sys/fs/cgroup/memory",
    }
    assert [m.mountpoint for m in mounts if m.version == 2] == ["/sys/fs/cgroup/unified"]
    own = parse_proc_cgroup(text("proc_cgroup_hybrid.txt"))
    assert own["cpu"] == "/" and own["memory"].startswith("/process_api/") and own[""] == "/"
    assert parse_proc_cgroup("4:cpu,cpuacct:/a\n") == {"cpu": "/a", "cpuacct": "/a"}


def test_a_read_only_v2_mount_and_no_v1_is_none_with_the_reasons() -> None:
    support = detect_support(text("mountinfo_v2_readonly.txt"), text("proc_cgroup_v2.txt"))
    assert support.mode == "none"
    assert "read-only" in (support.reason or "")
    assert "not mounted" in (support.reason or "")


def test_cgroups_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FORCE_ENV, "none")
    support = detect_support()
    assert support.mode == "none" and support.reason == f"{FORCE_ENV}=none"


def test_a_group_path_is_relative_to_its_mount_root() -> None:
    assert relative_path("/a/b", "/") == "/a/b"
    assert relative_path("/a/b", "/a") == "/b"
    assert relative_path("/a", "/a") == "/"


def test_sizes_and_quotas() -> None:
    assert parse_size("512M") == 512 * 2**20
    assert parse_size("1G") == parse_size("1GiB") == 2**30
    assert parse_size("65536") == 65536
    assert format_size(512 * 2**20) == "512M"
    assert v2_cpu_max(0.5) == "50000 100000"
    with pytest.raises(ValueError, match="512X"):
        parse_size("512X")


def test_a_step_between_two_readings_and_its_throttling() -> None:
    before = CgroupReading(1.0, 0, 0, 0.0, 10, 10, 0)
    after = CgroupReading(2.0, 20, 21, 1.0, 20, 30, 0)
    counted = cgroup_step(before, after)
    assert counted["cpu_s"] == pytest.approx(1.0) and counted["memory_bytes"] == 20
    assert throttled(counted) == {"periods": 20, "of_periods": 21, "time_s": 1.0}
    assert throttled(cgroup_step(before, before)) is None
    assert cpu_us_per_req(1.0, 1000) == 1000.0
    assert cpu_us_per_req(1.0, 0) is None and cpu_us_per_req(None, 5) is None


def step(achieved: float, cpu_us: float | None = None, **extra: object) -> Step:
    return Step(
        offered=10,
        unit="concurrency",
        achieved=achieved,
        replies=int(achieved * 2),
        errors={"total": 0},
        error_rate=0.0,
        latency_ms=dict.fromkeys(LATENCY_KEYS, 1.0),
        server_cpu_pct=50.0,
        cpu_us_per_req=cpu_us,
        figures=figures_from_dict(dict(extra)),
    )


def test_a_server_held_back_by_its_quota_is_saturated_at_half_a_core() -> None:
    counted = {"cpu_s": 0.5, "oom_kills": 0, "memory_bytes": None}
    held = step(500, cgroup={**counted, "throttled_periods": 20, "periods": 21, "throttled_s": 1.0})
    assert server_saturated(held, server_cores=1, server_cpu_count=1)
    assert not server_saturated(step(500), server_cores=1, server_cpu_count=1)


def test_an_oom_kill_is_a_reason_naming_the_limit() -> None:
    assert oom_reason(0, 2**26) is None
    reason = oom_reason(1, 64 * 2**20)
    assert reason is not None and reason.startswith("out of memory")
    assert "--memory-max 64 MiB" in reason


def test_cpu_per_request_over_rounds_has_its_interval() -> None:
    case = one_step_case(
        "spin", step(1000, 950.0), Summary(peak=1000, peak_offered=10, cpu_us_per_req=950.0)
    )
    rounds = [
        (i, dataclasses.replace(case, steps=(step(1000 + i, us),)))
        for i, us in enumerate([940.0, 960.0, 955.0])
    ]
    summary = with_rounds(case, rounds).summary
    assert summary.cpu_us_per_req == pytest.approx(951.7, abs=0.1)
    assert summary.cpu_us_per_req_ci is not None
    low, high = summary.cpu_us_per_req_ci
    assert low < 951.7 < high


def held(open_now: int, memory_bytes: int | None) -> Step:
    extra: dict[str, object] = {"open": open_now}
    if memory_bytes is not None:
        extra["cgroup_memory_bytes"] = memory_bytes
    return dataclasses.replace(step(open_now), unit="conns", figures=figures_from_dict(extra))


def test_kb_per_connection_is_the_cgroup_memorys_slope() -> None:
    steps = [held(100, 10_000_000 + 100 * 20_480), held(200, 10_000_000 + 200 * 20_480)]
    assert cgroup_kb_per_connection(steps, 10_000_000) == pytest.approx(20.0)
    assert cgroup_kb_per_connection([held(100, None)], 10_000_000) is None


def test_a_holds_memory_is_read_while_every_agent_still_held() -> None:
    # the monitor's rows: the hold from t=10; the agents last seen holding at 13.2, then
    # closing (the row at 14 reads the connections going): the reading is the 13.0 row's
    rows = [
        {"t": 9.0, "server_cgroup_memory_bytes": 50},
        {"t": 11.0, "server_cgroup_memory_bytes": 300},
        {"t": 12.0},  # a row without a cgroup reading
        {"t": 13.0, "server_cgroup_memory_bytes": 310},
        {"t": 14.0, "server_cgroup_memory_bytes": 120},
    ]
    assert held_cgroup_bytes(rows, 10.0, 13.2) == 310
    assert held_cgroup_bytes(rows, 13.5, 13.9) is None
