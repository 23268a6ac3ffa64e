"""The toy domain (``env.domain=toy``): copy the user's key into one ``submit`` call.

A task a ~20K-parameter policy learns in seconds on a CPU, for checking that a trainer
learns at all (``agentgrpo sanity``): ``domain`` (the key set, the tool, exact-match
grading), ``simulation`` (tasks, scripted user, oracle and the format warm-up agent) and
``spec`` (the registry entry). No torch here.
"""
from __future__ import annotations

from agentgrpo.envs.toy.domain import KEYS, SUBMIT, ToyDomain, ToyGrade, ToyState
from agentgrpo.envs.toy.simulation import DONE_MESSAGE, ToyAgent, ToyUser, make_tasks, task_key, warmup_agent
from agentgrpo.envs.toy.spec import TOY, ToySpec

__all__ = ["DONE_MESSAGE", "KEYS", "SUBMIT", "TOY", "ToyAgent", "ToyDomain", "ToyGrade", "ToySpec", "ToyState",
           "ToyUser", "make_tasks", "task_key", "warmup_agent"]
