"""Secrets a run must never write down: a MongoDB URL's password, a command's `{secret:NAME}`.

Pure functions and one frozen type, the standard library only. `redact_url` hides the
password (and password-like query parameters) of one URL; a `Redactor` knows a run's
secret strings and hides each wherever it appears, in text or in a JSON-able structure
(run.json before it is written, an error message before it is printed).

A secret shorter than MIN_SECRET_CHARS is too short to hide everywhere it occurs (a
password `ab` would rewrite every `ab` of a run); such a URL password is hidden only where
it stands as one (`:ab@`), and `{secret:NAME}` refuses such a value (harness.secrets).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

MASK = "***"
MIN_SECRET_CHARS = 4
# query parameters whose value is a credential (compared lowercased, as substrings)
SECRET_QUERY_WORDS = ("password", "secret", "token")


def _secret_query_key(key: str) -> bool:
    return any(word in key.lower() for word in SECRET_QUERY_WORDS)


def _split_userinfo(url: str) -> tuple[str, str, str, str] | None:
    """(scheme://, user, password, rest after @) of a URL with a password, else None."""
    scheme, separator, remainder = url.partition("://")
    if not separator:
        return None
    authority_end = min((i for i in (remainder.find("/"), remainder.find("?")) if i >= 0),
                        default=len(remainder))  # fmt: skip
    userinfo, at, _ = remainder[:authority_end].rpartition("@")
    if not at:
        return None
    user, colon, password = userinfo.partition(":")
    if not colon:
        return None
    return scheme + "://", user, password, remainder[len(userinfo) + 1 :]


def redact_url(url: str) -> str:
    """`url` with its password replaced by `***` (user and hosts kept), and the value of
    each password-like query parameter (`password`, `secret`, `token`) likewise."""
    parts = _split_userinfo(url)
    if parts is not None:
        scheme, user, _, rest = parts
        url = f"{scheme}{user}:{MASK}@{rest}"
    base, question, query = url.partition("?")
    if not question:
        return url
    fields = []
    for field in query.split("&"):
        key, equals, _ = field.partition("=")
        fields.append(f"{key}={MASK}" if equals and _secret_query_key(unquote(key)) else field)
    return base + "?" + "&".join(fields)


def url_secrets(url: str) -> tuple[str, ...]:
    """The secret strings of `url`: its password (as written and percent-decoded) and the
    values of its password-like query parameters; empty when it has none."""
    found: list[str] = []
    parts = _split_userinfo(url)
    if parts is not None and parts[2]:
        found += [parts[2], unquote(parts[2])]
    query = urlsplit(url).query if "://" in url else ""
    found += [value for key, value in parse_qsl(query) if _secret_query_key(key) and value]
    return tuple(dict.fromkeys(found))


@dataclass(frozen=True)
class Redactor:
    """Hides a run's secrets: the URLs given (each replaced by its `redact_url`) and the
    secret strings (each replaced by `***`; one shorter than MIN_SECRET_CHARS only where it
    stands as a URL's password, `:…@`)."""

    secrets: tuple[str, ...] = ()
    urls: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if any(not secret for secret in self.secrets):
            raise ValueError("a secret is an empty string: nothing to hide")

    @property
    def hides_nothing(self) -> bool:
        """Whether it knows no secret (its `text` and `value` change nothing)."""
        return not (self.secrets or self.urls)

    def with_url(self, url: str) -> Redactor:
        """This redactor, knowing `url`'s secrets too (a URL without any: unchanged)."""
        if redact_url(url) == url:
            return self
        return Redactor(
            tuple(dict.fromkeys([*self.secrets, *url_secrets(url)])),
            tuple(dict.fromkeys([*self.urls, url])),
        )

    def with_secret(self, secret: str) -> Redactor:
        """This redactor, knowing `secret` too."""
        return Redactor(tuple(dict.fromkeys([*self.secrets, secret])), self.urls)

    def _replacements(self) -> list[tuple[str, str]]:
        pairs = [(url, redact_url(url)) for url in self.urls]
        for secret in self.secrets:
            pairs.append((f":{secret}@", f":{MASK}@"))
            if len(secret) >= MIN_SECRET_CHARS:
                pairs.append((secret, MASK))
        return sorted(pairs, key=lambda pair: len(pair[0]), reverse=True)  # longest first

    def text(self, text: str) -> str:
        """`text` with every secret hidden."""
        for secret, shown in self._replacements():
            if secret in text:
                text = text.replace(secret, shown)
        return text

    def value(self, value: Any) -> Any:
        """A JSON-able `value` (dicts, lists, tuples, strings, numbers) with every secret
        hidden in its strings, keys included; other values unchanged."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.value(key): self.value(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.value(item) for item in value)
        return value
