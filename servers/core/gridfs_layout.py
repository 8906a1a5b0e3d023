"""GridFS as the spec lays it out, read the standard way by each ecosystem's own reader.

The harness uploads the file set with pymongo's `gridfs.GridFSBucket` (bucket `fs`):
`fs.files` holds one document per file (`_id` an ObjectId, `filename`, `length`,
`chunkSize`, `uploadDate`, `metadata.contentType`) and `fs.chunks` its chunks (`files_id`,
`n`, `data`), with the spec's indexes (`filename, uploadDate` and `files_id, n`). Nothing
is chosen by the harness, so any GridFS client reads what it wrote.

Every server reads a file the standard way, through its ecosystem's GridFS reader: the
newest `fs.files` document with that `filename`, then its chunks by `files_id`, sorted by
`n` (pymongo's `GridFSBucket` on green sockets and on Twisted's thread pool,
`gridfs.asynchronous.AsyncGridFSBucket` under asyncio, the Node driver's `GridFSBucket`).
Those readers check the chunks (count, sizes) against `length`; a file they find corrupt
is answered 503 like a database error.

Before this layout a file's `_id` was its name and chunk n's `"<name>#<n>"`, read by
`_id`, because FerretDB's SQLite backend pushed down nothing else; a PostgreSQL backend
with GIN indexes serves `filename` and `files_id` lookups as fast (the harness's
`gridfs.one_file_read_ms` says what a run's database took).

This module holds what every Python runtime shares around its reader, sans I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servers import contract
from servers.core import static
from servers.core.backends import StoredFile

FILES_COLLECTION = f"{contract.GRIDFS_BUCKET}.files"
CHUNKS_COLLECTION = f"{contract.GRIDFS_BUCKET}.chunks"
CHUNK_BYTES = 255 * 1024  # the GridFS default chunk size
# What a file's content type is stored under, in its `fs.files` document's `metadata`.
CONTENT_TYPE_FIELD = "contentType"
# A document a reader cannot make sense of: a database that is not GridFS's layout (503).
MALFORMED_ERRORS: tuple[type[Exception], ...] = (KeyError, TypeError, ValueError, AttributeError)


def stored_file(name: str, data: bytes, metadata: Mapping[str, Any] | None) -> StoredFile:
    """The file `name` read back: its bytes, and `metadata.contentType` or else the
    extension's content type (contract.FILE_CONTENT_TYPES)."""
    content_type = metadata.get(CONTENT_TYPE_FIELD) if isinstance(metadata, Mapping) else None
    if not isinstance(content_type, str) or not content_type:
        content_type = static.content_type(name)
    return StoredFile(data, content_type)


def read_sync(bucket: Any, name: str) -> StoredFile | None:
    """The file `name` through a pymongo `gridfs.GridFSBucket` (blocking: a green thread
    or a pool thread), None when the bucket has none. The database's errors (a corrupt
    file among them: `gridfs.errors.CorruptGridFile`) propagate."""
    from gridfs.errors import NoFile

    try:
        grid_out = bucket.open_download_stream_by_name(name)
    except NoFile:
        return None
    return stored_file(name, grid_out.read(), grid_out.metadata)
