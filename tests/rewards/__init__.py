"""Tests of agentgrpo.rewards: PRM-Lite and outcome helpers."""
