"""Result files are written whole or not at all: a reader (the report, a spreadsheet, a
second harness) never sees half a file, and a run killed mid-write keeps the previous one."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO


@contextlib.contextmanager
def atomic_writer(path: Path, newline: str | None = None) -> Iterator[TextIO]:
    """A text handle on a temporary file beside `path`, renamed over `path` when the block
    ends without an exception (and removed when it raises)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline=newline) as handle:
            yield handle
        os.chmod(partial, 0o644)  # mkstemp's 0600 would hide results from other users
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise


def write_text_atomically(path: Path, text: str) -> None:
    """`path.write_text(text)`, atomically."""
    with atomic_writer(path) as handle:
        handle.write(text)
