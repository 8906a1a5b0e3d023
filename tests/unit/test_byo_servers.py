"""Servers the user brings: commands with placeholders, servers files and profile tables,
plugins found through the entry point group. No server runs here (tests/e2e/test_byo_servers.py
runs them)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.frameworks import (
    command_framework,
    register_servers,
    select_frameworks,
    server_option_names,
)
from harness.profile import load_profile
from harness.server_process import (
    FLAG_PLACEHOLDERS,
    OPTION_PLACEHOLDERS,
    command_unsupported,
    fill_command,
    placeholder_values,
)
from model.errors import UserError
from servers import (
    FRAMEWORKS,
    Framework,
    command_placeholders,
    command_program,
    command_sinks,
    contract,
)
from servers import plugins as plugin_loader
from servers.contenders.environment import ENVIRONMENT
from tests.helpers import fresh_registry, write_plugin

UVICORN = "uvicorn app:app --host {host} --port {port}"


def plugin_source(name: str) -> str:
    """A plugin module whose `frameworks()` gives one command server called `name`."""
    return (
        "from servers import Framework\n\n"
        "def frameworks():\n"
        f"    return [Framework({name!r}, '', (), ('own',), kind='command', command={UVICORN!r})]\n"
    )


@pytest.fixture
def registry() -> Iterator[None]:
    """Whatever a test registers is gone after it."""
    with fresh_registry():
        yield


def test_placeholders_are_the_known_ones_and_an_unknown_one_is_named() -> None:
    assert command_placeholders(UVICORN) == {"host", "port"}
    assert command_placeholders("sh -c 'echo {{literal}}' {port}") == {"port"}
    with pytest.raises(ValueError, match=r"unknown placeholder \{prot\}"):
        command_placeholders("uvicorn app:app --port {prot}")
    with pytest.raises(ValueError, match="Single '}'"):
        command_placeholders("echo }")


def test_a_commands_sinks_follow_its_placeholders() -> None:
    assert command_sinks(UVICORN) == ("empty",)
    assert command_sinks(UVICORN + " --sink {sink}") == ("empty",)
    assert command_sinks(UVICORN + " {sink} {sink_path}") == ("empty", "file")
    assert command_sinks(UVICORN + " {sink} {sink_path} {mongo_url}") == ("empty", "file", "mongo")


def test_the_program_of_a_command_is_found_past_env() -> None:
    assert command_program(UVICORN) == "uvicorn"
    assert command_program("env A=1 B={sink} gunicorn x:y") == "gunicorn"
    assert command_program("{python} -m uvicorn x:y") == ""  # the harness's own Python
    # env's options: a directory to run in, a name to unset, a split string, `--`
    assert command_program("env -C /srv/old PYTHONPATH=/srv/old {python} -m servers") == ""
    assert command_program("env --chdir=/srv -u LANG A=1 hypercorn x:y") == "hypercorn"
    assert command_program("env -S 'A=1 granian --interface asgi' x:y") == "granian"
    assert command_program("env -i -- /usr/bin/node app.js") == "/usr/bin/node"


def test_a_registry_entry_is_checked_when_made() -> None:
    with pytest.raises(ValueError, match="a command is given exactly when kind is command"):
        Framework("x", "", (), ("own",), kind="command")
    with pytest.raises(ValueError, match="only a command's routes may be found by probing"):
        Framework("x", "m", (), ("asyncio",), routes=None)
    with pytest.raises(ValueError, match="kind 'java'"):
        Framework("x", "m", (), ("asyncio",), kind="java")
    with pytest.raises(ValueError, match=r"need \{sink\}"):
        Framework("x", "", (), ("own",), ("empty", "file"), kind="command", command=UVICORN)
    with pytest.raises(ValueError, match="framework name"):
        Framework("no spaces", "m", (), ("asyncio",))


def test_placeholders_are_filled_word_by_word(tmp_path: Path) -> None:
    sink_path = tmp_path / "with space" / "records.jsonl"
    values = placeholder_values(
        host="127.0.0.1",
        port=8123,
        sink="file",
        workers=2,
        extra_args=["--sink-path", str(sink_path), "--durable", "--mc-socket-port", "0"],
    )
    argv = fill_command(
        "serve --bind {host}:{port} -w {workers} --out {sink_path} {durable}", values
    )
    assert argv == ["serve", "--bind", "127.0.0.1:8123", "-w", "2", "--out", str(sink_path), "1"]
    assert values["python"] == sys.executable
    with pytest.raises(ValueError, match="--nope"):
        placeholder_values(host="h", port=1, sink="empty", workers=1, extra_args=["--nope", "1"])


def test_every_sink_option_has_a_placeholder_and_a_contender_variable() -> None:
    """Found by a mongo-sink compare: `--mongo-batch` had no placeholder, so every command
    server failed to start with the mongo sink."""
    values = placeholder_values(
        host="h", port=1, sink="mongo", workers=1,
        extra_args=["--mongo-url", "mongodb://h:1", "--mongo-w", "0", "--mongo-batch", "7"],
    )  # fmt: skip
    assert (values["mongo_url"], values["mongo_w"], values["mongo_batch"]) == (
        "mongodb://h:1",
        "0",
        "7",
    )
    sink_placeholders = {*OPTION_PLACEHOLDERS.values(), *FLAG_PLACEHOLDERS.values()}
    sink_placeholders -= {None, "files_dir", "memcached"}  # backends: not the contenders'
    # the protocol and its certificate reach a contender as its server's own flags
    sink_placeholders -= {"protocol", "tls_cert", "tls_key"}
    # the URL reaches every server in MONGO_URL_ENV, set by the harness, not by a command
    sink_placeholders -= {"mongo_url"}
    assert sink_placeholders <= set(ENVIRONMENT.values())
    assert "mongo_url" not in ENVIRONMENT.values()  # never on a contender's command line


def test_a_case_a_command_cannot_run_is_named() -> None:
    framework = command_framework("x", UVICORN, "--server")
    assert command_unsupported(framework, sink="empty", workers=1) is None
    assert "no file sink" in str(command_unsupported(framework, sink="file", workers=1))
    assert "{workers}" in str(command_unsupported(framework, sink="empty", workers=2))


def test_server_options_register_commands_with_probed_routes(registry: None) -> None:
    added = register_servers([f"mine={UVICORN}"])
    assert added == ["mine"]
    mine = FRAMEWORKS["mine"]
    assert (mine.kind, mine.origin, mine.routes, mine.sinks) == (
        "command",
        "--server",
        None,
        ("empty",),
    )
    assert not mine.telemetry and mine.serves(contract.ROUTE_COUNTER)  # until probed
    assert register_servers([f"mine={UVICORN}"]) == []  # the same again: nothing new
    assert "mine" in select_frameworks("all") and select_frameworks("mine") == ["mine"]
    with pytest.raises(UserError, match=r"framework mine .* is --server.s already"):
        register_servers([f"mine={UVICORN} --workers 2"])
    with pytest.raises(UserError, match="is builtin's already"):
        register_servers([f"aiohttp={UVICORN}"])
    with pytest.raises(UserError, match="is not NAME=COMMAND"):
        register_servers(["uvicorn app:app"])
    with pytest.raises(UserError, match="or give one with --server NAME=COMMAND"):
        select_frameworks("nobody")


def test_a_server_given_with_server_is_compared_whatever_frameworks_says(registry: None) -> None:
    """ "Also compare": `--server` names join any selection, after its own names; one that
    cannot run is refused with what it misses, not left out."""
    register_servers([f"mine={UVICORN}", "gone=no-such-program-here --port {port}"])
    assert select_frameworks("nginx", ["mine"]) == ["nginx", "mine"]
    assert select_frameworks("mine,nginx", ["mine"]) == ["mine", "nginx"]
    assert select_frameworks("all", ["mine"])[-1] == "mine"
    with pytest.raises(UserError, match=r"not installed: gone \(missing no-such-program-here\)"):
        select_frameworks("all", ["gone"])
    assert server_option_names([f"mine={UVICORN}", "b=x {port}"]) == ["mine", "b"]


def test_a_servers_file_gives_commands_and_tables(registry: None, tmp_path: Path) -> None:
    servers_file = tmp_path / "servers.toml"
    servers_file.write_text(
        "[servers]\n"
        f'plain = "{UVICORN}"\n'
        "[servers.full]\n"
        f'command = "{UVICORN} --sink {{sink}} --path {{sink_path}}"\n'
        'minimal = "uvicorn hello:app --port {port}"\n'
        'routes = ["/", "/log"]\n'
        'role = "baseline"\n'
        'deviations = { oversized-headers = "its parser takes them" }\n'
    )
    assert register_servers(servers_file=servers_file) == ["plain", "full"]
    full = FRAMEWORKS["full"]
    assert full.origin == str(servers_file) and full.role == "baseline"
    assert full.routes == ("/", "/log") and full.sinks == ("empty", "file")
    assert full.has_minimal and not FRAMEWORKS["plain"].has_minimal
    assert full.deviations == {"oversized-headers": "its parser takes them"}
    bad = tmp_path / "bad.toml"
    bad.write_text('[servers.x]\ncommand = "run {port}"\nworkers = 2\n')
    with pytest.raises(UserError, match="unknown keys workers"):
        register_servers(servers_file=bad)
    (tmp_path / "empty.toml").write_text("")
    with pytest.raises(UserError, match="no \\[servers\\] table"):
        register_servers(servers_file=tmp_path / "empty.toml")


def test_a_profile_file_carries_its_servers(tmp_path: Path) -> None:
    profile = tmp_path / "mine.toml"
    smoke = (Path(__file__).parents[2] / "harness" / "profiles" / "smoke.toml").read_text()
    profile.write_text(f'{smoke.split("[ramp]")[0]}\n[servers]\nmine = "{UVICORN}"\n[ramp]'
                       + smoke.split("[ramp]")[1])  # fmt: skip
    loaded = load_profile(str(profile))
    assert loaded.name == "mine" and loaded.servers == {"mine": UVICORN}
    assert loaded.to_dict()["servers"] == {"mine": UVICORN}


def test_a_plugin_registers_its_entries_with_where_they_came_from(
    registry: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_plugin(tmp_path, "byo_unit_plugin", plugin_source("unit-plugin"))
    write_plugin(tmp_path, "byo_broken_plugin", "def frameworks():\n    return 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    added = plugin_loader.load_plugins()
    assert "unit-plugin" in added
    entry = FRAMEWORKS["unit-plugin"]
    assert entry.origin == "plugin byo-unit-plugin 1.0" and entry.kind == "command"
    assert any("byo_broken_plugin" in p and "not Framework entries" in p
               for p in plugin_loader.PLUGIN_PROBLEMS)  # fmt: skip
    assert plugin_loader.load_plugins() == []  # once per process
    assert "unit-plugin" in plugin_loader.plugin_names()


# plugins whose import raises, exits or never returns
BROKEN_PLUGINS = {
    "byo_raising_plugin": (
        "raise RuntimeError('no config file')\n",
        "RuntimeError: no config file",
    ),
    "byo_exiting_plugin": ("import sys\nsys.exit(3)\n", "SystemExit: 3"),
    "byo_dying_plugin": ("import os\nos._exit(7)\n", "ended the process on import (exit status 7)"),
    "byo_hanging_plugin": (
        "import time\ntime.sleep(3600)\n",
        "hung on import: no answer within 1 s",
    ),
}


def test_a_plugin_that_raises_exits_or_hangs_on_import_is_named_and_the_rest_load(
    registry: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module, (source, _) in BROKEN_PLUGINS.items():
        write_plugin(tmp_path, module, source + plugin_source(module.replace("_", "-")))
    write_plugin(tmp_path, "byo_fine_plugin", plugin_source("fine-plugin"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(plugin_loader.TIMEOUT_ENV, "1")
    added = plugin_loader.load_plugins()  # this process is still here: nothing exited
    assert "fine-plugin" in added, plugin_loader.PLUGIN_PROBLEMS
    assert not {module.replace("_", "-") for module in BROKEN_PLUGINS} & set(added)
    for module, (_, problem) in BROKEN_PLUGINS.items():
        assert f"{module} (plugin {module.replace('_', '-')} 1.0): {problem}" in (
            plugin_loader.PLUGIN_PROBLEMS
        ), plugin_loader.PLUGIN_PROBLEMS
        assert module not in sys.modules  # never imported here
    assert plugin_loader.load_plugins() == []  # once per process: no second probe


def test_a_plugin_may_not_take_a_builtin_name(
    registry: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_plugin(tmp_path, "byo_greedy_plugin", plugin_source("aiohttp"))
    monkeypatch.syspath_prepend(str(tmp_path))
    plugin_loader.load_plugins()
    assert FRAMEWORKS["aiohttp"].origin == "builtin"
    assert any("aiohttp" in p and "builtin's already" in p for p in plugin_loader.PLUGIN_PROBLEMS)


def test_the_contenders_are_plugin_entries_of_kind_command() -> None:
    from servers.contenders import frameworks

    entries = {f.name: f for f in frameworks()}
    assert set(entries) == {"uvicorn-starlette", "granian", "gunicorn-gevent", "hypercorn"}
    for entry in entries.values():
        assert entry.kind == "command" and entry.has_minimal and entry.origin == "builtin"
        assert entry.sinks == ("empty", "file", "mongo")
        assert "mongo_url" not in command_placeholders(entry.command)  # off `ps`: MONGO_URL_ENV
        assert {"host", "port", "sink", "sink_path", "mongo_db", "workers"} <= (
            command_placeholders(entry.command)
        )
        assert dataclasses.replace(entry, origin="plugin x 1").origin == "plugin x 1"
    assert not entries["granian"].serves(contract.ROUTE_COUNTER)
    assert entries["gunicorn-gevent"].serves(contract.ROUTE_WEBSOCKET)


def test_a_plan_registers_the_servers_of_its_options_and_of_its_profile(
    registry: None, tmp_path: Path
) -> None:
    from harness.compare import build_plan
    from harness.run_options import RunOptions

    profile = tmp_path / "mine.toml"
    smoke = (Path(__file__).parents[2] / "harness" / "profiles" / "smoke.toml").read_text()
    head, ramp = smoke.split("[ramp]")
    profile.write_text(f'{head}\n[servers]\nfromprofile = "{UVICORN}"\n[ramp]{ramp}')
    plan = build_plan(
        RunOptions(
            frameworks="fromprofile,fromoption",
            profile=str(profile),
            results_dir=tmp_path / "results",
            servers=[f"fromoption={UVICORN}"],
        )
    )
    assert plan.frameworks == ("fromprofile", "fromoption")
    assert FRAMEWORKS["fromprofile"].origin == "profile mine"
    assert FRAMEWORKS["fromoption"].origin == "--server"
