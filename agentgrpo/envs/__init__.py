"""Environments: the domain registry, the episode API, user simulators and the domains (airline); no torch here."""
