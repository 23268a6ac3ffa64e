"""The environment side of the veRL agent loop: one airline episode driven by generated text.

``AirlineEpisode`` takes the policy's raw assistant text turn by turn, plays it with
``agentgrpo.agent.turn.play_turn`` (the rollout engine's turn: a Hermes tool call, a
message to the user, or a malformed turn that never reaches the environment) on
``AirlineEnv`` (tools + scripted or LLM user) and hands back the next message the policy
must see. It keeps two views of the conversation:

* ``chat_messages``: role/content messages as the chat template renders them (assistant
  turns hold the raw generated text), which the agent loop turns into tokens with
  ``ChatFormat.encode_delta``;
* ``transcript``: OpenAI-style messages (assistant ``tool_calls``, ``tool`` results with
  ids; a malformed turn is its raw text answered by an error ``tool`` message), written
  from the recorded steps by ``agentgrpo.envs.transcript.TranscriptBuilder`` as the
  rollout engine writes its own, which PRM-Lite and the reward function read.

Tasks are found from a dataset row's ``extra_info`` (written by ``data.py``): the task id
and the environment config, as JSON, that rebuilds the same world in any worker. No
torch, no veRL here: this is the part the tests drive with the oracle agent.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Collection, Mapping
from typing import Any

from agentgrpo.agent.chat import build_system_prompt
from agentgrpo.agent.format import END_OF_TURN_MARKERS
from agentgrpo.agent.turn import play_turn
from agentgrpo.config import from_dict, to_dict
from agentgrpo.envs.config import EnvConfig, UserConfig
from agentgrpo.envs.registry import EnvBundle, EpisodeEnv, build_env, make_env
from agentgrpo.envs.transcript import TranscriptBuilder
from agentgrpo.envs.types import Step, Task
from agentgrpo.envs.user_sim import ChatClient
from agentgrpo.integrations.verl.settings import setting
from agentgrpo.openai_client import llm_user_client

Message = dict[str, Any]

TASK_ID_KEY = "task_id"
ENV_CONFIG_KEY = "env_config"
USER_OVERRIDES = ("kind", "model", "base_url")
"""User-simulator fields a cluster may override with ``AGENTGRPO_USER_<FIELD>`` (e.g. the
URL of the 72B user server), whatever the data was prepared with."""


@functools.lru_cache(maxsize=8)
def _bundle(env_config_json: str) -> EnvBundle:
    """The domain and splits of one environment config, built once per worker process."""
    return build_env(from_dict(EnvConfig, json.loads(env_config_json)))


_USER_CLIENTS: dict[tuple[str, ...], ChatClient | None] = {}


def _user_client(user: UserConfig) -> ChatClient | None:
    """One chat client per user simulator and worker process (None for the scripted user)."""
    key = (user.kind, user.model, user.base_url, user.api_key_env)
    if key not in _USER_CLIENTS:
        _USER_CLIENTS[key] = llm_user_client(user)
    return _USER_CLIENTS[key]


def env_config_json(config: EnvConfig) -> str:
    """The canonical JSON of an environment config (the cache key and the stored form)."""
    return json.dumps(to_dict(config), sort_keys=True)


def with_user_overrides(config: EnvConfig) -> EnvConfig:
    """``config`` with ``AGENTGRPO_USER_KIND/MODEL/BASE_URL`` applied to its user simulator."""
    user = config.user
    changes = {
        field: setting(None, f"user_{field}", getattr(user, field), str) for field in USER_OVERRIDES
    }
    return dataclasses.replace(config, user=dataclasses.replace(user, **changes))


def resolve_task(extra_info: Mapping[str, Any]) -> tuple[EnvBundle, EnvConfig, Task]:
    """The environment bundle, its config and the task a dataset row points at."""
    if TASK_ID_KEY not in extra_info or ENV_CONFIG_KEY not in extra_info:
        raise KeyError(
            f"extra_info needs {TASK_ID_KEY!r} and {ENV_CONFIG_KEY!r} "
            "(prepare the data with `agentgrpo verl-prepare`)"
        )
    raw = extra_info[ENV_CONFIG_KEY]
    config_json = raw if isinstance(raw, str) else json.dumps(dict(raw), sort_keys=True)
    bundle = _bundle(config_json)
    config = from_dict(EnvConfig, json.loads(config_json))
    return bundle, config, bundle.task_by_id(str(extra_info[TASK_ID_KEY]))


class AirlineEpisode:
    """One episode: ``start()``, then ``act(text)`` per assistant turn until ``done``.

    Args:
        env: The episode's environment (fresh; ``start`` resets it).
        system_prompt: The system message the policy sees (policy text + tools).
        max_turns: Assistant turns allowed, malformed ones included; then the episode
            ends with termination ``max_turns``.
    """

    def __init__(self, env: EpisodeEnv, system_prompt: str, max_turns: int = 30) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.env = env
        self.system_prompt = system_prompt
        self.max_turns = max_turns
        self.tool_names = frozenset(env.domain.tool_names)
        self.chat_messages: list[Message] = []
        self._transcript = TranscriptBuilder()
        self.steps: list[Step] = []

    @classmethod
    def from_extra_info(
        cls,
        extra_info: Mapping[str, Any],
        system_prompt: str | None = None,
        user_seed: int = 0,
        max_turns: int = 30,
    ) -> AirlineEpisode:
        """The episode of a dataset row.

        ``system_prompt`` None gives ``ChatFormat``'s default: the policy, then the tools.
        """
        bundle, config, task = resolve_task(extra_info)
        config = with_user_overrides(config)
        env = make_env(
            bundle,
            task,
            config,
            user_seed=user_seed,
            max_steps=max_turns,
            user_client=_user_client(config.user),
        )
        if system_prompt is None:
            system_prompt = build_system_prompt(bundle.domain.policy, bundle.domain.tool_schemas())
        return cls(env, system_prompt, max_turns)

    # ---- the conversation ------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.env.done

    @property
    def num_turns(self) -> int:
        return len(self.steps)

    def start(self) -> list[Message]:
        """Reset the environment; returns the opening chat messages (system, user)."""
        first = self.env.reset()
        opening = [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": first},
        ]
        self.chat_messages = [dict(m) for m in opening]
        self._transcript = TranscriptBuilder(opening)
        self.steps = []
        return list(self.chat_messages)

    @property
    def transcript(self) -> list[Message]:
        """The episode so far as OpenAI-style messages (see the module docstring)."""
        return self._transcript.messages

    def act(self, text: str, end_markers: Collection[str] = END_OF_TURN_MARKERS) -> Message | None:
        """Play one assistant turn; returns the message the policy sees next (None when done).

        A malformed turn never reaches the environment: its observation is the parser's
        error, shown as a ``tool`` message so the policy can recover. ``end_markers``:
        trailing end-of-turn tokens to ignore (the agent loop passes its
        ``ChatFormat.end_markers``).
        """
        if self.done:
            raise RuntimeError("the episode is over")
        _, outcome = play_turn(self.env, text, self.tool_names, end_markers)
        reply = {"role": outcome.reply_role, "content": outcome.step.observation}
        self.steps.append(outcome.step)
        self.chat_messages.append({"role": "assistant", "content": text})
        self.chat_messages.append(reply)
        self._transcript.add(outcome.step)
        if not self.done and self.num_turns >= self.max_turns:
            self.finish("max_turns")
        return None if self.done else reply

    def finish(self, termination: str) -> None:
        """End the episode from outside (turn or token budget exhausted) and grade it."""
        self.env.finish(termination)

    # ---- the result --------------------------------------------------------------------
    @property
    def outcome(self) -> float:
        """The grader's reward (1.0 solved, 0.0 not); only meaningful once ``done``."""
        if not self.done:
            raise RuntimeError("the episode is still running: finish() it first")
        return float(self.env.info["grade"]["reward"])

    @property
    def termination(self) -> str:
        return str(self.env.termination)

    @property
    def has_error(self) -> bool:
        return any(step.error for step in self.steps)
