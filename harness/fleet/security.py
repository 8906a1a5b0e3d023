"""Mutual TLS for a fleet: its own CA, a certificate per member, Dask's `Security` from them.

Dask's TLS (`distributed.security.Security`) verifies both ends against one CA
(`ssl.CERT_REQUIRED` on either side, hostnames not checked: a fleet's members are known by
the CA that signed them). So a fleet is exactly the holders of a certificate from its CA:
a client or worker with no certificate, or one from another CA, is refused in the
handshake, and the harness, connecting with its own, knows the scheduler that answers is
its fleet's (no one else holds a certificate that CA signed). `require_encryption=True`
refuses a plain `tcp://` peer on every member.

`trustme` (over `cryptography`) makes and reloads the CA; nothing here writes ASN.1. The
CA's key and each member's key are 0600 files in a 0700 directory: only the user who made
the fleet (root for a local fleet) can read them, so no other user of the machine can join
it or submit work to it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model.errors import UserError

CA_CERT = "ca.pem"
CA_KEY = "ca.key"
VERSION_UNIT_PREFIX = "harness "  # a load host's certificate: OU = "harness <version>"
HARNESS_IDENTITY = "harness"  # the certificate the harness connects with, as a Dask client
SCHEDULER_IDENTITY = "scheduler"
# a member's name becomes file names (and a worker's name a folder under raw/)
_MEMBER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


@dataclass(frozen=True)
class FleetIdentity:
    """The three files one fleet member presents: the CA it trusts, its certificate, its key."""

    ca_path: Path
    cert_path: Path
    key_path: Path

    def security(self) -> Any:
        """Dask's Security for this member: mutual TLS, encryption required."""
        from distributed.security import Security

        return Security(
            tls_ca_file=str(self.ca_path),
            tls_client_cert=str(self.cert_path),
            tls_client_key=str(self.key_path),
            tls_scheduler_cert=str(self.cert_path),
            tls_scheduler_key=str(self.key_path),
            tls_worker_cert=str(self.cert_path),
            tls_worker_key=str(self.key_path),
            require_encryption=True,
        )

    def cli_options(self) -> list[str]:
        """The same identity as `dask scheduler`/`dask worker` options."""
        return [
            "--tls-ca-file", str(self.ca_path),
            "--tls-cert", str(self.cert_path),
            "--tls-key", str(self.key_path),
        ]  # fmt: skip


def check_member_name(name: str, what: str = "fleet member") -> str:
    """`name` when it is one safe path component (letters, digits, '.', '_', '-', not
    starting with '.' or '-', ≤ 63 characters); UserError otherwise."""
    if not _MEMBER_NAME.fullmatch(name):
        raise UserError(
            f"{what} name {name!r} is not a plain name (letters, digits, '.', '_', '-'; "
            "at most 63; starting with a letter or digit)"
        )
    return name


def check_file_name(name: str, what: str) -> str:
    """`name` when it is one plain file name (as check_member_name, ≤ 200 characters)."""
    if not _FILE_NAME.fullmatch(name):
        raise UserError(f"{what} {name!r} is not a plain file name: not written")
    return name


def private_directory(path: Path) -> Path:
    """`path` created (or tightened) to 0700, owned by us; UserError if another user owns it."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_uid != os.geteuid():
        raise UserError(f"{path} belongs to uid {info.st_uid}, not to this user: not used")
    os.chmod(path, 0o700)
    return path


def _write_private(path: Path, data: bytes) -> None:
    """A new 0600 file (an existing one is replaced, never written through)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(data)


def make_ca(directory: Path) -> Any:
    """A new fleet CA in `directory` (0700): ca.pem and its 0600 key ca.key."""
    import trustme

    private_directory(directory)
    ca = trustme.CA(organization_name="serverbench fleet")
    _write_private(directory / CA_CERT, ca.cert_pem.bytes())
    _write_private(directory / CA_KEY, ca.private_key_pem.bytes())
    os.chmod(directory / CA_CERT, 0o644)  # the CA certificate is public; its key is not
    return ca


def load_ca(directory: Path) -> Any:
    """The fleet CA kept in `directory`; UserError naming what is missing or broken."""
    import trustme

    cert, key = directory / CA_CERT, directory / CA_KEY
    if not cert.is_file() or not key.is_file():
        raise UserError(f"no fleet CA in {directory} ({CA_CERT} and {CA_KEY})")
    try:
        return trustme.CA.from_pem(cert.read_bytes(), key.read_bytes())
    except (ValueError, TypeError) as error:
        raise UserError(f"the fleet CA in {directory} does not load: {error}") from None


def load_or_make_ca(directory: Path) -> Any:
    """The CA in `directory`, made there first if there is none."""
    if (directory / CA_CERT).is_file():
        private_directory(directory)
        return load_ca(directory)
    return make_ca(directory)


def version_unit(harness_version: str) -> str:
    """The organizational unit a load host's certificate carries: the harness it runs."""
    return f"{VERSION_UNIT_PREFIX}{harness_version}"


def issue(
    ca: Any, name: str, directory: Path, *hostnames: str, harness_version: str | None = None
) -> FleetIdentity:
    """A certificate for member `name` (its common name; the host names or addresses it is
    known by as its alternative names) signed by `ca`: `directory`/<name>.pem and its 0600
    key <name>.key, with the CA beside. `harness_version`: the harness a load host is
    certified to run (the organizational unit, `harness <version>`), checked against what
    the host reports of itself (harness.fleet.client)."""
    check_member_name(name)
    private_directory(directory)
    unit = version_unit(harness_version) if harness_version else None
    leaf = ca.issue_cert(*(hostnames or (name,)), common_name=name, organization_unit_name=unit)
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    _write_private(cert_path, b"".join(pem.bytes() for pem in leaf.cert_chain_pems))
    _write_private(key_path, leaf.private_key_pem.bytes())
    ca_path = directory / CA_CERT
    if not ca_path.is_file():
        _write_private(ca_path, ca.cert_pem.bytes())
        os.chmod(ca_path, 0o644)
    return FleetIdentity(ca_path, cert_path, key_path)


def user_identity(ca: str | None, cert: str | None, key: str | None) -> FleetIdentity:
    """`--fleet-ca/--fleet-cert/--fleet-key`, all three given and readable; UserError else."""
    given = {"--fleet-ca": ca, "--fleet-cert": cert, "--fleet-key": key}
    missing = [option for option, value in given.items() if not value]
    if missing:
        raise UserError(
            f"--fleet tls:// needs {', '.join(missing)} (`harness fleet cert harness` "
            "issues the harness's own from the fleet's CA)"
        )
    paths = {option: Path(str(value)) for option, value in given.items()}
    for option, path in paths.items():
        if not path.is_file():
            raise UserError(f"{option} {path}: no such file")
    identity = FleetIdentity(paths["--fleet-ca"], paths["--fleet-cert"], paths["--fleet-key"])
    check_identity(identity)
    return identity


def check_identity(identity: FleetIdentity) -> None:
    """The certificate parses, matches its key and is signed by the CA; UserError else."""
    import ssl

    try:
        context = ssl.create_default_context(cafile=str(identity.ca_path))
        context.load_cert_chain(str(identity.cert_path), str(identity.key_path))
    except (ssl.SSLError, OSError, ValueError) as error:
        raise UserError(
            f"fleet certificate {identity.cert_path} with key {identity.key_path} and CA "
            f"{identity.ca_path} does not load: {error}"
        ) from None
    if not _signed_by(identity.cert_path, identity.ca_path):
        raise UserError(
            f"fleet certificate {identity.cert_path} is not signed by the CA {identity.ca_path}"
        )


def _signed_by(cert_path: Path, ca_path: Path) -> bool:
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature

    leaf = x509.load_pem_x509_certificate(cert_path.read_bytes())
    ca = x509.load_pem_x509_certificate(ca_path.read_bytes())
    try:
        leaf.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def common_name(cert_path: Path) -> str:
    """The subject's common name of a PEM certificate (a fleet member's identity)."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    leaf = x509.load_pem_x509_certificate(cert_path.read_bytes())
    names = leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""
