"""servers.contenders.launch: which flags make Granian, gunicorn and hypercorn speak each protocol
(a pure function; the servers themselves are tests/e2e/test_tls_contenders.py's)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from servers.contenders.launch import protocol_flags


def test_launcher_flags_per_protocol() -> None:
    assert protocol_flags("granian", "h1") == ["--http", "1"]
    assert protocol_flags("granian", "h2c") == ["--http", "2"]
    assert protocol_flags("granian", "h2", "c.pem", "k.pem") == [
        "--http",
        "2",
        "--ssl-certificate",
        "c.pem",
        "--ssl-keyfile",
        "k.pem",
        "--ssl-protocol-min",
        "tls1.3",
    ]
    assert protocol_flags("gunicorn", "h1") == []
    assert protocol_flags("gunicorn", "h2c") == [
        "--http-protocols",
        "h2",
        "--http2-cleartext",
        "prior-knowledge",
    ]
    assert protocol_flags("gunicorn", "h1-tls", "c.pem", "k.pem") == [
        "--certfile",
        "c.pem",
        "--keyfile",
        "k.pem",
    ]
    assert protocol_flags("hypercorn", "h2c") == []
    assert protocol_flags("hypercorn", "h1-tls", "c.pem", "k.pem")[-2:] == [
        "-c",
        "python:servers.contenders.tls.H1TLS",
    ]


@pytest.mark.parametrize(
    ("server", "protocol", "cert", "message"),
    [
        ("granian", "h1-tls", "", "needs --tls-cert and --tls-key"),
        ("granian", "h3", "", "is not one of"),
        ("nope", "h1", "", "server 'nope' is not one of granian, gunicorn, hypercorn"),
    ],
)
def test_launcher_refuses_in_one_line(server: str, protocol: str, cert: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        protocol_flags(server, protocol, cert, cert)


def test_launcher_command_line_refuses_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "servers.contenders.launch", "granian", "--protocol", "h2", "--"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert (
        done.stderr.strip().splitlines()[-1].endswith("protocol h2 needs --tls-cert and --tls-key")
    )
