"""The episode API every domain shares: ``DomainEnv`` (reset/step), ``Agent`` and ``run_episode``.

An episode is one task, one fresh database and one user simulator. The agent acts
with ``Action(name, kwargs)`` (a tool call) or ``Action.respond(text)`` (a message to
the user). The episode ends when the user says ``###STOP###``, when a terminating
tool (e.g. a transfer to a human) succeeds, or after ``max_steps`` agent actions; only
then is the episode graded (``domain.grade``) and the grade put in ``info``. An episode cut
off from outside (``max_turns``, ``token_budget``: ``CUT_OFF``) scores 0, as in τ-bench; its
grade keeps what the database would have scored as ``reward_at_cut``. An
environment built with ``abort_on_endpoint_error`` also ends when its user's server
fails for good (``EndpointError``): termination ``aborted``, reward NaN, no grade, the
error in ``info``. An action that reaches ``step`` malformed (unknown tool, bad
arguments) is just an error observation from ``domain.execute``.

``run_episode(env, agent)`` plays a whole episode, one turn at a time through
``agentgrpo.envs.turn.apply_turn`` (the turn of the rollout engine and the veRL episode:
a malformed action, e.g. an unknown tool, never reaches the environment but counts
towards ``max_steps``), and records it as OpenAI-style chat messages (system = the
policy, user, assistant with ``tool_calls``, tool; written by
``agentgrpo.envs.transcript.TranscriptBuilder``, so a malformed turn is its text answered
by the error, not a call): the format of the CLI's transcripts and of the SFT data.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from agentgrpo.config import EndpointError
from agentgrpo.envs.transcript import TranscriptBuilder
from agentgrpo.envs.turn import action_error, apply_turn
from agentgrpo.envs.types import ABORTED, CUT_OFF, USER_STOP, Action, Step, StepResult, Task, Termination


class Agent(Protocol):
    """Anything that maps the last observation to the next action.

    An agent may also expose ``last_text``: the free text that goes with its last
    action (for a tool call, its stated reason), which ``run_episode`` records; and
    ``last_error``: why its last output was malformed (``None`` if it was not), which
    makes the turn invalid with that error, whatever action ``act`` returned.
    """

    def act(self, observation: str) -> Action: ...


class DomainEnv:
    """One episode of a domain's task: ``reset() -> str``, then ``step(action) -> StepResult``.

    ``domain``: the :class:`~agentgrpo.envs.registry.ToolDomain` (``new_state``, ``execute``,
    ``is_error``, ``terminal_tools``, ``grade``); ``user``: a simulator with ``reset()`` and
    ``step(reply)`` (``agentgrpo.envs.user_sim``).
    """

    def __init__(self, domain: Any, task: Task, user: Any, max_steps: int = 30,
                 abort_on_endpoint_error: bool = False) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.domain = domain
        self.task = task
        self.user = user
        self.max_steps = max_steps
        self.abort_on_endpoint_error = abort_on_endpoint_error
        self.done = True
        self.termination: Termination = "running"

    def reset(self) -> str:
        """Fresh database and user; returns the user's first message."""
        self.state = self.domain.new_state()
        self.replies: list[str] = []
        self.steps = 0
        self.done = False
        self.termination = "running"
        self.info: dict[str, Any] = {}
        first = self._ask_user(self.user.reset)
        if USER_STOP in first:
            self._finish("user_stop")
        return first

    def step(self, action: Action) -> StepResult:
        if self.termination == ABORTED:  # the driver may not have noticed yet (it gets the result again)
            return StepResult("", True, math.nan, dict(self.info))
        if self.done:
            raise RuntimeError("the episode is over: call reset() first")
        self.steps += 1
        if isinstance(action, Action) and action.is_respond:
            content = action.content
            self.replies.append(content)
            observation = self._ask_user(lambda: self.user.step(content))
            if USER_STOP in observation:
                self._finish("user_stop")
        else:
            name = getattr(action, "name", None)
            observation = self.domain.execute(self.state, name, getattr(action, "kwargs", None))
            if name in self.domain.terminal_tools and not self.domain.is_error(observation):
                self._finish("transfer")
        if not self.done and self.steps >= self.max_steps:
            self._finish("max_turns")
        return StepResult(observation, self.done, self.reward if self.done else 0.0,
                          dict(self.info) if self.done else {"termination": "running"})

    def finish(self, termination: Termination) -> StepResult:
        """End the episode from outside (the agent's turn or token budget ran out): a ``CUT_OFF``
        termination scores 0 (the grade at the cut is kept as ``reward_at_cut``)."""
        if not self.done:
            self._finish(termination)
        return StepResult("", True, self.reward, dict(self.info))

    @property
    def reward(self) -> float:
        """The finished episode's reward (NaN for an aborted one, which has no grade)."""
        return self.info["grade"]["reward"] if "grade" in self.info else math.nan

    def _ask_user(self, call: Any) -> str:
        """The user's reply; an ``EndpointError`` aborts the episode if so configured (reply "")."""
        if not self.abort_on_endpoint_error:
            return call()
        try:
            return call()
        except EndpointError as e:
            self.done, self.termination = True, ABORTED
            self.info = {"termination": ABORTED, "steps": self.steps, "error": " ".join(str(e).split())}
            return ""

    def _finish(self, termination: Termination) -> None:
        self.done = True
        self.termination = termination
        grade = asdict(self.domain.grade(self.state, self.task, self.replies))
        if termination in CUT_OFF:
            grade["reward_at_cut"], grade["reward"] = grade["reward"], 0.0
        self.info = {"termination": termination, "steps": self.steps, "grade": grade}


@dataclass
class EpisodeResult:
    """A finished episode: transcript, actions, outcome."""

    task_id: str
    family: str
    reward: float
    termination: Termination
    messages: list[dict[str, Any]]
    actions: list[Action]
    steps: list[Step]
    info: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "family": self.family, "reward": self.reward,
                "termination": self.termination, "messages": self.messages,
                "actions": [a.to_dict() for a in self.actions],
                "steps": [asdict(s) for s in self.steps], "info": self.info}


def run_episode(env: DomainEnv, agent: Agent) -> EpisodeResult:
    """Play ``agent`` against ``env`` until the episode ends and record everything."""
    observation = env.reset()
    transcript = TranscriptBuilder([{"role": "system", "content": env.domain.policy},
                                    {"role": "user", "content": observation}])
    actions: list[Action] = []
    steps: list[Step] = []
    while not env.done:
        action = agent.act(observation)
        text = getattr(agent, "last_text", "") or ""
        error = getattr(agent, "last_error", None) or action_error(action, env.domain.tool_names)
        step = apply_turn(env, None if error else action, text, error).step
        actions.append(action)
        steps.append(step)
        observation = step.observation
        transcript.add(step, call_id=f"call_{len(steps) - 1}")  # ids by turn: the recorded SFT data's
        if not env.done and len(steps) >= env.max_steps:  # malformed turns count too
            env.finish("max_turns")
    return EpisodeResult(env.task.task_id, env.task.family, env.reward, env.termination, transcript.messages,
                         actions, steps, dict(env.info))
