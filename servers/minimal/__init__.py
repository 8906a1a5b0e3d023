"""Minimal hello-world apps, one per framework: the yardstick for our servers' speed.

Each `<framework>_app.py` is the smallest idiomatic app that answers `GET /` with the
contract's text body (with TCP_NODELAY, which the framework may not set by itself), and
defines `run(host: str, port: int) -> None`. The bench compares our server against it on
the same core in the same run.
"""
