"""Protocols as an axis, without a network: which protocols a command speaks, the
options a start is given, and which process models can carry which protocol."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.frameworks import command_framework, command_protocols
from harness.server_process import placeholder_values, protocol_args, protocol_unsupported
from harness.tls import Certificates
from harness.topology import parse_process_model, topology_unsupported
from model.errors import UserError
from servers import FRAMEWORKS

PLAIN = "app --host {host} --port {port}"
TLS = PLAIN + " --cert {tls_cert} --key {tls_key}"
ANY = TLS + " --speak {protocol}"
CERTS = Certificates(Path("/c/server.pem"), Path("/c/server.key"), Path("/c/ca.pem"), "ECDSA P-256")


def test_a_command_speaks_h1_and_h1_tls_by_its_placeholders() -> None:
    assert command_protocols("app", PLAIN)[0] == ("h1",)
    protocols, notes = command_protocols("app", TLS)
    assert protocols == ("h1", "h1-tls")
    assert set(notes) == {"h2", "h2c"}
    assert "protocols" in notes["h2"] and "{protocol}" in notes["h2"]


def test_a_servers_file_may_declare_more_protocols_with_their_placeholders() -> None:
    assert command_protocols("app", ANY, ["h2", "h2c"])[0] == ("h1", "h2", "h2c")
    with pytest.raises(ValueError, match=r"h2 needs \{protocol\}"):
        command_protocols("app", TLS, ["h2"])
    with pytest.raises(ValueError, match=r"h1-tls needs \{tls_cert\}, \{tls_key\}"):
        command_protocols("app", PLAIN, ["h1-tls"])
    with pytest.raises(ValueError, match="h3"):
        command_protocols("app", ANY, ["h3"])


def test_a_server_table_protocols_key_reaches_the_framework() -> None:
    framework = command_framework("app", {"command": ANY, "protocols": ["h2c"]}, "test")
    assert framework.protocols == ("h1", "h2c")
    assert protocol_unsupported(framework, "h2c") is None
    assert "h1-tls" in (protocol_unsupported(framework, "h1-tls") or "")
    with pytest.raises(UserError, match="protocols must be a list"):
        command_framework("app", {"command": ANY, "protocols": "h2c"}, "test")


def test_a_framework_is_refused_a_protocol_it_does_not_list_with_its_reason() -> None:
    nginx = FRAMEWORKS["nginx"]
    missing = next((p for p in ("h2c", "h2", "h1-tls") if p not in nginx.protocols), None)
    if missing is None:
        pytest.skip("nginx speaks every protocol here")
    assert protocol_unsupported(nginx, missing) == nginx.why_not(missing)
    assert "h9" in (protocol_unsupported(nginx, "h9") or "")


def test_protocol_args_are_the_contract_options_and_fill_a_commands_placeholders() -> None:
    assert protocol_args("h1", None) == []
    assert protocol_args("h2c", None) == ["--protocol", "h2c"]
    args = protocol_args("h1-tls", CERTS)
    assert args == [
        "--protocol",
        "h1-tls",
        "--tls-cert",
        "/c/server.pem",
        "--tls-key",
        "/c/server.key",
    ]
    values = placeholder_values(host="127.0.0.1", port=1, sink="empty", workers=1, extra_args=args)
    assert (values["protocol"], values["tls_cert"], values["tls_key"]) == (
        "h1-tls",
        "/c/server.pem",
        "/c/server.key",
    )
    with pytest.raises(UserError, match="certificates"):
        protocol_args("h2", None)


def test_a_balanced_process_model_carries_cleartext_h1_only() -> None:
    assert topology_unsupported(parse_process_model("workers:2"), "h1-tls") is None
    assert topology_unsupported(parse_process_model("lb:2"), "h1") is None
    assert "balancer" in (topology_unsupported(parse_process_model("lb:2"), "h2") or "")
