"""``env.domain=toy``: the toy domain behind the ``agentgrpo.envs.registry.Domain`` protocol.

Tasks come from ``env.seed`` and ``env.splits`` alone (no world, no data files): every
split holds its size in tasks whose keys cycle through the K keys. The user is always the
scripted :class:`~agentgrpo.envs.toy.simulation.ToyUser`; the oracle submits the task's
key. Held-out draws are fresh tasks from seeds no training build uses. No torch here.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentgrpo.config import ConfigError
from agentgrpo.envs.episode import DomainEnv
from agentgrpo.envs.registry import SPLIT_NAMES, VALIDATION_SPLIT, EnvBundle
from agentgrpo.envs.toy.domain import SUBMIT, ToyDomain
from agentgrpo.envs.toy.simulation import (
    DONE_MESSAGE,
    FAMILY,
    OPENINGS,
    ToyAgent,
    ToyUser,
    make_tasks,
    task_key,
    warmup_agent,
)
from agentgrpo.envs.types import Task

if TYPE_CHECKING:
    from agentgrpo.envs.config import EnvConfig
    from agentgrpo.envs.user_sim import ChatClient

DEFAULT_N_KEYS = 4
"""K of the registered ``toy`` domain: chance is 1/4."""
DEFAULT_VALIDATION = 8
"""Validation tasks when ``env.splits.validation`` is null."""
HELDOUT_SEED_BASE = 1_000_000_000
"""Seeds of held-out draws start here (``env.seed`` stays below it)."""


class ToySpec:
    """The toy domain's builder: splits, episodes, oracle (``Domain``), and what the sanity job's
    format warm-up needs (``submit_tool``, ``done_message``, ``warmup_episode``)."""

    submit_tool = SUBMIT
    """The one tool, ``submit(key)``."""
    done_message = DONE_MESSAGE
    """What the user says once a key is submitted."""

    def __init__(self, n_keys: int = DEFAULT_N_KEYS, stated_keys: int | None = None, name: str = "toy") -> None:
        """``n_keys``: the keys ``submit`` accepts (chance = 1/n_keys); ``stated_keys``: how many of
        them the tasks' users state (None = all; 1 = every user states the first key)."""
        self.name = name
        self.n_keys = n_keys
        self.stated_keys = n_keys if stated_keys is None else stated_keys
        if not 1 <= self.stated_keys <= n_keys:
            raise ValueError(f"stated_keys must be in [1, {n_keys}], got {stated_keys}")
        self.tool_names: frozenset[str] = frozenset({SUBMIT})
        self.write_tools: frozenset[str] = frozenset({SUBMIT})  # the one change of state grading compares

    def check_config(self, config: EnvConfig) -> None:
        """Keys the toy domain cannot honour fail at load time, naming the key."""
        if config.user.kind != "scripted":
            raise ConfigError(f"env.user.kind={config.user.kind!r} is invalid with env.domain=toy: "
                              "its user is scripted")
        if config.source != "generated":
            raise ConfigError(f"env.source={config.source!r} is invalid with env.domain=toy: its tasks are generated")
        if not 0 <= config.seed < HELDOUT_SEED_BASE:
            raise ConfigError(f"env.seed={config.seed} is invalid with env.domain=toy: "
                              f"must be in [0, {HELDOUT_SEED_BASE})")

    def domain(self, tasks: Sequence[Task] = ()) -> ToyDomain:
        return ToyDomain(self.n_keys, tasks)

    def build(self, config: EnvConfig) -> EnvBundle:
        sizes = config.splits
        validation = DEFAULT_VALIDATION if sizes.validation is None else sizes.validation
        counts = {**{name: getattr(sizes, name) for name in SPLIT_NAMES}, VALIDATION_SPLIT: validation}
        keys = ToyDomain(self.n_keys).keys[: self.stated_keys]
        splits = {name: make_tasks(keys, count, config.seed, f"toy{config.seed}_{name}")
                  for name, count in counts.items()}
        for name, tasks in splits.items():
            for task in tasks:
                task.split = name
        domain = self.domain([task for name in SPLIT_NAMES for task in splits[name]])
        return EnvBundle(domain=domain, splits=splits, world_seed=config.seed)

    def make_env(self, bundle: EnvBundle, task: Task, config: EnvConfig, user_seed: int, max_steps: int = 30,
                 user_client: ChatClient | None = None, abort_on_endpoint_error: bool = False) -> DomainEnv:
        return DomainEnv(bundle.domain, task, ToyUser(task, seed=user_seed), max_steps=max_steps,
                         abort_on_endpoint_error=abort_on_endpoint_error)

    def oracle(self, bundle: EnvBundle, task: Task, config: EnvConfig) -> ToyAgent:
        return ToyAgent(task_key(task))

    def warmup_episode(self, bundle: EnvBundle, task: Task, user_seed: int) -> tuple[DomainEnv, ToyAgent]:
        """A format warm-up episode: a user who never states the key and an agent that submits a
        random valid one, so demonstrations teach the call without teaching the key."""
        domain: Any = bundle.domain
        return (DomainEnv(domain, task, ToyUser(task, user_seed, states_key=False)),
                warmup_agent(task, domain.keys, seed=user_seed))

    def build_heldout(self, config: EnvConfig, split_names: Sequence[str], tasks_per_split: int, seed: int = 0,
                      training: EnvBundle | None = None) -> list[EnvBundle]:
        """``tasks_per_split`` fresh tasks per split, from seed ``HELDOUT_SEED_BASE + seed``; one bundle."""
        keys = ToyDomain(self.n_keys).keys[: self.stated_keys]
        draw = HELDOUT_SEED_BASE + seed
        splits = {name: make_tasks(keys, tasks_per_split, draw, f"toyheld{seed}_{name}") for name in split_names}
        for name, tasks in splits.items():
            for task in tasks:
                task.split = name
        domain = self.domain([task for tasks in splits.values() for task in tasks])
        return [EnvBundle(domain=domain, splits=splits, world_seed=draw)]

    def split_families(self, bundle: EnvBundle) -> dict[str, list[str]]:
        """One family, in every split: a toy task differs from another only by its key."""
        return {name: [FAMILY] for name in (*SPLIT_NAMES, VALIDATION_SPLIT)}

    def corpus(self, bundle: EnvBundle) -> list[str]:
        """Text a built tokenizer learns from: the policy, the schema, every user and agent line."""
        domain: Any = bundle.domain
        keys = domain.keys
        return [domain.policy, *(opening.format(key=key) for opening in OPENINGS for key in keys),
                DONE_MESSAGE, *(f"Key {key} submitted." for key in keys)]


TOY = ToySpec()
"""The registered ``toy`` domain: K = 4 keys, every one stated by some users (copy the key)."""
TOY_ONE_KEY = ToySpec(stated_keys=1, name="toy_one_key")
"""The registered ``toy_one_key`` domain: K = 4 valid keys, every user states the first (a
four-armed bandit behind the same tool-call format)."""
