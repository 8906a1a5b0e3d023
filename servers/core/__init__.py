"""Protocol logic shared by every Python server runtime: no I/O of its own, no framework import."""
