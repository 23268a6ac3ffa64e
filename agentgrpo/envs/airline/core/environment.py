"""The airline episode API: ``AirlineEnv`` (reset/step) and ``run_episode``.

The episode machinery is every domain's (``agentgrpo.envs.episode``): one task, one
fresh database and one user simulator; the episode ends on the user's ``###STOP###``,
a successful transfer to a human agent (the airline's terminating tool) or after
``max_steps`` actions, and is then graded by ``AirlineDomain.grade``. ``run_episode``
records it as OpenAI-style chat messages (the CLI's transcripts and the SFT data).
"""
from __future__ import annotations

from agentgrpo.envs.episode import Agent, DomainEnv, EpisodeResult, run_episode

__all__ = ["Agent", "AirlineEnv", "EpisodeResult", "run_episode"]


class AirlineEnv(DomainEnv):
    """One airline episode: ``reset() -> str``, then ``step(action) -> StepResult``."""
