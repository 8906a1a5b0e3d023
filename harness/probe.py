"""The outside user's view during a step (the affinity study's "page wait").

A low-rate client, independent of the load generator, times single `GET /` requests on
a fresh connection each (as a newcomer's browser would) while the server is loaded.
"""

from __future__ import annotations

import statistics
import threading
import time

import httpx

from servers import contract

PROBE_INTERVAL_S = 0.5
PROBE_TIMEOUT_S = 5.0


class Probe:
    """Times one request every `interval_s` between `start()` and `stop()`."""

    def __init__(self, base_url: str, interval_s: float = PROBE_INTERVAL_S) -> None:
        self._url = base_url + contract.ROUTE_TEXT
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.latencies_ms: list[float] = []
        self.failures = 0

    def start(self) -> None:
        self._stop.clear()
        self.latencies_ms = []
        self.failures = 0
        self._thread = threading.Thread(target=self._run, name="probe", daemon=True)
        self._thread.start()

    def stop(self) -> float | None:
        """Stop probing; the median latency of the probes (None when none succeeded)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(PROBE_TIMEOUT_S + 1)
        return round(statistics.median(self.latencies_ms), 3) if self.latencies_ms else None

    def _run(self) -> None:
        # One client (its setup is not timed), no kept-alive connections: each probe connects.
        limits = httpx.Limits(max_keepalive_connections=0)
        with httpx.Client(limits=limits, timeout=PROBE_TIMEOUT_S) as client:
            while not self._stop.wait(self._interval_s):
                self._probe_once(client)

    def _probe_once(self, client: httpx.Client) -> None:
        started = time.perf_counter()
        try:
            ok = client.get(self._url).status_code == 200
        except httpx.HTTPError:
            ok = False
        if ok:
            self.latencies_ms.append((time.perf_counter() - started) * 1000.0)
        else:
            self.failures += 1
