"""Static files (`/files/{name}`) and GridFS names (`/gridfs/{name}`): the neutral parts.

Every framework resolves a requested name here, so the same names are refused everywhere:
a name is one path segment matching `contract.FILE_NAME_PATTERN`. That refuses `../`,
`%2e%2e%2f` (decoded or not), absolute paths, empty names and hidden files before the file
system is touched; `file_path` also checks the resolved path stays inside the directory.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass

from servers import contract

_NAME = re.compile(contract.FILE_NAME_PATTERN)


def valid_name(name: str) -> bool:
    """Whether `name` (the part after /files/ or /gridfs/) may name a file at all."""
    return _NAME.fullmatch(name) is not None


def content_type(name: str) -> str:
    """The Content-Type for a file name, by extension (contract.FILE_CONTENT_TYPES)."""
    extension = os.path.splitext(name)[1].lower()
    return contract.FILE_CONTENT_TYPES.get(extension, contract.DEFAULT_CONTENT_TYPE)


@dataclass(frozen=True)
class StaticFile:
    """A file that may be served: where it is, its size and its Content-Type."""

    path: str
    size_bytes: int
    content_type: str


def file_path(files_dir: str | None, name: str) -> StaticFile | None:
    """The regular file `name` under `files_dir`, or None (404) — never one outside it.

    One `stat` call: cheap enough on any event loop for a file set in the page cache.
    """
    if not files_dir or not valid_name(name):
        return None
    root = os.path.realpath(files_dir)
    path = os.path.realpath(os.path.join(root, name))
    if os.path.dirname(path) != root:
        return None  # a symlink pointing elsewhere
    try:
        info = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return StaticFile(path, info.st_size, content_type(name))
