"""The file routes' checks (`/files/{name}` on disk, `/gridfs/{name}` in GridFS): exact
bytes with their type and length, and every escape from the directory refused."""

from __future__ import annotations

from pathlib import Path

from harness.services.fileset import FileSet
from harness.verify.endpoint import EndpointOrUrl, endpoint_of, http_client
from harness.verify.failure import excerpt, expect, expect_status
from harness.verify.wire import ESCAPE_BAIT, expect_still_serving, get_status

VERIFY_FILE_COUNT = 20
# Planted beside the files directory, with a symlink to it inside: no reply may contain it.
ESCAPE_BAIT_NAME = "secret.txt"
ESCAPE_LINK_NAME = "link.txt"
# Names tried after /files/ and /gridfs/: escapes, encodings, hidden and empty names.
ESCAPES = (
    "../secret.txt",
    "..%2fsecret.txt",
    "%2e%2e%2fsecret.txt",
    "%2E%2E/secret.txt",
    "..%5csecret.txt",
    ESCAPE_LINK_NAME,  # a symlink inside the directory pointing outside it
    "",
    ".",
    ".hidden",
    "%00secret.txt",
    "..%2f..%2f..%2fetc%2fpasswd",
    "../../etc/passwd",
    "img-99999.jpg",  # well-formed but missing
)


def plant_escape_bait(files_dir: Path) -> None:
    """A secret beside `files_dir` and a symlink to it inside: what the escape checks try."""
    secret = files_dir.parent / ESCAPE_BAIT_NAME
    secret.write_bytes(ESCAPE_BAIT)
    link = files_dir / ESCAPE_LINK_NAME
    if not link.is_symlink():
        link.symlink_to(secret)


def one_of_each_kind(fileset: FileSet) -> list[str]:
    """A file of each extension in the set (jpg, png, gif)."""
    picked: dict[str, str] = {}
    for name in fileset.names:
        picked.setdefault(Path(name).suffix, name)
    return sorted(picked.values())


def check_file_route(server: EndpointOrUrl, fileset: FileSet, prefix: str) -> str:
    """One file of each kind and the first three: exact bytes, Content-Type and -Length."""
    from servers.core import static

    names = sorted({*one_of_each_kind(fileset), *fileset.names[:3]})
    with http_client(server, 10) as client:
        for name in names:
            reply = client.get(prefix + name)
            sent = f"GET {prefix}{name}"
            expect_status(reply.status_code, sent=sent)
            data = (fileset.directory / name).read_bytes()
            expect(
                reply.content == data,
                sent=sent,
                expected=f"the file's {len(data)} bytes, exactly",
                came=f"{len(reply.content)} bytes that differ from the file",
            )
            length = reply.headers.get("content-length")
            expect(
                length == str(len(data)),
                sent=sent,
                expected=f"Content-Length {len(data)}",
                came=f"Content-Length {length!r}",
            )
            kind = reply.headers.get("content-type", "").split(";")[0]
            expect(
                kind == static.content_type(name),
                sent=sent,
                expected=f"Content-Type {static.content_type(name)}",
                came=f"Content-Type {excerpt(kind)}",
            )
    return f"{len(names)} files byte-exact with their type and length"


def check_escapes(server: EndpointOrUrl, fileset: FileSet, prefix: str) -> str:
    """Traversals, encoded slashes, absolute paths, hidden and missing names: all 404, none
    leaks the file planted outside the directory, and the server keeps serving. Over
    HTTP/2 a 400 is a refusal too: nginx refuses a `:path` with an encoded NUL, or one
    that climbs above the root once decoded, as malformed."""
    absolute = str(fileset.directory.parent / ESCAPE_BAIT_NAME)
    targets = [prefix + name for name in ESCAPES]
    targets += [prefix + absolute, prefix + absolute.replace("/", "%2f"), prefix.rstrip("/")]
    h2 = endpoint_of(server).h2  # a :path it deems malformed may be refused 400 (nginx's)
    statuses = []
    for target in targets:
        status = get_status(server, target)
        refused = (404, 400) if h2 else (404,)
        expect(
            status in refused,
            sent=f"GET {target}",
            expected="404 (or 400 over HTTP/2), nothing served" if h2 else "404, nothing served",
            came=f"status {status}",
        )
        statuses.append(status)
    expect_still_serving(server, "the escapes")
    if 400 in statuses:
        return f"{len(targets)} escapes and missing names refused ({statuses.count(400)} as 400)"
    return f"{len(targets)} escapes and missing names 404"
