"""Rewards: outcome helpers and the PRM-Lite rule engine."""
