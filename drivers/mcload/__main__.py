"""The mcload tool itself (`python -m drivers.mcload`): see drivers/mcload/__init__.py."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import time

from drivers import histograms as hdr
from drivers.mcload import REPORT_PREFIX
from servers.core import memcache


class Tally:
    """What every connection of one process saw."""

    def __init__(self) -> None:
        self.replies = 0
        self.errors: dict[str, int] = {}
        self.latency_us = hdr.new_histogram()

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1


async def connection_loop(
    host: str,
    port: int,
    key: bytes,
    expected: bytes,
    deadline: float,
    timeout_s: float,
    tally: Tally,
) -> None:
    """One long-lived connection: get, check, repeat until the deadline; reconnect on error."""
    request = memcache.get_request(key)
    while time.monotonic() < deadline:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
        except (TimeoutError, OSError):
            tally.error("connect")
            await asyncio.sleep(0.1)
            continue
        buffer = bytearray()
        try:
            while time.monotonic() < deadline:
                started = time.perf_counter()
                writer.write(request)
                reply = None
                while reply is None:
                    chunk = await asyncio.wait_for(reader.read(65536), timeout_s)
                    if not chunk:
                        raise ConnectionResetError("closed by the server")
                    buffer += chunk
                    reply = memcache.parse_get_reply(buffer)
                value, used = reply
                del buffer[:used]
                hdr.record_us(tally.latency_us, (time.perf_counter() - started) * 1e6)
                if value == expected:
                    tally.replies += 1
                else:
                    tally.error("wrong")
        except TimeoutError:
            tally.error("timeout")
        except memcache.MemcacheError:
            tally.error("wrong")
        except ConnectionResetError:
            tally.error("reset")
        except OSError:
            tally.error("read")
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


async def run(args: argparse.Namespace) -> dict[str, object]:
    tally = Tally()
    started = time.monotonic()
    deadline = started + args.duration
    expected = bytes.fromhex(args.value_hex)
    loops = asyncio.gather(
        *(
            connection_loop(
                args.host, args.port, args.key.encode(), expected, deadline, args.timeout, tally
            )
            for _ in range(args.connections)
        )
    )
    # SIGINT (the harness's watchdog, or Ctrl-C) ends the loops now; the totals still print
    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, loops.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await loops
    elapsed_s = time.monotonic() - started
    histogram = tally.latency_us
    count = histogram.get_total_count()
    return {
        "replies": tally.replies,
        "duration_s": round(elapsed_s, 3),
        "connections": args.connections,
        "errors": tally.errors,
        "latency_us": {
            "mean": histogram.get_mean_value() if count else None,
            "p50": histogram.get_value_at_percentile(50) if count else None,
            "p90": histogram.get_value_at_percentile(90) if count else None,
            "p99": histogram.get_value_at_percentile(99) if count else None,
            "max": histogram.get_max_value() if count else None,
        },
        "histogram": hdr.encode(histogram) if count else None,  # the whole of it, base64
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m drivers.mcload", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per reply")
    parser.add_argument("--key", required=True)
    parser.add_argument("--value-hex", required=True, help="the expected value, hex")
    args = parser.parse_args(argv)
    try:
        import uvloop

        uvloop.install()  # the load generator must outrun the server it measures
    except ImportError:
        pass
    report = asyncio.run(run(args))
    print(REPORT_PREFIX + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
