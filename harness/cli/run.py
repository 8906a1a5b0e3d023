"""`harness run`: one framework through a profile, kept for scripts: `compare --frameworks
NAME` under another name. It takes compare's options, declared once (harness.cli.compare);
`--framework NAME` and `--frameworks NAME` alike."""

from __future__ import annotations

import functools
from typing import Any

from harness.cli.compare import compare_command, run_comparison, run_options
from model.errors import UserError


# compare's signature (its options) and annotations, this command's own name and help
@functools.wraps(compare_command, assigned=("__annotations__",))
def run_command(**params: Any) -> None:
    """One framework through a profile (the same as compare --frameworks NAME)."""
    options = run_options(params)
    if "," in options.frameworks or options.frameworks in ("all", "baselines"):
        raise UserError("run takes one framework (--frameworks NAME); use compare for several")
    from harness.frameworks import server_option_names

    others = [n for n in server_option_names(options.servers) if n != options.frameworks.strip()]
    if others:  # compare would measure them too ("also compare")
        raise UserError(
            f"run takes one framework: --server {others[0]} is not --frameworks "
            f"{options.frameworks.strip()}; use compare for several"
        )
    run_comparison(options, command="run")
