"""Watching a run as it goes: a live page (`--live`) and Prometheus metrics (`--prometheus`).

- state.py: what the run has shown so far, fed by the runner's reporter events
- metrics.py: that state as Prometheus metric families, read at each scrape
- server.py: the HTTP servers (the page, its event stream, /metrics) on threads of their own
- reporters.py: several reporters as one, and the one that feeds the state
- address.py: where they listen (127.0.0.1 unless the user names a host)
- session.py: the servers started, their URLs said, the run's end
- templates/live.html, static/: the page and its script (canvas charts, no library)

They run in the harness's own process (pinned with it to the load's CPUs while the run
goes, their CPU counted in each step's `harness_cpu_pct`) and serve only what the
monitor and the steps already produced.
"""

DEFAULT_LIVE_PORT = 8089  # `--live` alone; Locust's web UI has the same habit
DEFAULT_PROMETHEUS_PORT = 9464  # `--prometheus` alone; the OpenTelemetry exporter's port
