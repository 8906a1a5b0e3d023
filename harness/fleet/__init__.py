"""Load from many hosts on Dask distributed: a fleet's load hosts are Dask workers.

- client: connect to a scheduler, list and check its load hosts (`--fleet`);
- local: network-namespace load hosts on this machine (`harness fleet up/down`);
- facts, tasks: what runs on a load host (its facts; one pinned task per host and step);
- steps, agents: one HTTP step, or a whole connection ramp, across the hosts — started
  together behind a barrier, merged exactly, per-host figures kept.
"""
