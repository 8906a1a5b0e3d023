"""One module per framework: thin and idiomatic, differing only where the framework does."""
