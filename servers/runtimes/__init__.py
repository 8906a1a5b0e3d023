"""The event-loop runtimes under the framework servers: each does only its own I/O."""
