"""The live page's and the exporter's HTTP servers, in the harness's own process.

The standard library's ThreadingHTTPServer, one thread per connection, all of them
daemons. The run never waits on them: the reporter events only update the state
(harness.live.state); one broadcaster thread turns each change into a server-sent event,
serialised once, and offers it to every page's queue without blocking. A queue holds
`CLIENT_QUEUE` events; a client that does not keep up loses the older ones (each event is
the whole state, so the next one makes up for it), and a client that stops reading is
dropped when a write has waited `WRITE_TIMEOUT_S`.

Routes: `/` the page, `/static/…` its script and style, `/events` the event stream,
`/state.json` the state once, `/report/…` the run's directory once its report is drawn;
`/metrics` on the exporter's server.
"""

from __future__ import annotations

import contextlib
import json
import mimetypes
import queue
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from harness.live.metrics import EMPTY_REGISTRY, exposition, run_registry
from harness.live.state import LiveState

CLIENT_QUEUE = 2  # events a page's queue holds; the newer replace the older when full
WRITE_TIMEOUT_S = 10.0  # a client that takes no bytes for this long is dropped
KEEPALIVE_S = 15.0  # a comment line when nothing changed, so proxies keep the stream open
MIN_EVENT_GAP_S = 0.5  # at most two events a second, however often the state changes
RETRY_MS = 2000  # how soon a page's EventSource reconnects after losing the stream

STATIC_FILES = {"live.js": "text/javascript", "live.css": "text/css"}


def page_html(title: str) -> bytes:
    """The page (templates/live.html, autoescaped): a frame the script fills from events."""
    from jinja2 import Environment, PackageLoader, select_autoescape  # only a live run pays

    environment = Environment(
        loader=PackageLoader("harness.live", "templates"),
        autoescape=select_autoescape(["html"]),
    )
    return environment.get_template("live.html").render(title=title).encode()


def static_file(name: str) -> bytes:
    return resources.files("harness.live").joinpath("static", name).read_bytes()


class Hub:
    """What the servers share: the state (once the plan is made), the pages' queues, the
    page itself, and the run directory once its report is drawn."""

    def __init__(self) -> None:
        self.state: LiveState | None = None
        self.clients: set[queue.Queue[bytes]] = set()
        self.clients_lock = threading.Lock()
        self.page = page_html("serverbench: live")
        self.report_dir: Path | None = None
        self.registry: Any = None
        self.stopping = threading.Event()

    def attach(self, state: LiveState) -> None:
        self.state = state
        self.page = page_html(f"serverbench live: {state.run_id}")
        self.registry = run_registry(state)

    def event(self) -> bytes:
        """The state as one server-sent event (serialised once for every client)."""
        data = (
            self.state.snapshot()
            if self.state is not None
            else {"status": "starting", "version": 0, "series": [], "settled": [], "flags": []}
        )
        return b"event: state\ndata: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"

    def offer(self, message: bytes) -> None:
        """`message` to every page, never waiting: a full queue drops its oldest."""
        with self.clients_lock:
            clients = list(self.clients)
        for client in clients:
            with contextlib.suppress(queue.Full, queue.Empty):
                if client.full():
                    client.get_nowait()
                client.put_nowait(message)

    def broadcast(self) -> None:
        """The broadcaster thread: an event after each change of the state while any page
        listens, a keep-alive comment when nothing changed for a while."""
        version = -1
        while not self.stopping.is_set():
            if self.state is None:
                self.stopping.wait(0.2)
                continue
            seen = self.state.wait_change(version, KEEPALIVE_S)
            if self.stopping.is_set():
                return
            with self.clients_lock:
                listening = bool(self.clients)
            if seen == version:
                self.offer(b": keep-alive\n\n")
                continue
            version = seen
            if listening:
                self.offer(self.event())
            self.stopping.wait(MIN_EVENT_GAP_S)

    def subscribe(self) -> queue.Queue[bytes]:
        client: queue.Queue[bytes] = queue.Queue(CLIENT_QUEUE)
        client.put_nowait(self.event())  # the page draws at once, not at the next change
        with self.clients_lock:
            self.clients.add(client)
        return client

    def unsubscribe(self, client: queue.Queue[bytes]) -> None:
        with self.clients_lock:
            self.clients.discard(client)

    def drain(self, timeout_s: float) -> None:
        """The newest state offered to every page, then a wait (at most `timeout_s`) for
        their queues to empty: the run's end reaches the pages before the process goes."""
        self.offer(self.event())
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.clients_lock:
                if all(client.empty() for client in self.clients):
                    return
            time.sleep(0.05)

    def report_file(self, relative: str) -> Path | None:
        """A file of the run's directory once the report is drawn (None: not there, or
        outside it)."""
        if self.report_dir is None:
            return None
        root = self.report_dir.resolve()
        path = (root / relative).resolve()
        if not path.is_relative_to(root) or not path.is_file():
            return None
        return path


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: the console is the run's progress display."""

    def _send(self, status: int, body: bytes, content_type: str, cache: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "max-age=60" if cache else "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        hub = self.server.hub
        path = unquote(urlsplit(self.path).path)
        if self.server.routes == "metrics":
            if path != "/metrics":
                self._send(404, b"not found: the metrics are on /metrics\n", "text/plain")
                return
            # before the plan is made the run has no metrics yet: an empty scrape, not a
            # missing target (a scraper would mark it down)
            registry = hub.registry if hub.registry is not None else EMPTY_REGISTRY
            body, content_type = exposition(registry, self.headers.get("Accept"))
            self._send(200, body, content_type)
            return
        if path == "/":
            self._send(200, hub.page, "text/html; charset=utf-8")
        elif path.startswith("/static/") and path[8:] in STATIC_FILES:
            self._send(200, static_file(path[8:]), STATIC_FILES[path[8:]], cache=True)
        elif path == "/state.json":
            body = json.dumps(hub.state.snapshot() if hub.state else {"status": "starting"})
            self._send(200, body.encode(), "application/json")
        elif path == "/events":
            self._stream()
        elif path.startswith("/report/") and (found := hub.report_file(path[8:])) is not None:
            kind = mimetypes.guess_type(found.name)[0] or "application/octet-stream"
            self._send(200, found.read_bytes(), kind)
        else:
            self._send(404, b"not found\n", "text/plain")

    def _stream(self) -> None:
        """Server-sent events until the client goes, the write times out or the server
        stops."""
        hub = self.server.hub
        self.connection.settimeout(WRITE_TIMEOUT_S)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        if self.command == "HEAD":
            return
        client = hub.subscribe()
        try:
            self.wfile.write(f"retry: {RETRY_MS}\n\n".encode())
            while not hub.stopping.is_set():
                try:
                    message = client.get(timeout=1.0)
                except queue.Empty:
                    continue
                self.wfile.write(message)
                self.wfile.flush()
        except OSError:  # gone, reset, or took nothing for WRITE_TIMEOUT_S
            pass
        finally:
            hub.unsubscribe(client)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # a listen backlog beyond the socketserver default of 5: twenty tabs opening at once
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], hub: Hub, routes: str) -> None:
        self.hub = hub
        self.routes = routes  # "page" or "metrics"
        if ":" in address[0]:  # an IPv6 address ([::1]:8089)
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)


class LiveServer:
    """One listening server (the page's, or the exporter's) on its own thread."""

    def __init__(self, host: str, port: int, hub: Hub, routes: str) -> None:
        self.hub = hub
        self._server = _Server((host, port), hub, routes)
        self.host, self.port = self._server.server_address[:2]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.5},
            name=f"live-{routes}",
            daemon=True,
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in str(self.host) else self.host
        return f"http://{host}:{self.port}/"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def start_broadcaster(hub: Hub) -> threading.Thread:
    """The thread that turns the state's changes into events for the pages."""
    thread = threading.Thread(target=hub.broadcast, name="live-events", daemon=True)
    thread.start()
    return thread
