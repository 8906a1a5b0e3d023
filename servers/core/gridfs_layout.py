"""How the harness lays out the file set in GridFS, so every server reads it by `_id`.

The documents follow the GridFS spec (bucket `fs`: `fs.files` with `length`, `chunkSize`,
`uploadDate`, `filename`, `metadata.contentType`; `fs.chunks` with `files_id`, `n`, `data`,
and the spec's indexes), so any GridFS reader can open them. The ids are chosen: a file's
`_id` is its name and chunk n's `_id` is `"<name>#<n>"`.

Why: FerretDB v1.24's SQLite backend pushes down only `_id` equality. A standard GridFS
read (`fs.chunks` by `files_id`, sorted by `n`) scans every chunk of the bucket — measured
here at 380 ms per file with 1,000 files loaded, 86 s for 200 reads — while a read by
`_id` took 4 ms. Servers therefore read `fs.files` by `_id`, then each chunk by `_id`;
with a real MongoDB the same reads use the `_id` index.

`read_steps` says which documents a read takes and judges them, sans I/O: every runtime
drives it with its own database client (synchronous, on a thread or with `await`).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from servers import contract
from servers.core import static
from servers.core.backends import BackendUnavailable, StoredFile

FILES_COLLECTION = f"{contract.GRIDFS_BUCKET}.files"
CHUNKS_COLLECTION = f"{contract.GRIDFS_BUCKET}.chunks"
CHUNK_BYTES = 255 * 1024  # the GridFS default chunk size


def chunk_id(name: str, n: int) -> str:
    return f"{name}#{n}"


def chunk_ids(name: str, length_bytes: int, chunk_bytes: int) -> list[str]:
    """The `_id`s of every chunk of a file of `length_bytes`, in order."""
    count = max(1, -(-length_bytes // chunk_bytes)) if length_bytes else 0
    return [chunk_id(name, n) for n in range(count)]


# The fields each read asks for (None: the whole document).
FIELDS: dict[str, dict[str, bool] | None] = {
    FILES_COLLECTION: None,
    CHUNKS_COLLECTION: {"data": True},
}

# (collection, _id) to read; the document found (or None) is sent back.
ReadSteps = Generator[tuple[str, str], Any, StoredFile | None]


def read_steps(name: str) -> ReadSteps:
    """The reads of the file `name` (a `static.valid_name`), one document at a time.

    Yields (collection, `_id`) and is sent the document found or None; returns the file,
    or None when GridFS has none. A malformed file or a missing chunk raises
    BackendUnavailable (503), as the database's own errors do in the runtime.
    """
    document = yield FILES_COLLECTION, name
    if document is None:
        return None
    try:
        length_bytes = int(document["length"])
        ids = chunk_ids(name, length_bytes, int(document["chunkSize"]))
    except (KeyError, TypeError, ValueError) as error:
        raise BackendUnavailable(f"GridFS: bad fs.files document {name!r}") from error
    parts: list[bytes] = []
    for id_ in ids:  # one chunk for the ≤ 64 KiB file set; several are read in turn
        chunk = yield CHUNKS_COLLECTION, id_
        if chunk is None or not isinstance(chunk.get("data"), bytes):
            raise BackendUnavailable(f"GridFS: chunk {id_!r} is missing")
        parts.append(chunk["data"])
    data = parts[0] if len(parts) == 1 else b"".join(parts)  # no copy for one chunk
    if len(data) != length_bytes:
        raise BackendUnavailable(f"GridFS: file {name!r} has {len(data)} of {length_bytes} B")
    metadata = document.get("metadata") or {}
    content_type = metadata.get("contentType") if isinstance(metadata, dict) else None
    return StoredFile(data, content_type or static.content_type(name))


def read_sync(name: str, find_one: Any) -> StoredFile | None:
    """`read_steps` driven by a blocking `find_one(collection, _id)` (green, a thread)."""
    steps = read_steps(name)
    try:
        wanted = next(steps)
        while True:
            wanted = steps.send(find_one(*wanted))
    except StopIteration as done:
        return done.value
