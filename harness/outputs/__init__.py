"""Outputs other tools read: JUnit XML for CI test reports, Markdown for a CI job's step
summary. One writer per format (`junit.py`, `markdown.py`), each a pure function of the
same model objects the report draws (model.results.Run, harness.diff.RunDiff,
harness.verify.Verification) returning text; `write_output` puts the text on disk.

asv's `publish` and pyperf's `compare_to` are the models: the figures a person reads in
the summary are the ones a machine reads here, intervals included.
"""

from __future__ import annotations

from pathlib import Path

from model.errors import UserError
from model.files import write_text_atomically


def write_output(path: Path, text: str, what: str) -> Path:
    """Write `text` to `path` atomically (its directory made); an unwritable path is a
    UserError naming the option (`what`: `--junit`, `--markdown`)."""
    try:
        write_text_atomically(path, text)
    except OSError as error:
        raise UserError(f"{what} {path}: cannot write it ({error.strerror})") from None
    return path
