"""Numbers as people read them, one way for every output: the console, the Markdown and
JUnit outputs, the report, and the model's own one-line texts (model.ramps.ramp_text)."""

from __future__ import annotations


def figure(value: float | None) -> str:
    """A figure of any size readably: 25,752 (req/s), 3.72 (ms), 0.153 (a ratio)."""
    if value is None:
        return "–"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
