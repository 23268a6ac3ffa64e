"""Environments: the airline domain and user simulators (no torch here)."""
