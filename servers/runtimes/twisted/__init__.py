"""Twisted: protocols, Deferreds and a thread pool on the reactor."""
