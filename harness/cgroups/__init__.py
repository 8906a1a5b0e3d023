"""cgroups for what a run starts: each server (and load generator, database) in its own.

- files.py: the kernel's cgroup files read as figures (pure: captured text in, a
  `CgroupReading` out), /proc/self/cgroup and mountinfo, sizes like `512M`;
- groups.py: the I/O at the edge: which cgroups this process may make (v2, v1 or none,
  found once per run), a group made, joined, read, emptied and removed.
"""
