"""Sampled stacks as collapsed ("folded") stacks: `frame;frame;leaf COUNT` per line, the
root first, the format flamegraph.pl, speedscope and inferno open.

Two samplers' outputs are read here, as pure functions tested on captured output
(tests/data/): py-spy's `record --format raw` (already collapsed; with --subprocesses each
stack starts with a `process PID:"COMMAND LINE"` frame, dropped here as the process tree
is one server) and `perf script`'s text (one block per sample, the leaf first), folded
here. A frame keeps its module in parentheses — `tcp_sendmsg ([kernel.kallsyms])`,
`_PyEval_EvalFrameDefault (libpython3.11.so.1.0)`, `handle (/srv/servers/x.py:12)` — as
the split's rules (model.cpu_split) read it.

A JIT's frames (Node's, started with --perf-basic-prof) are named from its symbol map,
/tmp/perf-PID.map, read here (parse_perf_map) rather than by perf: V8 reuses the space of
freed code, the map only grows, and perf's own look-up often picks a stale entry (a
module's top-level code for a hot function). The newest entry covering an address is the
code that was there. A V8 function's frame is written as the others' source frames,
`name (path:line)`.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

Folded = dict[str, int]  # a stack, root first, frames joined by ";" → its samples

_COUNT = re.compile(r"^(?P<stack>.*\S)\s+(?P<count>\d+)$", re.DOTALL)
# a perf script frame: address, symbol (may hold spaces and parentheses, a C++
# template's; "+0x1a" offset), "(module)"
_PERF_FRAME = re.compile(
    r"^\s*(?P<address>[0-9a-f]+)\s+(?P<symbol>.*?)(?:\+0x[0-9a-f]+)?\s+\((?P<module>[^()]*)\)$"
)
# a V8 function in a perf map: its kind and tier (~ interpreted, ^ baseline, + and *
# optimised), its name (none for a module's top level), `path:line:column`
_V8_FUNCTION = re.compile(
    r"^(?:JS|LazyCompile|Function|Eval|Script):[~^+*]?(?P<name>\S*) "
    r"(?P<path>\S+?)(?::(?P<line>\d+))?(?::\d+)?$"
)
_PROCESS_FRAME = re.compile(r'^process \d+:".*?"(?:;|$)', re.DOTALL)


def parse_pyspy_raw(text: str) -> Folded:
    """py-spy's raw output (collapsed stacks) as Folded, the `process …` frame dropped
    (a command line may span lines: a line without a count continues the next)."""
    folded: Counter[str] = Counter()
    pending = ""
    for line in text.splitlines():
        pending = f"{pending}\n{line}" if pending else line
        match = _COUNT.match(pending)
        if match is None:
            continue
        stack = _PROCESS_FRAME.sub("", match["stack"], count=1)
        pending = ""
        if stack:
            folded[stack] += int(match["count"])
    return dict(folded)


@dataclass(frozen=True)
class PerfMap:
    """A JIT's symbol map as address ranges that do not overlap, each named by the newest
    entry covering it (`starts` ascending; `ends` exclusive)."""

    starts: tuple[int, ...] = ()
    ends: tuple[int, ...] = ()
    names: tuple[str, ...] = ()

    def name_at(self, address: int) -> str | None:
        """The symbol at `address`, None when no entry covers it."""
        index = bisect.bisect_right(self.starts, address) - 1
        if index >= 0 and address < self.ends[index]:
            return self.names[index]
        return None


def parse_perf_map(text: str) -> PerfMap:
    """/tmp/perf-PID.map (`START SIZE NAME` a line, hex, in the order code was made) as a
    PerfMap, a later entry winning where two overlap (malformed lines are skipped)."""
    entries: list[tuple[int, int, str]] = []  # (start, end, name), oldest first
    for line in text.splitlines():
        parts = line.split(" ", 2)
        try:
            start, size = int(parts[0], 16), int(parts[1], 16)
        except (IndexError, ValueError):
            continue
        if size > 0 and len(parts) == 3:
            entries.append((start, start + size, parts[2]))
    points = sorted({p for start, end, _ in entries for p in (start, end)})
    by_start = sorted(range(len(entries)), key=lambda i: entries[i][0])
    live: list[tuple[int, int]] = []  # (-age, entry): the newest covering entry on top
    starts: list[int] = []
    ends: list[int] = []
    names: list[str] = []
    opened = 0
    for point, following in itertools.pairwise(points):
        while opened < len(by_start) and entries[by_start[opened]][0] <= point:
            heapq.heappush(live, (-by_start[opened], by_start[opened]))
            opened += 1
        while live and entries[live[0][1]][1] <= point:
            heapq.heappop(live)
        if not live:
            continue
        name = entries[live[0][1]][2]
        if ends and ends[-1] == point and names[-1] == name:
            ends[-1] = following
        else:
            starts.append(point)
            ends.append(following)
            names.append(name)
    return PerfMap(tuple(starts), tuple(ends), tuple(names))


def jit_frame(name: str, module: str) -> str:
    """A frame named from a JIT's map: a V8 function as `name (path:line)`, the way
    interpreted code is written; anything else as `name (module)`."""
    match = _V8_FUNCTION.match(name)
    if match is None:
        return f"{name} ({module})"
    line = f":{match['line']}" if match["line"] else ""
    return f"{match['name'] or '(top level)'} ({match['path']}{line})"


def fold_perf_script(text: str, perf_maps: Mapping[str, PerfMap] | None = None) -> Folded:
    """`perf script`'s output (a header line per sample, then its frames leaf first, a
    blank line after) as Folded, root first; the command's name is not a frame. A frame
    in a module of `perf_maps` (a JIT's `/tmp/perf-PID.map`, as perf prints it) is named
    from that map (jit_frame)."""
    perf_maps = perf_maps or {}
    folded: Counter[str] = Counter()
    frames: list[str] = []
    in_sample = False
    for line in [*text.splitlines(), ""]:
        if not line.strip():
            if in_sample and frames:
                folded[";".join(reversed(frames))] += 1
            frames, in_sample = [], False
        elif not in_sample:
            in_sample = not line.startswith("#")
        else:
            match = _PERF_FRAME.match(line)
            if match is None:
                continue
            symbol, module = match["symbol"], match["module"]
            jit = perf_maps.get(module)
            name = jit.name_at(int(match["address"], 16)) if jit is not None else None
            frames.append(jit_frame(name, module) if name else f"{symbol} ({module})")
    return dict(folded)


def total_samples(folded: Mapping[str, int]) -> int:
    return sum(folded.values())


def folded_text(folded: Mapping[str, int]) -> str:
    """Folded as collapsed-stack text, the most sampled first."""
    rows = sorted(folded.items(), key=lambda item: (-item[1], item[0]))
    return "".join(f"{stack} {count}\n" for stack, count in rows)


def parse_folded(text: str) -> Folded:
    """Collapsed-stack text (folded_text's, or any tool's) as Folded."""
    folded: Counter[str] = Counter()
    for line in text.splitlines():
        match = _COUNT.match(line)
        if match is not None:
            folded[match["stack"]] += int(match["count"])
    return dict(folded)


def merged(parts: Iterable[Mapping[str, int]]) -> Folded:
    """Several processes' Folded as one."""
    total: Counter[str] = Counter()
    for part in parts:
        total.update(part)
    return dict(total)


def leaf_frames(folded: Mapping[str, int]) -> Counter[str]:
    """Each frame's own (self) samples: where the CPU was when sampled."""
    leaves: Counter[str] = Counter()
    for stack, count in folded.items():
        leaves[stack.rsplit(";", 1)[-1]] += count
    return leaves
