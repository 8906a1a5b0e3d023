"""Load generators: each runs as its own process and turns one ramp step into a result."""
