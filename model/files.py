"""Files: result files are written whole or not at all (a reader — the report, a
spreadsheet, a second harness — never sees half a file, and a run killed mid-write keeps
the previous one), and what the harness builds for itself (FerretDB, oha, the file set)
is kept in one cache directory."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO


@contextlib.contextmanager
def atomic_writer(path: Path, newline: str | None = None) -> Iterator[TextIO]:
    """A text handle on a temporary file beside `path`, renamed over `path` when the block
    ends without an exception (and removed when it raises)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # a name no other writer uses ("x": never an existing file), with the umask's mode
    partial = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.partial")
    try:
        with partial.open("x", newline=newline) as handle:
            yield handle
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise


def write_text_atomically(path: Path, text: str) -> None:
    """`path.write_text(text)`, atomically."""
    with atomic_writer(path) as handle:
        handle.write(text)


def cache_dir() -> Path:
    """Where the harness keeps what it builds: `$XDG_CACHE_HOME/serverbench-harness`
    (`~/.cache/serverbench-harness`), never the repository."""
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "serverbench-harness"
