"""Node's JS frames in a perf profile: named from the JIT's symbol map (model.stacks, the
newest entry covering an address) and split by the rules (model.cpu_split) — Express and
Node's HTTP modules as framework, this project's handlers as handler, Node's internals
and V8's collector as runtime — on a profile captured here: node-express at its peak in
a smoke run with --cpu-profile (its server started with --perf-basic-prof)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cpu_sampler import NODE_PROFILED_OPTIONS, sampled_server_environment
from model.cpu_split import split_stacks, stack_category
from model.stacks import fold_perf_script, jit_frame, parse_folded, parse_perf_map

DATA = Path(__file__).parent.parent / "data"
NODE_EXPRESS = parse_folded((DATA / "perf_folded_node_express.txt").read_text())

# one sample: a JS function (its code at 0x1100, in the map) called from node's main
SCRIPT = """node 7 100.0: 10101010 cpu-clock:
\t    7f0000000010 __libc_send+0x10 (/usr/lib/x86_64-linux-gnu/libc.so.6)
\t    1130 LazyCompile:~old /stale.js:1:1+0x30 (/tmp/perf-7.map)
\t    55550000 node::Start+0x22 (/usr/bin/node)

"""
MAP = (
    "1100 100 Eval:~ /srv/bench/node_modules/qs/lib/index.js:1:1\n"  # freed, space reused
    "1120 40 JS:*text /srv/bench/servers/baselines/node/handlers.js:101:9\n"
    "not a line\n"
)


def test_a_jit_map_names_an_address_by_its_newest_entry() -> None:
    perf_map = parse_perf_map(MAP)
    assert (
        perf_map.name_at(0x1130) == "JS:*text /srv/bench/servers/baselines/node/handlers.js:101:9"
    )
    assert perf_map.name_at(0x1110) == "Eval:~ /srv/bench/node_modules/qs/lib/index.js:1:1"
    assert perf_map.name_at(0x1170) == "Eval:~ /srv/bench/node_modules/qs/lib/index.js:1:1"
    assert perf_map.name_at(0x1200) is None and perf_map.name_at(0x10FF) is None


def test_a_js_frame_is_written_as_a_source_frame() -> None:
    handler = "JS:*text /srv/servers/baselines/node/handlers.js:101:9"
    assert (
        jit_frame(handler, "/tmp/perf-7.map")
        == "text (/srv/servers/baselines/node/handlers.js:101)"
    )
    top = jit_frame("Eval:~ node:internal/crypto/keys:1:1", "/tmp/perf-7.map")
    assert top == "(top level) (node:internal/crypto/keys:1)"
    assert jit_frame("Builtin:ArgumentsAdaptor", "/tmp/perf-7.map") == (
        "Builtin:ArgumentsAdaptor (/tmp/perf-7.map)"
    )


def test_perf_script_frames_in_a_jit_map_are_named_from_it() -> None:
    named = fold_perf_script(SCRIPT, {"/tmp/perf-7.map": parse_perf_map(MAP)})
    assert named == {
        "node::Start (/usr/bin/node);text (/srv/bench/servers/baselines/node/handlers.js:101);"
        "__libc_send (/usr/lib/x86_64-linux-gnu/libc.so.6)": 1
    }
    # perf's own name is kept without the map
    assert "LazyCompile:~old /stale.js:1:1 (/tmp/perf-7.map)" in next(
        iter(fold_perf_script(SCRIPT))
    )


def test_node_express_splits_into_framework_handler_runtime_and_kernel() -> None:
    split = split_stacks(NODE_EXPRESS, "node-express", kernel_frames=True)
    shares = split.shares()
    assert shares["framework"] > 0.15 and shares["handler"] > 0.03
    assert shares["kernel"] > 0.1 and shares["runtime"] > 0.1
    categories = {f["frame"]: f["category"] for f in split.top_frames(40)}
    assert categories["text (/srv/bench/servers/baselines/node/handlers.js)"] == "handler"
    assert categories["parserOnIncoming (node:_http_server)"] == "framework"
    express = [f for f in categories if "node_modules/express/" in f]
    assert express and all(categories[f] == "framework" for f in express)
    # Express is not node-http's framework: its frames are another library's there
    assert (
        split_stacks(NODE_EXPRESS, "node-http", kernel_frames=True).shares()["framework"]
        < (shares["framework"])
    )


@pytest.mark.parametrize(
    ("stack", "category"),
    [
        # V8's collector under a handler's frame is the runtime's, as CPython's GC is
        (
            "text (/srv/servers/baselines/node/handlers.js:101);"
            "v8::internal::Heap::CollectGarbage (/usr/bin/node);"
            "v8::internal::Scavenger::Process (/usr/bin/node)",
            "runtime",
        ),
        # an inline cache's miss is the JS code's own work, as CPython's eval loop is
        (
            "text (/srv/servers/baselines/node/handlers.js:101);"
            "v8::internal::Runtime_LoadIC_Miss (/usr/bin/node)",
            "handler",
        ),
        (
            "text (/srv/servers/baselines/node/handlers.js:101);end (node:_http_outgoing:1034);"
            "clearBuffer (node:internal/streams/writable:744);"
            "node::StreamBase::Writev (/usr/bin/node)",
            "runtime",
        ),
        (
            "onStreamRead (node:internal/stream_base_commons:1);"
            "node::(anonymous namespace)::Parser::Execute (/usr/bin/node);"
            "llhttp_execute (/usr/bin/node)",
            "framework",
        ),
        ("processTicksAndRejections (node:internal/process/task_queues:67)", "runtime"),
        ("handle (/srv/node_modules/express/lib/router/layer.js:86)", "framework"),
    ],
)
def test_node_stack_rules(stack: str, category: str) -> None:
    assert stack_category(stack, "node-express", kernel_frames=True)[0] == category


def test_a_profiled_rounds_server_keeps_the_harnesss_node_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NODE_OPTIONS", "--max-old-space-size=512")
    options = sampled_server_environment()["NODE_OPTIONS"]
    assert options == f"--max-old-space-size=512 {NODE_PROFILED_OPTIONS}"
    assert "--perf-basic-prof" in options
    monkeypatch.delenv("NODE_OPTIONS")
    assert sampled_server_environment() == {"NODE_OPTIONS": NODE_PROFILED_OPTIONS}
