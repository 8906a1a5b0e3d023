"""Verify's severities (harness.verify.severity): a deviation is one whole line with its
remedy, a warning unless declared; --strict-verify turns warnings into failures; the
runner's record of them in run.json reads back as the case's deviations. The checks
against real servers are in tests/e2e/test_byo_servers.py and test_conformance.py."""

from __future__ import annotations

import dataclasses

import pytest

from harness.outputs.console import deviation_lines
from harness.verify import Check, Deviation, Verification, strictly
from harness.verify.malformed import MALFORMED_REQUESTS, MALFORMED_SENT
from harness.verify.wire import reply_text
from model.results import read_run, write_run
from tests.helpers import synthetic_case, synthetic_run

OVERSIZED = Deviation(
    "malformed",
    "oversized-headers",
    "GET / with a 200,000-byte X-Big header",
    "400, 413 or 431 and nothing more on the connection",
    "200 OK (one response)",
)


def test_a_warning_is_one_line_with_the_check_what_was_sent_expected_came_and_the_remedy() -> None:
    line = OVERSIZED.line("mine")
    assert "\n" not in line
    assert line.startswith("malformed oversized-headers: sent GET / with a 200,000-byte")
    assert "; expected 400, 413 or 431" in line and "; came 200 OK" in line
    assert line.endswith(
        'declare it: deviations = { oversized-headers = "why" } in [servers.mine] of a '
        "servers file (--servers FILE)"
    )
    declared = dataclasses.replace(OVERSIZED, declared="no header limit")
    assert not declared.warning and declared.line().endswith("; declared: no header limit")


def test_a_deviation_refuses_a_line_break() -> None:
    with pytest.raises(ValueError, match="came must be one line"):
        dataclasses.replace(OVERSIZED, came="200 OK\r\nServer: x")


def test_strict_turns_warnings_into_failures_and_leaves_declared_ones() -> None:
    declared = dataclasses.replace(OVERSIZED, key="bad-header", declared="known")
    checks = (
        Check("text", True, "200"),
        Check("malformed", True, "11 of 12 refused", deviations=(OVERSIZED,)),
        Check("ws-raw-frames", True, "known deviation", deviations=(declared,)),
    )
    verification = Verification("mine", "empty", checks)
    assert verification.ok and verification.warnings == (OVERSIZED,)
    strict = Verification("mine", "empty", strictly(checks, "mine"))
    assert not strict.ok and strict.warnings == ()
    text, malformed, raw = strict.checks
    assert text.ok and raw.ok  # nothing to warn of, and a declared deviation
    assert not malformed.ok and malformed.detail == OVERSIZED.line("mine", with_check=False)


def test_every_malformed_request_is_described_in_words() -> None:
    assert set(MALFORMED_SENT) == {name for name, _, _ in MALFORMED_REQUESTS}


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (b"", "no reply (the connection closed or stayed silent)"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", "200 OK (one response)"),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nHTTP/1.1 404 Not Found\r\n\r\n",
            "2 responses on one connection (200 OK, 404 Not Found)",
        ),
        (b"SSH-2.0-OpenSSH\r\n", "no HTTP response (it began 'SSH-2.0-OpenSSH')"),
    ],
)
def test_what_came_is_said_whole_in_words(reply: bytes, said: str) -> None:
    assert reply_text(reply) == said


def test_deviations_recorded_by_verify_read_back_from_run_json(tmp_path) -> None:  # type: ignore[no-untyped-def]
    check = Check("malformed", True, "11 of 12 refused", deviations=(OVERSIZED,))
    case = dataclasses.replace(
        synthetic_case("mine", [1000.0, 1010.0]), verify={"malformed": check.record()}
    )
    plain = synthetic_case("aiohttp", [1000.0, 1010.0])
    run = synthetic_run("r", [case, plain])
    write_run(run, tmp_path)
    read = read_run(tmp_path)
    mine, aiohttp = read.cases
    assert mine.warnings == 1 and mine.deviations == [OVERSIZED.to_dict()]
    assert aiohttp.deviations == [] and aiohttp.warnings == 0
    assert deviation_lines(read) == [f"mine: {OVERSIZED.line('mine')}"]


def test_a_profile_may_ask_for_strict_verify() -> None:
    from harness.profile import load_profile, parse_settings
    from model.errors import UserError

    assert not load_profile("smoke").strict_verify
    assert load_profile("smoke", parse_settings(["strict_verify=true"])).strict_verify
    with pytest.raises(
        UserError, match="--set strict_verify=yes: strict_verify takes true or false"
    ):
        load_profile("smoke", parse_settings(["strict_verify=yes"]))
