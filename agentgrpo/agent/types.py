"""Trajectory data types shared by rollout, rewards, evaluation and training.

A *Step* (``agentgrpo.envs.types.Step``) is one agent action and what came back
(semantic level: PRM-Lite and the evaluator read these). A *Turn* is one assistant
generation at token level: the span of policy tokens in ``Trajectory.token_ids`` that
produced the step (LLDS's "action", Turn-Discount's turn index). In our format every
assistant turn carries exactly one action (a tool call or a message), so
``turns[j].step is steps[j]``. No torch here: token fields are plain lists so a
Trajectory serialises to JSON; the trainer collates them into tensors
(``agentgrpo.train.batch``).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from agentgrpo.envs.transcript import build_transcript, opening_of

if TYPE_CHECKING:  # annotations only: Step lives with the environment types
    from agentgrpo.envs.types import Step, Termination


@dataclass
class Turn:
    """Token span ``[start, end)`` of one assistant generation in the trajectory."""

    start: int
    end: int
    step: Step

    @property
    def num_tokens(self) -> int:
        return self.end - self.start


@dataclass
class Trajectory:
    """One episode of the policy in the environment.

    token_ids: the whole conversation as the policy saw it: prompt, assistant
        turns and the observation/user segments appended between them.
    response_mask: 1 on tokens the policy generated (assistant turns), else 0.
    logprobs: sampling log-probs aligned with ``token_ids`` (0.0 where mask is 0).
    messages: the conversation as the policy saw it, as OpenAI-style chat messages
        (system, user, assistant with ``tool_calls``, tool): what ``token_ids`` encode.
        An answer that ended the episode was never shown, so it is not there; the
        complete record is :attr:`transcript`.
    """

    task_id: str
    group_id: str
    sample_index: int = 0
    messages: list[dict[str, Any]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    outcome_reward: float = 0.0
    process_score: float = 0.0
    turn_process_scores: list[float] = field(default_factory=list)
    termination: Termination = "running"
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def reward(self) -> float:
        """Outcome plus whatever process reward the scorer folded in (see rewards/)."""
        return self.info.get("total_reward", self.outcome_reward)

    @property
    def transcript(self) -> list[dict[str, Any]]:
        """The complete record: the opening of ``messages`` and every step with its
        observation (``agentgrpo.envs.transcript``), which reads back as exactly ``steps``.
        This is what evaluation logs, TRL's reward and veRL's reward score."""
        return build_transcript(opening_of(self.messages), self.steps)

    @property
    def num_response_tokens(self) -> int:
        return sum(self.response_mask)

    @property
    def num_tool_errors(self) -> int:
        return sum(1 for s in self.steps if s.error and s.kind == "tool")

    @property
    def num_invalid(self) -> int:
        return sum(1 for s in self.steps if s.kind == "invalid")

    @property
    def has_error(self) -> bool:
        """At least one tool error or malformed call (the seed's error-rate numerator)."""
        return any(s.error for s in self.steps)

    @property
    def agent_replies(self) -> list[str]:
        return [s.arguments.get("content", "") for s in self.steps if s.kind == "respond"]

    def to_dict(self, with_tokens: bool = False) -> dict[str, Any]:
        d = asdict(self)
        if not with_tokens:
            for key in ("token_ids", "response_mask", "logprobs"):
                d.pop(key)
            for turn in d["turns"]:
                turn.pop("step")
        return d
