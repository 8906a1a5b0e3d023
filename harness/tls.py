"""Certificates with no setup: a throwaway CA and a loopback server certificate per run.

`trustme` (a well-kept library over `cryptography`) makes them; nothing here writes ASN.1.
They live in a private (0700) temporary directory that the run removes; a user's own
certificate (`--tls-cert/--tls-key`) is checked to parse and to match its key instead.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from model.errors import UserError
from servers.contract import TLS_SERVER_NAMES


@dataclass(frozen=True)
class Certificates:
    """The files a TLS case needs: what the server serves and what clients trust."""

    cert_path: Path  # the server's PEM certificate chain
    key_path: Path  # its PEM private key
    ca_path: Path | None  # the CA clients trust (None: a user's own certificate, trusted as is)
    key_type: str  # "ECDSA P-256", "RSA 2048", ...


def make_certificates(directory: Path) -> Certificates:
    """A new CA and a server certificate for TLS_SERVER_NAMES, written into `directory`
    (created 0700 if needed); the key files are 0600."""
    import trustme

    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    ca = trustme.CA()
    server = ca.issue_cert(*TLS_SERVER_NAMES)
    ca_path = directory / "ca.pem"
    cert_path = directory / "server.pem"
    key_path = directory / "server.key"
    ca.cert_pem.write_to_path(str(ca_path))
    server.cert_chain_pems[0].write_to_path(str(cert_path))
    for extra in server.cert_chain_pems[1:]:
        with cert_path.open("ab") as chain:
            chain.write(extra.bytes())
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as key:
        key.write(server.private_key_pem.bytes())
    return Certificates(cert_path, key_path, ca_path, key_type(cert_path))


def temporary_certificates() -> tuple[tempfile.TemporaryDirectory[str], Certificates]:
    """`make_certificates` in a new private temporary directory; the caller removes it."""
    holder = tempfile.TemporaryDirectory(prefix="serverbench-tls-")
    return holder, make_certificates(Path(holder.name))


def key_type(cert_path: Path) -> str:
    """The certificate's public key in words: `ECDSA P-256`, `RSA 2048`, `Ed25519`."""
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

    certificate = x509.load_pem_x509_certificate(cert_path.read_bytes())
    public = certificate.public_key()
    if isinstance(public, ec.EllipticCurvePublicKey):
        names = {"secp256r1": "P-256", "secp384r1": "P-384", "secp521r1": "P-521"}
        return f"ECDSA {names.get(public.curve.name, public.curve.name)}"
    if isinstance(public, rsa.RSAPublicKey):
        return f"RSA {public.key_size}"
    if isinstance(public, ed25519.Ed25519PublicKey):
        return "Ed25519"
    return type(public).__name__


def user_certificates(cert: str, key: str) -> Certificates:
    """A user's `--tls-cert/--tls-key`: one clear line when either does not parse or they
    do not match (ssl loads them as every Python server will)."""
    cert_path, key_path = Path(cert), Path(key)
    for label, path in (("--tls-cert", cert_path), ("--tls-key", key_path)):
        if not path.is_file():
            raise UserError(f"{label} {path}: no such file")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(str(cert_path), str(key_path))
    except ssl.SSLError as error:
        reason = error.reason or str(error)
        raise UserError(
            f"--tls-cert {cert_path} with --tls-key {key_path}: {reason} "
            "(a PEM certificate and the PEM private key it was issued for)"
        ) from None
    try:
        kind = key_type(cert_path)
    except ValueError as error:
        raise UserError(f"--tls-cert {cert_path}: {error}") from None
    return Certificates(cert_path, key_path, None, kind)
