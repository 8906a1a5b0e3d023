"""CPU lists: parsing, formatting, refusing CPUs this machine lacks."""

from __future__ import annotations

import pytest

from harness.affinity import format_cpu_list, parse_cpu_list
from model.errors import UserError


def test_parse_and_format_round_trip() -> None:
    assert parse_cpu_list("0") == [0]
    assert format_cpu_list([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


@pytest.mark.parametrize("spec", ["x", "1-0", "", "0,,1"])
def test_malformed_cpu_list_is_a_user_error(spec: str) -> None:
    with pytest.raises(UserError, match="is not like"):
        parse_cpu_list(spec)


def test_cpu_the_machine_lacks_is_named() -> None:
    with pytest.raises(UserError, match="CPU 4096 is not available here"):
        parse_cpu_list("4096")
