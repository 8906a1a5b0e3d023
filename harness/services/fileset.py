"""The deterministic image-like file set of the autobench study (tests 3–4), on disk and in GridFS.

`ensure_fileset(count, seed)` writes `count` files named `img-00000.jpg` … with sizes drawn
log-uniformly between `MIN_FILE_BYTES` and `MAX_FILE_BYTES` and a real JPEG/PNG/GIF
signature, all from `random.Random(seed)`: the same seed gives the same bytes on every
machine. A finished set is reused (its manifest records what made it). `load_gridfs` puts
the same files into GridFS (database `harness`, bucket `fs`) under the same names.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model.errors import UserError
from model.files import cache_dir
from model.secrets import redact_url
from servers import contract, scratch
from servers.core import gridfs_layout, static

DEFAULT_FILE_COUNT = 10_000
DEFAULT_SEED = 4  # the random generator's seed: the same seed, the same bytes
MIN_FILE_BYTES = 1024
MAX_FILE_BYTES = 64 * 1024
FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
# (extension, signature at the start, trailer at the end, share of the set)
IMAGE_KINDS = (
    (".jpg", b"\xff\xd8\xff\xe0\x00\x10JFIF\x00", b"\xff\xd9", 0.7),
    (".png", b"\x89PNG\r\n\x1a\n", b"IEND\xaeB`\x82", 0.2),
    (".gif", b"GIF89a", b"\x3b", 0.1),
)

Progress = Callable[[int, int], None]  # (done, total)


@dataclass(frozen=True)
class FileSet:
    """A generated file set: its directory and its files (name, size, sha256)."""

    directory: Path
    seed: int
    files: tuple[tuple[str, int, str], ...]

    @property
    def names(self) -> list[str]:
        return [name for name, _, _ in self.files]

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size, _ in self.files)

    def sizes(self) -> dict[str, int]:
        return {name: size for name, size, _ in self.files}

    def describe(self) -> dict[str, Any]:
        """What a result records about the file set."""
        sizes = sorted(size for _, size, _ in self.files)
        return {
            "directory": str(self.directory),
            "seed": self.seed,
            "count": len(sizes),
            "total_bytes": sum(sizes),
            "median_bytes": sizes[len(sizes) // 2] if sizes else 0,
            "min_bytes": sizes[0] if sizes else 0,
            "max_bytes": sizes[-1] if sizes else 0,
        }


def file_bytes(rng: random.Random, index: int) -> tuple[str, bytes]:
    """The name and content of file `index`, drawn from `rng` (call in index order)."""
    pick = rng.random()
    kind = IMAGE_KINDS[-1]
    for candidate in IMAGE_KINDS:
        if pick < candidate[3]:
            kind = candidate
            break
        pick -= candidate[3]
    extension, signature, trailer, _ = kind
    log_size = rng.uniform(math.log(MIN_FILE_BYTES), math.log(MAX_FILE_BYTES))
    size = int(math.exp(log_size))
    body = rng.randbytes(size - len(signature) - len(trailer))
    return f"img-{index:05d}{extension}", signature + body + trailer


def default_directory(count: int, seed: int) -> Path:
    return cache_dir() / f"files-{count}-seed{seed}"


def ensure_fileset(
    count: int = DEFAULT_FILE_COUNT,
    seed: int = DEFAULT_SEED,
    directory: Path | None = None,
    progress: Progress | None = None,
) -> FileSet:
    """The file set in `directory` (default: the user's cache), generated when missing."""
    if count < 1:
        raise UserError(f"a file set needs at least one file, not {count}")
    directory = directory or default_directory(count, seed)
    manifest = directory / MANIFEST_NAME
    try:
        known = json.loads(manifest.read_text())
        if (known["version"], known["seed"], len(known["files"])) == (FORMAT_VERSION, seed, count):
            return FileSet(directory, seed, tuple(tuple(f) for f in known["files"]))
    except (OSError, ValueError, KeyError):
        pass
    # written beside its place under a name of this process's (servers.scratch): a
    # generation killed half-way is listed by `harness doctor`, removed by `harness clean`
    shutil.rmtree(directory.with_name(directory.name + ".partial"), ignore_errors=True)  # old
    directory.parent.mkdir(parents=True, exist_ok=True)
    partial = scratch.mkdtemp("files", directory.parent)
    partial.chmod(0o755)  # as a plain mkdir makes it: the servers' workers read it
    rng = random.Random(seed)
    files = []
    for index in range(count):
        name, content = file_bytes(rng, index)
        (partial / name).write_bytes(content)
        files.append((name, len(content), hashlib.sha256(content).hexdigest()))
        if progress and (index % 100 == 99 or index == count - 1):
            progress(index + 1, count)
    (partial / MANIFEST_NAME).write_text(
        json.dumps({"version": FORMAT_VERSION, "seed": seed, "files": files})
    )
    shutil.rmtree(directory, ignore_errors=True)
    partial.rename(directory)  # a set is either whole or absent
    return FileSet(directory, seed, tuple(tuple(f) for f in files))


GRIDFS_MARKER = "harness_fileset"  # a document naming the loaded set, beside the bucket
# How the set is laid out in GridFS: in the marker, so a database holding an older layout
# (names chosen as `_id`s, before the spec's own) is loaded again.
GRIDFS_LAYOUT = "gridfs-spec"
GRIDFS_PROGRESS_FILES = 200  # progress is reported every this many files


def load_gridfs(
    mongo_url: str,
    fileset: FileSet,
    progress: Progress | None = None,
    *,
    database: str = contract.GRIDFS_DATABASE,
) -> int:
    """Put the file set into GridFS (in `database`, the servers' `--mongo-db`) under the
    same names, with pymongo's `gridfs.GridFSBucket` (servers.core.gridfs_layout says what
    it writes); skipped when already loaded.

    Returns how many files were uploaded (0 when the set was there already).
    """
    from gridfs import GridFSBucket
    from pymongo import MongoClient

    client: Any = MongoClient(mongo_url, serverSelectionTimeoutMS=5000)
    try:
        bucket_db = client[database]
        marker = {
            "seed": fileset.seed,
            "count": len(fileset.files),
            "version": FORMAT_VERSION,
            "layout": GRIDFS_LAYOUT,
        }
        try:
            loaded = bucket_db[GRIDFS_MARKER].find_one({"_id": "fileset"}, {"_id": 0})
        except Exception as error:
            raise UserError(
                f"MongoDB at {redact_url(mongo_url)} is not reachable: {error}"
            ) from None
        if loaded == marker:
            return 0
        for name in (GRIDFS_MARKER, gridfs_layout.FILES_COLLECTION,
                     gridfs_layout.CHUNKS_COLLECTION):  # fmt: skip
            bucket_db[name].drop()
        # The bucket creates the spec's indexes (filename, uploadDate; files_id, n) first.
        bucket = GridFSBucket(
            bucket_db, contract.GRIDFS_BUCKET, chunk_size_bytes=gridfs_layout.CHUNK_BYTES
        )
        names = fileset.names
        for index, name in enumerate(names):
            bucket.upload_from_stream(
                name,
                (fileset.directory / name).read_bytes(),
                metadata={gridfs_layout.CONTENT_TYPE_FIELD: static.content_type(name)},
            )
            if progress and (index % GRIDFS_PROGRESS_FILES == GRIDFS_PROGRESS_FILES - 1
                             or index == len(names) - 1):  # fmt: skip
                progress(index + 1, len(names))
        bucket_db[GRIDFS_MARKER].insert_one({"_id": "fileset", **marker})
        return len(names)
    finally:
        client.close()
