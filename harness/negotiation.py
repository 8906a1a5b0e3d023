"""HTTP/2 on trial: what a server that did not declare its protocols negotiates.

A server given as a command (`--server`, or a servers file without `protocols`) is not
asked which protocols it speaks: HTTP/2 is what a server negotiates, not what it is told
(hypercorn, for one, offers ALPN h2 whenever it serves TLS). Asked for h2 or h2c
(`Framework.probed_protocols`, harness.frameworks), the case starts it as for any other
protocol and the case's probe connection (harness.run.case.probe_protocol) decides: ALPN
h2 selected, or SETTINGS after the cleartext preface, and it is measured; anything else
and the case is `skipped: not supported:` with what a second look found, in one line
(`not_negotiated`): "mine: ALPN chose http/1.1, not h2". A protocol the server declared
is a promise instead, and the same probe failing fails its case.
"""

from __future__ import annotations

import socket
import ssl

from harness.tls import (
    H2_EMPTY_SETTINGS,
    H2_FRAME_SETTINGS,
    H2_PREFACE,
    Certificates,
    client_context,
    h2c_answers,
    probe_tls,
)
from servers import Framework
from servers.contract import PROTOCOL_H2, PROTOCOL_H2C

LOOK_TIMEOUT_S = 2.0
# the second look's ALPN offer: h2 first, so a server that speaks it chooses it, and
# http/1.1, so one that does not names what it speaks instead of selecting nothing
OFFERED_ALPN = ("h2", "http/1.1")
ANSWER_BYTES = 256  # enough for an HTTP/1.1 status line or a frame header


def on_trial(framework: Framework, protocol: str) -> bool:
    """Whether `framework` is started on `protocol` without having declared it: a probe
    that finds it does not speak it skips the case rather than failing it."""
    return protocol in framework.probed_protocols


def trial_finding(
    name: str, protocol: str, host: str, port: int, certificates: Certificates | None
) -> str | None:
    """None when the server `name` on `host:port` speaks `protocol` (h2: ALPN h2
    selected when offered alone, as a load generator offers it; h2c: SETTINGS after the
    cleartext preface); else why not (`not_negotiated`). For `harness verify`, which has
    no probe of its own before its checks."""
    if protocol == PROTOCOL_H2C:
        spoken = h2c_answers(host, port)
    elif certificates is None:
        spoken = False
    else:
        try:
            spoken = probe_tls(host, port, protocol, certificates)["alpn"] == PROTOCOL_H2
        except (OSError, ValueError):
            spoken = False
    return None if spoken else not_negotiated(name, protocol, host, port, certificates)


def not_negotiated(
    name: str,
    protocol: str,
    host: str,
    port: int,
    certificates: Certificates | None,
    timeout_s: float = LOOK_TIMEOUT_S,
) -> str:
    """Why the server `name` on `host:port` does not speak `protocol` (h2 or h2c), as
    one more connection finds it, in one line for a skipped case."""
    if protocol == PROTOCOL_H2:
        if certificates is None:
            return f"{name}: h2 without the run's certificates"
        return f"{name}: {alpn_finding(host, port, certificates, timeout_s)}"
    if protocol == PROTOCOL_H2C:
        return f"{name}: {preface_finding(host, port, timeout_s)}"
    raise ValueError(f"{protocol} is not negotiated (of {PROTOCOL_H2}, {PROTOCOL_H2C})")


def alpn_finding(host: str, port: int, certificates: Certificates, timeout_s: float) -> str:
    """What a TLS handshake offering ALPN h2 and http/1.1 selects, in words."""
    context = client_context(certificates, PROTOCOL_H2)
    context.set_alpn_protocols(list(OFFERED_ALPN))
    try:
        with (
            socket.create_connection((host, port), timeout=timeout_s) as raw,
            context.wrap_socket(raw, server_hostname=host) as tls,
        ):
            selected = tls.selected_alpn_protocol()
    except (OSError, ssl.SSLError) as error:  # ssl.SSLError is an OSError; said for clarity
        return f"TLS handshake failed: {error}"
    return alpn_words(selected)


def alpn_words(selected: str | None) -> str:
    """The finding for the ALPN protocol a server selected (None: it selected none)."""
    if selected == PROTOCOL_H2:  # the case's own probe missed it, this look did not
        return "ALPN chose h2 only when offered http/1.1 too"
    if selected is None:
        return "ALPN chose none (HTTP/1.1 by default), not h2"
    return f"ALPN chose {selected}, not h2"


def preface_finding(host: str, port: int, timeout_s: float) -> str:
    """What the server answers to the HTTP/2 preface sent in the clear, in words."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(H2_PREFACE + H2_EMPTY_SETTINGS)
            answer = sock.recv(ANSWER_BYTES)
    except TimeoutError:
        return f"no answer to the h2 preface in {timeout_s:g} s, not h2c"
    except OSError as error:
        return f"the h2 preface met {error.strerror or error}, not h2c"
    return preface_words(answer)


def preface_words(answer: bytes) -> str:
    """The finding for the first bytes a server answered the cleartext preface with."""
    if not answer:
        return "closed the connection on the h2 preface, not h2c"
    if answer.startswith(b"HTTP/"):
        status = answer.split(b"\r\n", 1)[0].decode("latin-1")
        return f"answered the h2 preface with {status!r}, not h2c"
    if len(answer) >= 4 and answer[3] == H2_FRAME_SETTINGS:
        return "answered SETTINGS only on a second connection"
    return f"answered the h2 preface with {answer[:16]!r}, not SETTINGS"
