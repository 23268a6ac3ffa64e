"""The airline episode API: ``AirlineEnv`` (reset/step) and ``run_episode``.

An episode is one task, one fresh database and one user simulator. The agent acts
with ``Action(name, kwargs)`` (a tool call) or ``Action.respond(text)`` (a message to
the user). The episode ends when the user says ``###STOP###``, when a terminating
tool (the transfer) succeeds, or after ``max_steps`` agent actions; only then is the
reward computed (``domain.reward``) and the grade put in ``info``. A malformed action
(unknown tool, bad arguments) is just an error observation from ``domain.execute``.

``run_episode(env, agent)`` plays a whole episode and records it as OpenAI-style
chat messages (system = the policy, user, assistant with ``tool_calls``, tool): the
format of the CLI's transcripts and of the SFT data.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from agentgrpo.agent.types import Step, Termination
from agentgrpo.envs.types import USER_STOP, Action, StepResult, Task


class Agent(Protocol):
    """Anything that maps the last observation to the next action.

    An agent may also expose ``last_text``: the free text that goes with its last
    action (for a tool call, its stated reason); ``run_episode`` records it.
    """

    def act(self, observation: str) -> Action: ...


class AirlineEnv:
    """One airline episode: ``reset() -> str``, then ``step(action) -> StepResult``."""

    def __init__(self, domain: Any, task: Task, user: Any, max_steps: int = 30) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.domain = domain
        self.task = task
        self.user = user
        self.max_steps = max_steps
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
        first = self.user.reset()
        if USER_STOP in first:
            self._finish("user_stop")
        return first

    def step(self, action: Action) -> StepResult:
        if self.done:
            raise RuntimeError("the episode is over: call reset() first")
        self.steps += 1
        if isinstance(action, Action) and action.is_respond:
            content = action.kwargs.get("content", "") if isinstance(action.kwargs, dict) else ""
            content = content if isinstance(content, str) else str(content)
            self.replies.append(content)
            observation = self.user.step(content)
            if USER_STOP in observation:
                self._finish("user_stop")
        else:
            name = getattr(action, "name", None)
            observation = self.domain.execute(self.state, name, getattr(action, "kwargs", None))
            if name in self.domain.terminal_tools and not self.domain.is_error(observation):
                self._finish("transfer")
        if not self.done and self.steps >= self.max_steps:
            self._finish("max_turns")
        reward = self.info["grade"]["reward"] if self.done else 0.0
        return StepResult(observation, self.done, reward,
                          dict(self.info) if self.done else {"termination": "running"})

    def finish(self, termination: Termination) -> StepResult:
        """End the episode from outside (the agent's turn or token budget ran out): grade now."""
        if not self.done:
            self._finish(termination)
        return StepResult("", True, self.info["grade"]["reward"], dict(self.info))

    def _finish(self, termination: Termination) -> None:
        self.done = True
        self.termination = termination
        grade = self.domain.grade(self.state, self.task, self.replies)
        self.info = {"termination": termination, "steps": self.steps, "grade": asdict(grade)}


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


def _tool_call_message(text: str, call_id: str, action: Action) -> dict[str, Any]:
    arguments = json.dumps(action.kwargs, default=str) if isinstance(action.kwargs, dict) else "{}"
    return {"role": "assistant", "content": text,
            "tool_calls": [{"id": call_id, "type": "function",
                            "function": {"name": str(action.name), "arguments": arguments}}]}


def run_episode(env: AirlineEnv, agent: Agent) -> EpisodeResult:
    """Play ``agent`` against ``env`` until the episode ends and record everything."""
    observation = env.reset()
    messages: list[dict[str, Any]] = [{"role": "system", "content": env.domain.policy},
                                      {"role": "user", "content": observation}]
    actions: list[Action] = []
    steps: list[Step] = []
    while not env.done:
        action = agent.act(observation)
        text = getattr(agent, "last_text", "") or ""
        result = env.step(action)
        actions.append(action)
        observation = result.observation
        if action.is_respond:
            content = env.replies[-1]
            messages += [{"role": "assistant", "content": content},
                         {"role": "user", "content": observation}]
            steps.append(Step("respond", "respond", {"content": content}, observation, content))
        else:
            call_id = f"call_{len(steps)}"
            messages += [_tool_call_message(text, call_id, action),
                         {"role": "tool", "tool_call_id": call_id, "name": str(action.name),
                          "content": observation}]
            known = action.name in env.domain.tool_names and isinstance(action.kwargs, dict)
            steps.append(Step("tool" if known else "invalid",
                              str(action.name) if known else "invalid",
                              dict(action.kwargs) if known else {},
                              observation, text, env.domain.is_error(observation)))
    return EpisodeResult(env.task.task_id, env.task.family, env.info["grade"]["reward"],
                         env.termination, messages, actions, steps, dict(env.info))
