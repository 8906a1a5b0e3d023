"""The pure parts of verify over each protocol: how a check reaches a server (Endpoint),
HTTP/2 frames written and read, the oversized frame, and `--protocol`'s parsing."""

from __future__ import annotations

import pytest

from harness.cli.verify import parse_protocols
from harness.run.case import case_checks
from harness.verify import Endpoint, checks_for, endpoint_for, endpoint_of
from harness.verify.h2 import oversized_frame, server_max_frame_bytes
from harness.verify.h2_attacks import ATTACKS
from harness.verify.h2wire import FRAME_GOAWAY, FRAME_PING, FRAME_SETTINGS, h2_frame, parse_frames
from model.errors import UserError
from model.scenarios import get_scenario
from servers import contract


def test_a_url_is_http_1_in_cleartext_or_over_tls() -> None:
    assert endpoint_of("http://127.0.0.1:8080").protocol == contract.PROTOCOL_H1
    assert endpoint_of("https://127.0.0.1:8443").protocol == contract.PROTOCOL_H1_TLS
    endpoint = endpoint_of("http://[::1]:9000")
    assert (endpoint.host, endpoint.port, endpoint.tls, endpoint.h2) == ("::1", 9000, False, False)


def test_an_endpoint_refuses_a_scheme_its_protocol_does_not_use() -> None:
    with pytest.raises(ValueError, match=r"protocol h2 is reached at https://"):
        Endpoint("http://127.0.0.1:1", contract.PROTOCOL_H2)
    with pytest.raises(ValueError, match=r"protocol h2c is reached at http://"):
        Endpoint("https://127.0.0.1:1", contract.PROTOCOL_H2C)
    with pytest.raises(ValueError, match="protocol 'h3' is not one of"):
        Endpoint("http://127.0.0.1:1", "h3")


def test_endpoint_for_gives_a_tls_protocol_https() -> None:
    assert endpoint_for("http://127.0.0.1:5", "h2").base_url == "https://127.0.0.1:5"
    assert endpoint_for("https://127.0.0.1:5", "h1-tls").base_url == "https://127.0.0.1:5"
    assert endpoint_for("http://127.0.0.1:5", "h2c").base_url == "http://127.0.0.1:5"


def test_frames_written_are_read_back_whole_and_the_rest_kept() -> None:
    data = h2_frame(FRAME_PING, b"12345678", flags=1) + h2_frame(
        FRAME_GOAWAY, (0).to_bytes(4) + (1).to_bytes(4), stream_id=0
    )
    frames, rest = parse_frames(data + b"\x00\x00\x05")
    assert [f.frame_type for f in frames] == [FRAME_PING, FRAME_GOAWAY]
    assert frames[0].payload == b"12345678" and frames[0].flags == 1
    assert frames[1].goaway_error == 1 and frames[0].goaway_error is None
    assert rest == b"\x00\x00\x05"
    lying = h2_frame(FRAME_PING, b"", declared_length=2**24 - 1)
    assert lying[:3] == b"\xff\xff\xff" and parse_frames(lying) == ([], lying)


def test_the_oversized_frame_is_one_byte_past_the_server_limit() -> None:
    settings = h2_frame(FRAME_SETTINGS, (0x5).to_bytes(2) + (32768).to_bytes(4))
    frames, _ = parse_frames(settings)
    assert server_max_frame_bytes(frames) == 32768
    assert server_max_frame_bytes([]) == 2**14  # unset: RFC 9113's default
    frame = oversized_frame(32768)
    assert frame is not None and int.from_bytes(frame[:3]) == 32769 == len(frame) - 9
    assert oversized_frame(2**24 - 1) is None  # nothing is too long for it


def test_the_checks_of_each_protocol() -> None:
    h1 = checks_for("gevent")
    assert "malformed" in h1 and not any(n.startswith(("tls-", "h2-")) for n in h1)
    tls = checks_for("gevent", protocol=contract.PROTOCOL_H1_TLS)
    assert set(h1) < set(tls) and "tls-half-handshake" in tls and "h2-settings" not in tls
    h2 = checks_for("gevent", protocol=contract.PROTOCOL_H2)
    assert "tls-handshake" in h2 and "h2-malformed-frames" in h2
    assert "malformed" not in h2 and "ws-handshake" not in h2
    h2c = checks_for("gevent", protocol=contract.PROTOCOL_H2C)
    assert set(h2c) == set(h2) - {n for n in h2 if n.startswith("tls-")}


def test_the_h2_attacks_are_verify_s_and_left_out_of_a_run_s_verify_pass() -> None:
    h2c = checks_for("twisted", protocol=contract.PROTOCOL_H2C)
    assert set(ATTACKS) <= set(h2c) and not set(ATTACKS) & set(checks_for("twisted"))
    case = case_checks("twisted", None, contract.PROTOCOL_H2C, get_scenario("text"))
    assert "h2-malformed-frames" in case and not set(ATTACKS) & set(case)


def test_protocols_are_parsed_and_an_unknown_one_named() -> None:
    assert parse_protocols("h1, h2c") == ["h1", "h2c"]
    with pytest.raises(UserError, match="unknown protocol h3: choose from h1, h1-tls, h2, h2c"):
        parse_protocols("h1,h3")
