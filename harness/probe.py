"""The outside user's view during a step (the affinity study's "page wait").

A low-rate client, independent of the load generator, times single `GET /` requests on
a fresh connection each (as a newcomer's browser would) while the server is loaded.
It is a thread of the harness, on the load's CPUs with it, and kept light: the standard
library's http.client (httpx built an SSL context per client, ~40 ms of CPU a step, for
plain-HTTP requests on loopback).

Over h1-tls each probe is a new TLS connection trusting the run's CA (a newcomer pays the
handshake too); h2 and h2c cases are not probed (http.client speaks HTTP/1.1 only), so
their steps' `probe_ms` is null.
"""

from __future__ import annotations

import http.client
import statistics
import threading
import time
from urllib.parse import urlsplit

from harness.tls import Certificates, client_context
from servers import contract
from servers.contract import PROTOCOL_H1, PROTOCOL_H1_TLS

PROBE_INTERVAL_S = 0.5
PROBE_TIMEOUT_S = 5.0


class Probe:
    """Times one request every `interval_s` between `start()` and `stop()`."""

    def __init__(
        self,
        base_url: str,
        interval_s: float = PROBE_INTERVAL_S,
        protocol: str = PROTOCOL_H1,
        certificates: Certificates | None = None,
    ) -> None:
        address = urlsplit(base_url)
        self._host = address.hostname or "127.0.0.1"
        self._port = address.port or 80
        self._interval_s = interval_s
        self._tls = (
            client_context(certificates, protocol)
            if protocol == PROTOCOL_H1_TLS and certificates is not None
            else None
        )
        # http.client speaks HTTP/1.1: an h2 or h2c case is not probed
        self._probes = protocol == PROTOCOL_H1 or self._tls is not None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.latencies_ms: list[float] = []
        self.failures = 0

    def start(self) -> None:
        self._stop.clear()
        self.latencies_ms = []
        self.failures = 0
        if not self._probes:
            return
        self._thread = threading.Thread(target=self._run, name="probe", daemon=True)
        self._thread.start()

    def stop(self) -> float | None:
        """Stop probing; the median latency of the probes (None when none succeeded)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(PROBE_TIMEOUT_S + 1)
        return round(statistics.median(self.latencies_ms), 3) if self.latencies_ms else None

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._probe_once()

    def _probe_once(self) -> None:
        """One `GET /` on a new connection: connect, request, whole reply, timed."""
        started = time.perf_counter()
        connection: http.client.HTTPConnection = (
            http.client.HTTPSConnection(
                self._host, self._port, timeout=PROBE_TIMEOUT_S, context=self._tls
            )
            if self._tls is not None
            else http.client.HTTPConnection(self._host, self._port, timeout=PROBE_TIMEOUT_S)
        )
        try:
            connection.request("GET", contract.ROUTE_TEXT)
            response = connection.getresponse()
            response.read()
            ok = response.status == 200
        except (OSError, http.client.HTTPException):
            ok = False
        finally:
            connection.close()
        if ok:
            self.latencies_ms.append((time.perf_counter() - started) * 1000.0)
        else:
            self.failures += 1
