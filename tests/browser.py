"""Headless Chromium driven over the DevTools protocol, for the tests that open pages as a
person would (tests/e2e/test_report_browser.py, test_publish_browser.py).

Chromium is Debian's `chromium` package (`harness doctor --install`). The protocol runs on
a pipe (`--remote-debugging-pipe`: the browser reads commands on fd 3 and writes replies
and events on fd 4, each a JSON text ended by NUL), so no port is opened and nothing but
the standard library is needed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from harness.tools import tool_path

BROWSER_TIMEOUT_S = 60.0  # a load of a ~1 MB page, well over what it takes
WIDTHS = (1280, 800, 390)  # a desktop window, a narrow laptop one, a phone
PHONE_WIDTH_PX = 500  # narrower than this: emulated as a phone (mobile, viewport meta honoured)

# What the page says about itself once loaded: images that failed (naturalWidth 0),
# how wide the document is against the window, and the elements that reach past the
# window's right edge outside a box of their own that scrolls (a wide table's).
CHECK_PAGE = """
(() => {
  const images = [...document.images];
  const width = document.documentElement.clientWidth;
  const scrolls = (element) => {
    for (let a = element.parentElement; a; a = a.parentElement) {
      const overflow = getComputedStyle(a).overflowX;
      if (overflow === 'auto' || overflow === 'scroll' || overflow === 'hidden') return true;
    }
    return false;
  };
  const overflowing = [...document.body.querySelectorAll('*')]
    .filter((e) => e.getBoundingClientRect().right > width + 1 && !scrolls(e))
    .slice(0, 5)
    .map((e) => e.tagName.toLowerCase() + (e.className ? '.' + e.className : '')
                + ' ' + Math.round(e.getBoundingClientRect().right) + 'px');
  return {
    images: images.length,
    broken: images.filter((i) => !i.complete || i.naturalWidth === 0).map((i) => i.alt),
    scroll_width: document.documentElement.scrollWidth,
    window_width: width,
    overflowing: overflowing,
    verdict: document.querySelector('.verdict')?.innerText ?? null,
    links: [...document.querySelectorAll('a[href]')].map((a) => a.getAttribute('href')),
    ids: [...document.querySelectorAll('[id]')].map((e) => e.id),
  };
})()
"""


class Browser:
    """Headless Chromium over the DevTools protocol on a pipe; closed (and reaped) on exit."""

    def __init__(self, profile_dir: Path) -> None:
        commands_read, self._commands = os.pipe()
        self._replies, replies_write = os.pipe()

        def onto_3_and_4() -> None:
            # copies above 10 first, so neither end is overwritten by the other's dup2
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (commands_read, replies_write)]
            os.dup2(high[0], 3)  # dup2 onto another fd clears close-on-exec
            os.dup2(high[1], 4)

        self.process = subprocess.Popen(
            [
                str(tool_path("chromium")),
                "--headless=new",
                "--no-sandbox",  # root in a container: the sandbox cannot start
                "--disable-gpu",
                "--no-first-run",
                "--no-default-browser-check",
                "--remote-debugging-pipe",
                f"--user-data-dir={profile_dir}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=onto_3_and_4,
            close_fds=False,  # fds 3 and 4 must reach it; the harness's own fds are not inheritable
            start_new_session=True,  # its renderer and GPU processes in one group, ours
        )
        os.close(commands_read)
        os.close(replies_write)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def _message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._replies], [], [], max(left, 0))
            if not ready:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._replies, 1 << 16)
            if not chunk:
                raise EOFError(f"chromium closed its pipe (exit {self.process.poll()})")
            self._buffer += chunk
        text, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(text)

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        """One command; its result (events that arrive meanwhile are kept in `events`)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + BROWSER_TIMEOUT_S
        while True:
            reply = self._message(deadline)
            if reply.get("id") != self._next_id:
                self.events.append(reply)
                continue
            if "error" in reply:
                raise RuntimeError(f"{method}: {reply['error']}")
            return reply.get("result", {})

    def wait_for(self, method: str) -> dict[str, Any]:
        """The first event `method` (already received or still to come)."""
        deadline = time.monotonic() + BROWSER_TIMEOUT_S
        for event in self.events:
            if event.get("method") == method:
                return event
        while True:
            event = self._message(deadline)
            self.events.append(event)
            if event.get("method") == method:
                return event

    def console_errors(self) -> list[str]:
        """Uncaught exceptions, console.error/assert calls and the browser's own error
        entries (a resource that failed to load, a blocked request)."""
        errors = []
        for event in self.events:
            params = event.get("params", {})
            if event.get("method") == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                thrown = details.get("exception", {}).get("description", "")
                errors.append(f"{details.get('text', 'exception')} {thrown}"[:300])
            elif event.get("method") == "Runtime.consoleAPICalled" and params.get("type") in (
                "error",
                "assert",
            ):
                args = params.get("args", [])
                said = " ".join(str(a.get("value", a.get("description", ""))) for a in args)
                errors.append(f"console.{params['type']}: {said}"[:300])
            elif event.get("method") == "Log.entryAdded" and params["entry"]["level"] == "error":
                entry = params["entry"]
                errors.append(f"{entry.get('text', '')} {entry.get('url', '')}"[:300])
        return errors

    def close(self) -> None:
        try:
            if self.process.poll() is None:
                self.send("Browser.close")
                self.process.wait(timeout=10)
        except (OSError, RuntimeError, TimeoutError, EOFError, subprocess.TimeoutExpired):
            pass
        finally:
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGKILL)  # the group we started
                self.process.wait(timeout=10)
            os.close(self._commands)
            os.close(self._replies)


@contextlib.contextmanager
def chromium(profile_dir: Path) -> Iterator[Browser]:
    """A browser for the block, closed after (opened once the run's load is over, so it
    takes no CPU from the servers)."""
    opened = Browser(profile_dir)
    try:
        yield opened
    finally:
        opened.close()


def check_page(browser: Browser, page: Path, width_px: int) -> dict[str, Any]:
    """Load `page` in a fresh tab `width_px` wide; what CHECK_PAGE found, and the console's
    errors."""
    target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
        "sessionId"
    ]
    for domain in ("Page", "Runtime", "Log"):
        browser.send(f"{domain}.enable", session=session)
    browser.send(
        "Emulation.setDeviceMetricsOverride",
        {
            "width": width_px,
            "height": 900,
            "deviceScaleFactor": 1,
            "mobile": width_px < PHONE_WIDTH_PX,
        },
        session=session,
    )
    browser.events.clear()
    browser.send("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
    browser.wait_for("Page.loadEventFired")
    found = browser.send(
        "Runtime.evaluate", {"expression": CHECK_PAGE, "returnByValue": True}, session=session
    )["result"]["value"]
    found["console_errors"] = browser.console_errors()
    browser.send("Target.closeTarget", {"targetId": target})
    return found


def assert_sound_at(found: dict[str, Any], width_px: int) -> None:
    """What check_page found at `width_px`: every image loaded, nothing wider than the
    window, no console errors."""
    assert found["broken"] == [], found
    # the window less a vertical scrollbar, if the page draws one
    assert width_px - 30 <= found["window_width"] <= width_px, found
    assert found["scroll_width"] <= found["window_width"], found
    assert found["overflowing"] == [], found
    assert found["console_errors"] == [], found


def unresolved_links(page: Path, links: list[str], ids_of: dict[Path, set[str]]) -> list[str]:
    """The links of `page` that do not resolve on disk: an absolute URL (a site must work
    from file:// and any host), a missing file, or a `#fragment` the target lacks.
    `ids_of`: each page's element ids (filled as pages are checked; a page not yet
    checked is read for `id="..."`)."""
    bad = []
    for link in links:
        parts = urlsplit(link)
        if parts.scheme or parts.netloc or link.startswith("/"):
            bad.append(f"{link}: not relative")
            continue
        target = (page.parent / unquote(parts.path)).resolve() if parts.path else page.resolve()
        if not target.is_file():
            bad.append(f"{link}: no file {target}")
            continue
        if parts.fragment:
            if target not in ids_of:
                ids_of[target] = set(re.findall(r'id="([^"]+)"', target.read_text()))
            if parts.fragment not in ids_of[target]:
                bad.append(f"{link}: no #{parts.fragment} in {target.name}")
    return bad
