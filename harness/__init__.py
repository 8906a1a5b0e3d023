"""The comparison harness: CLI, servers' lifecycle, verify, doctor (and ramps, runner...)."""
