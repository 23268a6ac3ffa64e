"""Integrations with outside training frameworks (veRL, TRL): thin adapters over agentgrpo.algos."""
