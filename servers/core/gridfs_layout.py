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
"""

from __future__ import annotations

from servers import contract

FILES_COLLECTION = f"{contract.GRIDFS_BUCKET}.files"
CHUNKS_COLLECTION = f"{contract.GRIDFS_BUCKET}.chunks"
CHUNK_BYTES = 255 * 1024  # the GridFS default chunk size


def chunk_id(name: str, n: int) -> str:
    return f"{name}#{n}"


def chunk_ids(name: str, length_bytes: int, chunk_bytes: int) -> list[str]:
    """The `_id`s of every chunk of a file of `length_bytes`, in order."""
    count = max(1, -(-length_bytes // chunk_bytes)) if length_bytes else 0
    return [chunk_id(name, n) for n in range(count)]
