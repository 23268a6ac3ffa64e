"""The veRL reward function: outcome + coef · PRM-Lite from an airline trajectory.

``compute_score(data_source, solution_str, ground_truth, extra_info)`` is veRL's custom
reward interface (``custom_reward_function.path=<this file>``, ``.name=compute_score``
in veRL 0.6–0.7; ``reward.custom_reward_function.*`` in 0.8+). It returns a dict whose
``score`` is the training reward (veRL logs the other keys).

What it reads from ``extra_info`` (the dataset row's, merged by veRL with the fields the
agentgrpo agent loop returns):

* ``agentgrpo_transcript``: the episode as OpenAI-style messages (JSON), written by
  ``AirlineAgentLoop``; the decoded ``solution_str`` loses the chat template's role
  markers, so the transcript is the trajectory;
* ``task_id`` + ``env_config``: which task of which world (``data.py``). The outcome is
  recomputed by replaying the transcript's tool calls on a fresh database and grading it
  with the agent's replies — the environment is deterministic, so this equals the
  episode's own grade (checked in the tests), and a stored outcome is never trusted
  blindly. Without the task, ``agentgrpo_outcome`` (the loop's grade) is used;
* ``agentgrpo_termination``: how the episode ended. One cut off at the turn or token budget
  scores 0 whatever its database (``agentgrpo.envs.types.CUT_OFF``, as in τ-bench), so the
  replay agrees with the episode's own reward.

The process weight is ``AGENTGRPO_PRM_COEF`` (default 0: outcome only; the seed's
PRM-Lite runs use 0.3). The agent loop calls :func:`score_transcript` with the same
setting, so both paths give the same reward.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from agentgrpo.envs.registry import ToolDomain
from agentgrpo.envs.types import CUT_OFF, Task
from agentgrpo.integrations.verl.episode import TASK_ID_KEY, resolve_task
from agentgrpo.integrations.verl.settings import setting
from agentgrpo.rewards import PRMLite, combine_rewards, parse_messages

TRANSCRIPT_KEY = "agentgrpo_transcript"
OUTCOME_KEY = "agentgrpo_outcome"
TERMINATION_KEY = "agentgrpo_termination"
DATA_SOURCE = "agentgrpo/airline"


@functools.lru_cache(maxsize=1)
def _prm() -> PRMLite:
    return PRMLite()


def prm_coef() -> float:
    """The PRM-Lite weight in the reward: ``AGENTGRPO_PRM_COEF`` (default 0.0)."""
    return setting(None, "prm_coef", 0.0, float)


def score_transcript(
    transcript: Sequence[Mapping[str, Any]], outcome: float, coef: float | None = None
) -> dict[str, float]:
    """``{"score": outcome + coef·process, "outcome", "process_score", "prm_coef", ...}``.

    The process score is always computed (for logging), whatever the coefficient.
    """
    coef = prm_coef() if coef is None else float(coef)
    result = _prm().score_messages(list(transcript))
    return {
        "score": combine_rewards(outcome, result.process_score, coef),
        "outcome": float(outcome),
        "process_score": float(result.process_score),
        "prm_coef": coef,
        "num_steps": float(len(result.step_scores)),
    }


def replay_outcome(
    domain: ToolDomain, task: Task, transcript: Sequence[Mapping[str, Any]]
) -> float:
    """Grade a transcript by replaying it: its well-formed tool calls run in order on a
    fresh database (malformed turns never reached the environment), its messages to the
    user are the replies the grader searches for the required outputs."""
    state = domain.new_state()
    replies = []
    for step in parse_messages(list(transcript)).steps:
        if step.kind == "tool":
            domain.execute(state, step.name, step.arguments)
        elif step.kind == "respond":
            replies.append(step.arguments.get("content", ""))
    return float(domain.grade(state, task, replies).reward)


def _transcript(extra_info: Mapping[str, Any]) -> list[dict[str, Any]]:
    raw = extra_info.get(TRANSCRIPT_KEY)
    if raw is None:
        raise KeyError(
            f"extra_info has no {TRANSCRIPT_KEY!r}: this reward scores trajectories of the "
            "agentgrpo airline agent loop (agent_name=agentgrpo_airline)"
        )
    return json.loads(raw) if isinstance(raw, str) else [dict(m) for m in raw]


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, float]:
    """veRL reward: outcome (replayed) + ``AGENTGRPO_PRM_COEF`` · PRM-Lite process score."""
    extra_info = extra_info or {}
    transcript = _transcript(extra_info)
    if extra_info.get(TERMINATION_KEY) in CUT_OFF:
        outcome = 0.0
    elif TASK_ID_KEY in extra_info:
        bundle, _, task = resolve_task(extra_info)
        outcome = replay_outcome(bundle.domain, task, transcript)
    elif OUTCOME_KEY in extra_info:
        outcome = float(extra_info[OUTCOME_KEY])
    else:
        raise KeyError(f"extra_info needs {TASK_ID_KEY!r} (with env_config) or {OUTCOME_KEY!r}")
    return score_transcript(transcript, outcome)
