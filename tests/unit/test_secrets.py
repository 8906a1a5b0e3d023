"""Secrets: a MongoDB URL's password and a command's `{secret:NAME}` are
hidden in all the harness writes, and the URL goes to servers in their environment."""

from __future__ import annotations

import re

import pytest

from harness.secrets import SecretField, keep_url, redact, secret_value, server_environment
from harness.server_process import fill_command, placeholder_values
from harness.services.ferretdb import own_database
from harness.services.sink_store import SinkStore
from model.errors import UserError
from model.secrets import MASK, Redactor, redact_url, url_secrets
from servers import command_placeholders
from servers.contract import MONGO_URL_ENV
from tests.helpers import closed_port

URL = "mongodb://user:hunter2@db.example:27017/?authSource=admin"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (URL, "mongodb://user:***@db.example:27017/?authSource=admin"),
        ("mongodb://u:p%40ss@h1:1,h2:2/db", "mongodb://u:***@h1:1,h2:2/db"),
        ("mongodb+srv://u:pw@cluster.example/", "mongodb+srv://u:***@cluster.example/"),
        ("mongodb://127.0.0.1:27017/", "mongodb://127.0.0.1:27017/"),  # nothing to hide
        ("mongodb://user@h/", "mongodb://user@h/"),  # a user, no password
        ("mongodb://h/?password=pw&w=1", "mongodb://h/?password=***&w=1"),
        ("mongodb://h/?authMechanismProperties=x&apiToken=t", "mongodb://h/?authMechanismProperties=x&apiToken=***"),
    ],
)  # fmt: skip
def test_redact_url_hides_the_password_and_keeps_user_and_hosts(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_url_secrets_are_the_password_as_written_and_decoded() -> None:
    assert url_secrets("mongodb://u:p%40ss@h/?token=tok") == ("p%40ss", "p@ss", "tok")
    assert url_secrets("mongodb://127.0.0.1:27017/") == ()


def test_a_redactor_hides_its_secrets_in_text_and_structures() -> None:
    redactor = Redactor().with_url(URL).with_secret("s3cr3t-token")
    data = {
        "url": URL,
        "errors": ["auth failed for hunter2", ("token s3cr3t-token",)],
        "s3cr3t-token": 3,
        "n": 1.5,
    }
    assert redactor.value(data) == {
        "url": redact_url(URL),
        "errors": [f"auth failed for {MASK}", (f"token {MASK}",)],
        MASK: 3,
        "n": 1.5,
    }


def test_a_short_password_is_hidden_only_where_it_stands_as_one() -> None:
    """`ab` hidden everywhere would rewrite every `ab` of a run (`tab`, `table`)."""
    redactor = Redactor().with_url("mongodb://u:ab@h/")
    assert redactor.text("mongodb://u:ab@h/ a table, and :ab@ again") == (
        f"mongodb://u:{MASK}@h/ a table, and :{MASK}@ again"
    )


def test_a_url_without_a_password_teaches_nothing() -> None:
    assert Redactor().with_url("mongodb://127.0.0.1:1/").hides_nothing


def test_server_environment_takes_the_url_off_the_command_line() -> None:
    args = ["--mongo-url", URL, "--mongo-w", "0", "--mongo-url=mongodb://u:last1@h/"]
    rest, environment = server_environment(args)
    assert rest == ["--mongo-w", "0"]
    assert environment == {MONGO_URL_ENV: "mongodb://u:last1@h/"}  # the last one counts
    assert "last1" not in redact("mongodb://u:last1@h/")  # and it was learned


def test_a_secret_placeholder_is_filled_from_the_environment_and_learned() -> None:
    values = placeholder_values(host="h", port=1, sink="empty", workers=1)
    values["secret"] = SecretField({"API_TOKEN": "tok-12345"})
    assert fill_command("app --token={secret:API_TOKEN}", values) == ["app", "--token=tok-12345"]
    assert redact("said tok-12345") == f"said {MASK}"


def test_a_secret_placeholder_is_checked() -> None:
    with pytest.raises(ValueError, match=re.escape("write {secret:NAME}")):
        command_placeholders("app {secret}")
    with pytest.raises(ValueError, match=re.escape("not {secret:1x}")):
        command_placeholders("app {secret:1x}")
    assert "secret" in command_placeholders("app {secret:TOKEN}")
    with pytest.raises(UserError, match="TOKEN is not set"):
        secret_value("TOKEN", {})
    with pytest.raises(UserError, match="fewer than 4"):
        secret_value("TOKEN", {"TOKEN": "abc"})


def test_an_unreachable_mongodb_is_named_without_its_password() -> None:
    """Found: `MongoDB at mongodb://user:pw@… is not reachable` printed the password."""
    url = f"mongodb://user:pw-unreachable@127.0.0.1:{closed_port()}/"
    with pytest.raises(UserError, match="not reachable") as raised:
        SinkStore("mongo", mongo_url=url)
    assert "pw-unreachable" not in str(raised.value)
    assert "user:***@127.0.0.1" in str(raised.value)
    with pytest.raises(UserError, match="not reachable") as raised, own_database(url, "x"):
        pass
    assert "pw-unreachable" not in str(raised.value)


def test_keep_url_is_a_typer_callback() -> None:
    assert keep_url(None) is None
    assert keep_url(URL) == URL
    assert "hunter2" not in redact(f"at {URL}")


def test_the_harness_reads_the_url_from_the_environment_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SERVERBENCH_MONGO_URL is --mongo-url: a choice that conflicts with it is refused as
    the flag's would be."""
    from typer.testing import CliRunner

    from harness.cli import app

    monkeypatch.setenv(MONGO_URL_ENV, "mongodb://user:hunter2-env@127.0.0.1:1/")
    result = CliRunner().invoke(
        app, ["compare", "--frameworks", "aiohttp", "--mongo-backend", "sqlite"]
    )
    assert isinstance(result.exception, UserError), result.output
    assert "--mongo-url names your own" in str(result.exception)
