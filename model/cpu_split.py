"""Where a request's CPU goes: each sampled stack (model.stacks) put in one category by
the rules below — the one place they are kept — and the categories' shares turned into µs
per request.

The categories:

- kernel: the network stack and the system calls. perf's `[kernel.kallsyms]` frames (and
  the vDSO); for py-spy, which sees no kernel frames, the native frames in libc and the
  other system-call wrappers a stack ends in (a sample taken in a system call ends there);
- runtime: the language's machinery — the CPython interpreter and its GC (libpython), the
  standard library's event loop and selectors (asyncio, selectors, ssl's wrappers),
  uvloop, gevent's hub, Twisted's reactor, libev, V8 and Node's own code, the Ruby VM,
  and this project's own hub, reactor and loop runner (servers/runtimes);
- framework: the framework's own code (its package's paths; nginx's own binary);
- handler: this project's other servers/ code — the handlers and the sinks;
- other: everything else — other libraries, OpenSSL, frames no rule names.

A stack's category is decided by its leaf if that is kernel; else by its innermost frame
that has a source path (a .py, .js or .rb file, or Node's own `node:` module: the code
being run, whatever native frames the interpreter ran it in) unless a runtime's own
native work (its GC, V8's C++) lies under it; else by its leaf's module. Node's JS frames
have paths only when it ran with --perf-basic-prof (harness.cpu_sampler asks for it).
The decisive frame is also what the top-frames table lists.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

CATEGORIES = ("kernel", "runtime", "framework", "handler", "other")
IDLE = "idle"  # a py-spy stack waiting in the event loop's poll: dropped, not CPU

# a frame: `symbol (module or path[:line])`
_FRAME = re.compile(r"^(?P<symbol>.*?)\s*\((?P<where>[^()]*)\)$")
_SOURCE = re.compile(r"\.(py|pyx|js|mjs|cjs|rb)(:\d+)?$|^node:")  # node: Node's own modules
_LINE = re.compile(r":\d+\)$")
_NATIVE_SOURCE = re.compile(r"\.(c|h|cc|cpp)(:\d+)?$")

# native modules: a system call's wrapper ends a stack the kernel serves (for a sampler
# that sees no kernel frames: py-spy); the kernel's own frames (perf)
KERNEL_MODULES = re.compile(r"^\[kernel\.kallsyms\]$|^\[vdso\]$|^libc[.-]|^libpthread|^ld-linux")
KERNEL_FRAMES = re.compile(r"^\[kernel\.kallsyms\]$|^\[vdso\]$")
# CPython's blocking calls: a stack in libc under one of them is a thread asleep (a lock,
# a poll, a sleep), whatever address libc's frame is printed as
IDLE_CALLERS = re.compile(
    r"^(PyThread_acquire_lock_timed|lock_PyThread_acquire_lock|select_epoll_poll(_impl)?|"
    r"select_select(_impl)?|select_poll_poll(_impl)?|pysleep|time_sleep)$"
)
# py-spy's --idle off misses the native waits: a leaf here is a thread asleep
IDLE_LEAVES = re.compile(
    r"^(epoll_wait|epoll_pwait2?|poll|__poll|ppoll|select|pselect6?|nanosleep|"
    r"clock_nanosleep|pthread_cond_(timed)?wait|__futex_abstimed_wait_common\d*|"
    r"do_futex_wait|sem_(clock|timed)?wait|accept4?|__GI___poll)$"
)
RUNTIME_MODULES = re.compile(
    r"^libpython|^python\d?(\.\d+)?$|^node$|^libnode|^libuv|^libruby|^ruby$|^libev|"
    r"^uvloop|^loop\.cpython|^_?greenlet|^rubyeventmachine|^\[JIT\]|^perf-\d+\.map$"
)
# CPython's own C sources in py-spy's native frames: the event loop, selectors, GC, the
# allocator, the eval loop
RUNTIME_NATIVE_SOURCES = re.compile(
    r"^(_asynciomodule|selectmodule|gcmodule|obmalloc|ceval|ceval_gil|gc)\.c"
)
FRAMEWORK_MODULES = re.compile(r"^nginx$")
# Node's C++ (its bindings to libuv: the stream writes, the timers) and V8's collector and
# compilers: runtime even under a JS function's frame, as CPython's GC is under Python's.
# V8's other C++ (an inline cache's miss, a property's slow path) is the JS code's own
# work, as CPython's eval loop is the Python code's
# Node's HTTP parser (llhttp, in node's binary): the framework's, as NODE_HTTP's JS is
FRAMEWORK_NATIVE_SYMBOLS = re.compile(r"^(node::\(anonymous namespace\)::Parser::|llhttp_)")
RUNTIME_NATIVE_SYMBOLS = re.compile(
    r"^(node::|uv_|v8::internal::(Heap|Scavenger|MarkCompact|MinorMarkCompact|MinorMS|"
    r"Sweeper|IncrementalMarking|ConcurrentMarking|MemoryAllocator|GlobalHandles|"
    r"compiler::|maglev::|baseline::|Compiler|Parser))"
)
# interpreted code by its top-level package (paths as py-spy prints them, or absolute)
RUNTIME_PACKAGES = frozenset(
    {*sys.stdlib_module_names, "uvloop", "greenlet", "node:internal", "internal", "node:"}
)
# parts of a framework that are its event loop: runtime, not framework; and this
# project's own event-loop glue (a bounded epoll hub, reactor or loop runner: a py-spy
# stack without native frames ends in its poll), not handler
RUNTIME_PATHS = re.compile(
    r"^gevent/(hub|_hub|libev|libuv|_ffi|_greenlet|_abstract_linkable|_hub_local)|"
    r"^twisted/internet/|^eventlet/hubs/|^tornado/(ioloop|platform/asyncio)|"
    r"^servers/runtimes/(green/eventlet_hub|twisted/reactor|asyncio/loop)\.py"
)
HANDLER_PACKAGES = frozenset({"servers"})  # this project's servers: handlers and sinks
# Node's HTTP server (its JS modules; the parser is native, llhttp, inside node): the
# framework of both Node servers, as aiohttp's own HTTP code is aiohttp's
NODE_HTTP = ("node:_http_server", "node:_http_common", "node:_http_incoming",
             "node:_http_outgoing", "node:http")  # fmt: skip
# a framework's own packages (its name when not listed)
FRAMEWORK_PACKAGES = {
    "aiohttp": ("aiohttp", "multidict", "yarl", "propcache", "frozenlist", "aiosignal"),
    "node-http": NODE_HTTP,
    "node-express": ("express", "router", "body-parser", *NODE_HTTP),
}
_PACKAGE_ROOTS = re.compile(r"^.*/(site-packages|dist-packages|node_modules|lib/python3[.\d]*)/")


def frame_parts(frame: str) -> tuple[str, str]:
    """(symbol, module or path) of a frame; (frame, "") when it names none."""
    match = _FRAME.match(frame)
    return (match["symbol"], match["where"]) if match else (frame, "")


def is_source(frame: str) -> bool:
    """Whether a frame is interpreted code (it names a source file)."""
    return bool(_SOURCE.search(frame_parts(frame)[1]))


def module_path(path: str) -> str:
    """A source path from its package's root: `aiohttp/web.py` of
    `/venv/lib/python3.11/site-packages/aiohttp/web.py:12`; a project path from `servers/`."""
    path = re.sub(r":\d+$", "", path)
    if "/servers/" in path and not _PACKAGE_ROOTS.match(path):
        return "servers/" + path.rsplit("/servers/", 1)[1]
    return _PACKAGE_ROOTS.sub("", path)


def source_category(path: str, framework: str) -> str:
    """The category of interpreted code at `path` (run for `framework`)."""
    relative = module_path(path)
    package = relative.split("/", 1)[0].removesuffix(".py")
    if relative.startswith("<frozen") or RUNTIME_PATHS.match(relative):
        return "runtime"
    if package in HANDLER_PACKAGES:
        return "handler"
    if package in FRAMEWORK_PACKAGES.get(framework, (framework,)):
        return "framework"
    if package in RUNTIME_PACKAGES or package.startswith("node:"):
        return "runtime"
    return "other"


def native_category(module: str) -> str:
    """The category of native code in `module` (a library or program's file name)."""
    module = module.rsplit("/", 1)[-1]
    if KERNEL_MODULES.search(module):
        return "kernel"
    if FRAMEWORK_MODULES.search(module):
        return "framework"
    if RUNTIME_MODULES.search(module) or RUNTIME_NATIVE_SOURCES.search(module):
        return "runtime"
    return "other"


def _asleep(frames: list[str]) -> bool:
    """Whether a stack ending in libc waits: a poll's or a lock's call, by its own name or
    by the CPython call that made it (below the innermost interpreted frame)."""
    for frame in reversed(frames):
        if is_source(frame):
            return False
        symbol = frame_parts(frame)[0]
        if IDLE_LEAVES.match(symbol) or IDLE_CALLERS.match(symbol):
            return True
    return False


def stack_category(stack: str, framework: str, kernel_frames: bool = False) -> tuple[str, str]:
    """(category, the frame that decided it) of one stack, root first: a leaf in the
    kernel is kernel; so is, for a sampler that sees no kernel frames (`kernel_frames`
    False: py-spy), a leaf in a system call's wrapper (or idle: a poll's or a lock's
    wait); else the innermost interpreted frame, or native runtime frame, decides; else
    the leaf's module."""
    frames = stack.split(";")
    leaf = frames[-1]
    where = frame_parts(leaf)[1]
    module = where.rsplit("/", 1)[-1]
    if KERNEL_FRAMES.search(module):
        return "kernel", leaf
    if not kernel_frames and native_category(where) == "kernel" and not is_source(leaf):
        return (IDLE if _asleep(frames) else "kernel"), leaf
    for frame in reversed(frames):
        symbol, frame_where = frame_parts(frame)
        if is_source(frame):
            return source_category(frame_where, framework), frame
        if FRAMEWORK_NATIVE_SYMBOLS.match(symbol):
            return "framework", frame
        if RUNTIME_NATIVE_SOURCES.search(frame_where) or RUNTIME_NATIVE_SYMBOLS.match(symbol):
            return "runtime", frame
    if _NATIVE_SOURCE.search(where):
        return "other", leaf
    category = native_category(where)
    return ("other" if category == "kernel" else category), leaf  # libc's own code


@dataclass(frozen=True)
class CpuSplit:
    """A profile's samples by category (idle ones apart), and the frames that decided them."""

    samples: dict[str, int]  # category → samples
    frames: dict[str, tuple[str, int]]  # frame → (category, samples)
    idle_samples: int = 0  # waits py-spy counted as running: left out

    @property
    def total(self) -> int:
        """The samples on a CPU (idle ones not counted)."""
        return sum(self.samples.values())

    def shares(self) -> dict[str, float]:
        """Each category's share of the samples (0..1; all 0 without samples)."""
        total = self.total
        return {c: (self.samples.get(c, 0) / total if total else 0.0) for c in CATEGORIES}

    def top_frames(self, count: int = 10) -> list[dict[str, Any]]:
        """The most sampled deciding frames: frame, category, share of the samples."""
        ranked = sorted(self.frames.items(), key=lambda item: (-item[1][1], item[0]))
        total = self.total or 1
        return [
            {"frame": frame, "category": category, "share": round(samples / total, 4)}
            for frame, (category, samples) in ranked[:count]
        ]


def split_stacks(
    folded: Mapping[str, int], framework: str, kernel_frames: bool = False
) -> CpuSplit:
    """Every stack of `folded` put in its category (`kernel_frames`: the sampler sees the
    kernel's own frames, as perf does)."""
    samples: Counter[str] = Counter({c: 0 for c in CATEGORIES})
    frames: dict[str, tuple[str, int]] = {}
    idle = 0
    for stack, count in folded.items():
        category, frame = stack_category(stack, framework, kernel_frames)
        frame = _LINE.sub(")", frame)  # a function's lines as one
        if category == IDLE:
            idle += count
            continue
        samples[category] += count
        _, before = frames.get(frame, (category, 0))
        frames[frame] = (category, before + count)
    return CpuSplit(dict(samples), frames, idle)


def cpu_parts_us(split: CpuSplit, cpu_us_per_req: float) -> dict[str, float]:
    """The measured `cpu_us_per_req` split by the categories' shares of the samples (the
    parts sum to it, but for rounding to 0.01 µs)."""
    return {c: round(share * cpu_us_per_req, 2) for c, share in split.shares().items()}


def sampled_us_per_req(split: CpuSplit, *, sample_period_s: float, replies: int) -> float | None:
    """The CPU the samples account for, in µs per request: the samples × the sampling
    period over the replies (None without replies). Against the measured figure it says
    how much the sampler saw: perf's cpu-clock counts CPU time; py-spy counts a thread
    that is not waiting (a paused or runnable one too), so it may read above."""
    if replies <= 0:
        return None
    return round(split.total * sample_period_s * 1e6 / replies, 2)


@dataclass(frozen=True)
class CpuMove:
    """Where one case's CPU per request moved from run A to run B: a category's µs, or a
    frame's (its share × the case's µs/request)."""

    case: str  # the case's key
    what: str  # a category, or a frame
    kind: str  # "category" or "frame"
    a_us: float
    b_us: float

    @property
    def delta_us(self) -> float:
        return round(self.b_us - self.a_us, 2)


def _frame_us(profile: Mapping[str, Any]) -> dict[str, float]:
    of = profile.get("split_of_us_per_req") or 0.0
    return {f["frame"]: f["share"] * of for f in profile.get("top_frames") or []}


def cpu_moves(
    case: str, a: Mapping[str, Any], b: Mapping[str, Any], frames: int = 5
) -> list[CpuMove]:
    """Two `summary.cpu_profile` records of one case: every category's µs A → B, then the
    `frames` top frames (of either run) whose µs moved most (a frame outside a run's kept
    top frames counts 0 µs there)."""
    a_parts, b_parts = a.get("parts_us") or {}, b.get("parts_us") or {}
    moves = [
        CpuMove(case, category, "category", a_parts.get(category, 0.0), b_parts.get(category, 0.0))
        for category in CATEGORIES
    ]
    a_frames, b_frames = _frame_us(a), _frame_us(b)
    frame_moves = [
        CpuMove(
            case,
            frame,
            "frame",
            round(a_frames.get(frame, 0.0), 2),
            round(b_frames.get(frame, 0.0), 2),
        )
        for frame in {**a_frames, **b_frames}
    ]
    frame_moves.sort(key=lambda move: (-abs(move.delta_us), move.what))
    return moves + frame_moves[:frames]
