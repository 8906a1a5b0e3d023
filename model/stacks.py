"""Sampled stacks as collapsed ("folded") stacks: `frame;frame;leaf COUNT` per line, the
root first, the format flamegraph.pl, speedscope and inferno open.

Two samplers' outputs are read here, as pure functions tested on captured output
(tests/data/): py-spy's `record --format raw` (already collapsed; with --subprocesses each
stack starts with a `process PID:"COMMAND LINE"` frame, dropped here as the process tree
is one server) and `perf script`'s text (one block per sample, the leaf first), folded
here. A frame keeps its module in parentheses — `tcp_sendmsg ([kernel.kallsyms])`,
`_PyEval_EvalFrameDefault (libpython3.11.so.1.0)`, `handle (/srv/servers/x.py:12)` — as
the split's rules (model.cpu_split) read it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping

Folded = dict[str, int]  # a stack, root first, frames joined by ";" → its samples

_COUNT = re.compile(r"^(?P<stack>.*\S)\s+(?P<count>\d+)$", re.DOTALL)
# a perf script frame: address, symbol (may hold spaces, "+0x1a" offset), "(module)"
_PERF_FRAME = re.compile(r"^\s*[0-9a-f]+\s+(?P<symbol>.*?)(?:\+0x[0-9a-f]+)?\s+\((?P<module>.*)\)$")
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


def fold_perf_script(text: str) -> Folded:
    """`perf script`'s output (a header line per sample, then its frames leaf first, a
    blank line after) as Folded, root first; the command's name is not a frame."""
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
            if match is not None:
                frames.append(f"{match['symbol']} ({match['module']})")
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
