"""One room for what a run starts beside the servers, and what a kill leaves.

- base.py: a helper process in its own group, its port read from its own socket;
- ferretdb.py: FerretDB (built from the Go module proxy), the w: 0 probe, a run's own
  database on a user's MongoDB;
- postgres.py: a throwaway PostgreSQL cluster for FerretDB;
- database.py: the run's MongoDB-wire database (FerretDB on PostgreSQL or SQLite);
- memcached.py: memcached, never as root;
- balancer.py: the nginx load balancer of the `lb:N` topology;
- fileset.py: the deterministic file set, on disk and in GridFS;
- backends.py: what a scenario needs beside its sink, started once, always stopped;
- sink_store.py: the harness's side of a sink (what a server writes to, what it holds);
- leftovers.py: what killed runs left (temporary directories, their processes), for
  `harness doctor` and `harness clean`.
"""
