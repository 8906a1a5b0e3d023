"""servers/baselines/node/contract.js is a copy of servers/contract.py (and of a few neutral
constants): this keeps the copy honest, name by name, without starting a server."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest

from servers import NODE_DIR, contract
from servers.core import memcache, sinks

# Not copied: the boards' workloads' payloads and bounds (Node reads them from
# contract.WORKLOADS_ENV, contract.workload_values, or does not use them: the harness's),
# and what only one other server implements
NOT_COPIED = (
    "ALL_ROUTES",
    "RECORD_FIELDS",
    "COUNTER_FIELDS",
    "MC_VALUE_BYTES",
    "JSON_MESSAGE",
    "PLAINTEXT_BODY",
    "PIPELINE_DEPTH",
    "BODY_10K",
    "BODY_10K_BYTES",
    "DELAY_MAX_MS",
    "BAD_REQUEST_STATUS",
    "UPLOAD_MAX_BODY_BYTES",
    "UPLOAD_SIZES_BYTES",
    "JSON_COMP_ITEMS",
    "JSON_COMP_DOCUMENT",
    "GZIP_LEVEL",
    # Twisted's HTTP/2 bounds (servers/frameworks/twisted/h2.py): Node's http2 keeps its own
    "H2_LIMITS",
    "H2_SMALL_DATA_BYTES",
    "H2_MAX_HEADER_BLOCK_BYTES",
    "H2_MAX_CONTINUATION_FRAMES",
    "H2_ENHANCE_YOUR_CALM",
)
# contract.js name -> the Python value it copies
COPIED: dict[str, Any] = {
    **{
        name: getattr(contract, name)
        for name in dir(contract)
        if name.isupper() and name not in NOT_COPIED and not name.endswith("_S")
    },
    "TICK_INTERVAL_MS": contract.TICK_INTERVAL_S * 1000,
    "TELEMETRY_INTERVAL_MS": contract.TELEMETRY_INTERVAL_S * 1000,
    "SHUTDOWN_GRACE_MS": contract.SHUTDOWN_GRACE_S * 1000,
    "HEAD_TIMEOUT_MS": contract.HEAD_TIMEOUT_S * 1000,
    "BODY_TIMEOUT_MS": contract.BODY_TIMEOUT_S * 1000,
    "MC_TIMEOUT_MS": contract.MC_TIMEOUT_S * 1000,
    "FLUSH_INTERVAL_MS": sinks.FLUSH_INTERVAL_S * 1000,
    "MONGO_DATABASE": sinks.MONGO_DATABASE,
    "MONGO_COLLECTION": sinks.MONGO_COLLECTION,
    "MONGO_SERVER_SELECTION_TIMEOUT_MS": sinks.MONGO_SERVER_SELECTION_TIMEOUT_MS,
    "MONGO_WRITE_TIMEOUT_MS": sinks.MONGO_WRITE_TIMEOUT_MS,
    "DEFAULT_MONGO_URL": sinks.DEFAULT_MONGO_URL,
    "MC_MAX_LINE_BYTES": memcache.MAX_LINE_BYTES,
    "MC_REPLY_END": memcache.REPLY_END,
    "MC_REPLY_ERROR": memcache.REPLY_ERROR,
    "MC_REPLY_LINE_TOO_LONG": memcache.REPLY_LINE_TOO_LONG,
    "MC_REPLY_BAD_KEY": memcache.REPLY_BAD_KEY,
    "MC_REPLY_UNAVAILABLE": memcache.REPLY_UNAVAILABLE,
}

# Buffers as latin-1 text, the anchored RegExp as its source, frozen arrays as lists
DUMP = """
const contract = require(process.argv[1]);
const plain = Object.fromEntries(Object.entries(contract).map(([name, value]) => [
  name,
  Buffer.isBuffer(value) ? value.toString('latin1')
    : value instanceof RegExp ? value.source : value,
]));
process.stdout.write(JSON.stringify(plain));
"""


def python_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, tuple):
        return list(value)
    return value


@pytest.fixture(scope="module")
def node_contract() -> dict[str, Any]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    done = subprocess.run(
        [node, "-e", DUMP, str(NODE_DIR / "contract.js")],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return json.loads(done.stdout)


@pytest.mark.parametrize("name", sorted(COPIED))
def test_node_contract_copies_the_python_value(node_contract: dict[str, Any], name: str) -> None:
    expected = python_value(COPIED[name])
    if name in ("FILE_NAME_PATTERN", "MONGO_DB_PATTERN"):
        expected = f"^{expected}$"  # anchored: RegExp.test is a search, fullmatch is not
    assert node_contract.get(name) == expected, f"servers/baselines/node/contract.js {name}"


def test_node_contract_has_nothing_python_lacks(node_contract: dict[str, Any]) -> None:
    assert set(node_contract) - set(COPIED) == {"MC_DEFAULT_ADDRESS"}
    host, port = memcache.memcached_address(None)
    assert node_contract["MC_DEFAULT_ADDRESS"] == f"{host}:{port}"


# The same inputs through workloads.js's rules and servers/core/workloads.py's: the two
# servers' languages judge a `/delay/{ms}` segment and an Accept-Encoding alike.
RULES = """
const { delayMs, wantsGzip } = require(process.argv[1]);
const [segments, codings, maxMs] = JSON.parse(process.argv[2]);
process.stdout.write(JSON.stringify([
  segments.map((s) => delayMs(s, maxMs)), codings.map((c) => wantsGzip(c)),
]));
"""
SEGMENTS = ["0", "10", "10000", "10001", "99999", "123456", "", "abc", "-5", "1.5", "٣"]
CODINGS = ["gzip", "GZIP", "deflate, gzip", "gzip;q=0", "gzip; q=0.5", "br", "", "x-gzip"]


def test_node_workload_rules_agree_with_python() -> None:
    from servers.core import workloads

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    given = json.dumps([SEGMENTS, CODINGS, contract.DELAY_MAX_MS])
    done = subprocess.run(
        [node, "-e", RULES, str(NODE_DIR / "workloads.js"), given],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        env={"SERVERBENCH_WORKLOADS": json.dumps(contract.workload_values())},
    )
    delays, gzips = json.loads(done.stdout)
    assert delays == [workloads.delay_ms(s) for s in SEGMENTS]
    assert gzips == [workloads.wants_gzip(c) for c in CODINGS]
