"""Certificates with no setup, and the one TLS look the harness takes at a server.

`trustme` (a well-kept library over `cryptography`) makes a throwaway CA and a loopback
server certificate per run; nothing here writes ASN.1. They live in a private (0700)
temporary directory that the run removes; a user's own certificate (`--tls-cert/--tls-key`)
is checked to parse and to match its key instead.

`probe_tls` is one client connection (Python's `ssl`, trusting the run's CA) right after
a server starts: what it negotiated (version, cipher, key type, ALPN) goes into the case.
`h2c_answers` sends the HTTP/2 connection preface in the clear and waits for SETTINGS.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model.errors import UserError
from servers import scratch
from servers.contract import ALPN_FOR_PROTOCOL, TLS_PROTOCOLS, TLS_SERVER_NAMES

PROBE_TIMEOUT_S = 2.0
# RFC 9113 §3.4: the client preface, then an empty SETTINGS frame (9-byte frame header:
# length 0, type 0x4, flags 0, stream 0)
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
H2_EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
H2_FRAME_SETTINGS = 0x4


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
    holder = scratch.temporary_directory("tls")
    return holder, make_certificates(Path(holder.name))


@contextlib.contextmanager
def run_certificates(
    protocols: Sequence[str], tls_cert: Path | None = None, tls_key: Path | None = None
) -> Iterator[Certificates | None]:
    """The certificates a run (or a verify, a bench) of `protocols` serves: None when none
    is a TLS protocol; the user's own (`--tls-cert/--tls-key`, checked); else a throwaway
    CA's in a private temporary directory, removed when the block ends."""
    if not any(protocol in TLS_PROTOCOLS for protocol in protocols):
        yield None
    elif tls_cert is not None and tls_key is not None:
        yield user_certificates(str(tls_cert), str(tls_key))
    else:
        holder, certificates = temporary_certificates()
        with holder:
            yield certificates


def key_type(cert_path: Path) -> str:
    """The certificate's public key in words: `ECDSA P-256`, `RSA 2048`, `Ed25519`."""
    from cryptography import x509

    return _public_key_words(x509.load_pem_x509_certificate(cert_path.read_bytes()))


def peer_key_type(der: bytes) -> str:
    """`key_type` of the certificate a server presented (DER, as `ssl` gives it)."""
    from cryptography import x509

    return _public_key_words(x509.load_der_x509_certificate(der))


def _public_key_words(certificate: Any) -> str:
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

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
    """A user's `--tls-cert/--tls-key`: one clear line when either is missing, does not
    parse as PEM, or they do not match (ssl loads them as every Python server will)."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    cert_path, key_path = Path(cert), Path(key)
    for label, path in (("--tls-cert", cert_path), ("--tls-key", key_path)):
        if not path.is_file():
            raise UserError(f"{label} {path}: no such file")
    try:
        x509.load_pem_x509_certificate(cert_path.read_bytes())
    except ValueError:
        raise UserError(f"--tls-cert {cert_path}: not a PEM certificate") from None
    try:
        load_pem_private_key(key_path.read_bytes(), password=None)
    except (ValueError, TypeError):  # TypeError: the key is encrypted
        raise UserError(f"--tls-key {key_path}: not an unencrypted PEM private key") from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(str(cert_path), str(key_path))
    except ssl.SSLError as error:
        reason = error.reason or str(error)
        raise UserError(
            f"--tls-cert {cert_path} with --tls-key {key_path}: {reason.lower().replace('_', ' ')} "
            "(a PEM certificate and the PEM private key it was issued for)"
        ) from None
    return Certificates(cert_path, key_path, None, key_type(cert_path))


def client_context(certificates: Certificates, protocol: str) -> ssl.SSLContext:
    """A client context for `protocol` that trusts the run's CA (a user's own certificate:
    that certificate itself, its host name unchecked) and offers exactly its ALPN."""
    context = ssl.create_default_context(cafile=str(certificates.ca_path or certificates.cert_path))
    if certificates.ca_path is None:  # a user's certificate need not name 127.0.0.1
        context.check_hostname = False
        context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    context.set_alpn_protocols([ALPN_FOR_PROTOCOL[protocol]])
    return context


def probe_tls(
    host: str,
    port: int,
    protocol: str,
    certificates: Certificates,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> dict[str, Any]:
    """One TLS handshake with the server: what it negotiated, as a case records it
    (`version`, `cipher`, `key_type`, `alpn`). ssl.SSLError or OSError when it fails."""
    if protocol not in TLS_PROTOCOLS:
        raise ValueError(f"protocol {protocol} is not a TLS protocol")
    context = client_context(certificates, protocol)
    with (
        socket.create_connection((host, port), timeout=timeout_s) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        cipher = tls.cipher()
        der = tls.getpeercert(binary_form=True)
        return {
            "version": tls.version(),
            "cipher": cipher[0] if cipher else None,
            "key_type": peer_key_type(der) if der else certificates.key_type,
            "alpn": tls.selected_alpn_protocol(),
        }


def tls_handshakes(host: str, port: int, protocol: str, certificates: Certificates) -> bool:
    """Whether a TLS handshake trusting the run's CA completes on `port` (readiness)."""
    try:
        probe_tls(host, port, protocol, certificates, timeout_s=1.0)
    except (OSError, ssl.SSLError, ValueError):
        return False
    return True


def h2c_answers(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """Whether the server answers the cleartext HTTP/2 preface with a SETTINGS frame."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(H2_PREFACE + H2_EMPTY_SETTINGS)
            header = b""
            while len(header) < 9:
                chunk = sock.recv(9 - len(header))
                if not chunk:
                    return False
                header += chunk
    except OSError:
        return False
    return header[3] == H2_FRAME_SETTINGS
