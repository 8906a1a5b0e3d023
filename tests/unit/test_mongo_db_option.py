"""`--mongo-db`: the database a server writes its records to and reads
GridFS from, so that the harness can give every run a database of its own."""

from __future__ import annotations

import re

import pytest

from harness.services.ferretdb import new_database_name
from servers.contract import GRIDFS_DATABASE, MONGO_DB_PATTERN, ServerOptions


def test_the_default_is_the_harness_database() -> None:
    assert ServerOptions("aiohttp").mongo_db == GRIDFS_DATABASE == "harness"


@pytest.mark.parametrize("name", ["a.b", "a/b", "", "x" * 64, "a b", "$x", "a\0b"])
def test_a_name_mongodb_would_read_differently_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="mongo_db"):
        ServerOptions("aiohttp", mongo_db=name)


def test_run_database_names_are_valid_and_distinct() -> None:
    names = {new_database_name() for _ in range(100)}
    assert len(names) == 100
    assert all(re.fullmatch(MONGO_DB_PATTERN, n) and n.startswith("harness_") for n in names)
