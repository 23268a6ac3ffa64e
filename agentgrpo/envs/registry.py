"""Domains by name: the one seam between the jobs and an environment family.

Training, SFT data building, evaluation, preflight, the CLI and the veRL/TRL adapters
never import a domain package: they call ``get_domain(config.domain)`` (``env.domain``
in the YAML configs, default ``airline``) and use the :class:`Domain` it returns —
``build`` the task splits, ``make_env`` one episode, ``oracle`` a reference agent,
``build_heldout`` fresh evaluation tasks. A new domain implements :class:`Domain`
and adds one line to ``BUILTIN_DOMAINS`` (or calls ``register_domain`` at run time);
nothing above ``agentgrpo/envs/`` changes.

Registration is lazy: the table maps a name to ``"module:attr"`` and the module is
imported on the first ``get_domain(name)``, so importing this module (or asking for
one domain) never imports the others. No torch here.

Also here, because every domain and every job shares them: the split names and
:class:`EnvBundle` (a built domain object and its named task splits).
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from agentgrpo.config import ConfigError
from agentgrpo.envs.delex import DelexEnv, IdKind
from agentgrpo.envs.types import Action, StepResult, Task, Termination

if TYPE_CHECKING:
    from agentgrpo.envs.config import EnvConfig
    from agentgrpo.envs.episode import Agent
    from agentgrpo.envs.user_sim import ChatClient

SPLIT_NAMES = ("covered_seen", "uncovered_seen", "unseen")
"""The three task splits of a built domain: training with demonstrations, training
without, and test (families' tasks no training job sees)."""
TRAIN_SPLITS = ("covered_seen", "uncovered_seen")
"""The splits training jobs sample from."""
VALIDATION_SPLIT = "validation"
"""Tasks of the training families that no job trains on, for every choice (checkpoint,
step, hyper-parameters); never the test split."""
DEFAULT_DOMAIN = "airline"
"""The domain of a config that names none (``env.domain``'s default)."""
DOMAIN_KEY = "env.domain"
"""The config key that names the domain (in error messages)."""

BUILTIN_DOMAINS: dict[str, str] = {
    "airline": "agentgrpo.envs.airline.spec:AIRLINE",
    "toy": "agentgrpo.envs.toy.spec:TOY",
    "toy_one_key": "agentgrpo.envs.toy.spec:TOY_ONE_KEY",
}
"""Domains shipped with the package: name -> ``"module:attr"``, the attribute a
:class:`Domain` or a zero-argument callable returning one (imported on first use)."""


class ToolDomain(Protocol):
    """The built domain object an episode runs against (``EnvBundle.domain``).

    Its database, tools, policy text and grader: an episode environment calls
    ``new_state``, ``execute`` and ``grade``; the agent layers read ``policy``,
    ``tool_names`` and ``tool_schemas()``.
    """

    policy: str
    """The system prompt's policy text."""
    tool_names: Sequence[str]
    """Names of the tools an agent may call (``respond`` is not a tool)."""
    terminal_tools: Sequence[str]
    """Tools whose successful call ends the episode (e.g. a transfer to a human)."""
    tasks: list[Task]

    def tool_schemas(self) -> list[dict[str, Any]]:
        """OpenAI function schemas of ``tool_names``."""
        ...

    def task_by_id(self, task_id: str) -> Task: ...

    def new_state(self) -> Any:
        """A fresh database for one episode."""
        ...

    def execute(self, state: Any, name: Any, kwargs: Any) -> str:
        """Run one tool call on ``state``; a failure is an ``"Error: ..."`` observation, never raised."""
        ...

    def is_error(self, observation: str) -> bool: ...

    def grade(self, state: Any, task: Task, replies: Sequence[Any]) -> Any:
        """The episode's grade: a dataclass with at least ``reward: float`` (stored with ``asdict``)."""
        ...


class EpisodeEnv(Protocol):
    """One episode: ``reset() -> str`` (the user's first message), then ``step(action)``.

    ``step`` returns the reward (0 until ``done``) and, at the end, ``info`` with
    ``termination``, ``steps`` and ``grade``; ``finish(termination)`` ends it from outside.
    """

    task: Task
    domain: Any
    done: bool
    termination: Termination
    info: dict[str, Any]
    max_steps: int

    def reset(self) -> str: ...

    def step(self, action: Action) -> StepResult: ...

    def finish(self, termination: Termination) -> StepResult: ...

    @property
    def reward(self) -> float: ...


@dataclass
class EnvBundle:
    """A built domain and its task splits (``Domain.build`` and ``Domain.build_heldout``)."""

    domain: Any
    """The :class:`ToolDomain` the tasks run against."""
    splits: dict[str, list[Task]]
    world_seed: int | None = None
    """Seed of the generated world (None for fixed data such as τ-bench's)."""

    def tasks(self, split_names: tuple[str, ...] | list[str] = SPLIT_NAMES) -> list[Task]:
        unknown = set(split_names) - set(self.splits)
        if unknown:
            raise ValueError(f"unknown split(s) {sorted(unknown)}; choose from {list(self.splits)}")
        return [task for name in split_names for task in self.splits[name]]

    @property
    def split_sizes(self) -> dict[str, int]:
        return {name: len(tasks) for name, tasks in self.splits.items()}

    def task_by_id(self, task_id: str) -> Task:
        """A task of the domain or of the validation split (which the domain's list omits)."""
        for task in self.splits.get(VALIDATION_SPLIT, []):
            if task.task_id == task_id:
                return task
        return self.domain.task_by_id(task_id)


@runtime_checkable
class Domain(Protocol):
    """An environment family a job trains and evaluates on (``env.domain``).

    Every method is deterministic given its arguments: the same config builds the same
    tasks, the same ``user_seed`` plays the same scripted user. Three optional methods check
    a config before any work, and one builds more training worlds
    (``build_training_worlds(env_config, training)``, for ``env.train_worlds`` > 1):
    ``check_config(env_config)`` (the domain's own keys, from
    ``EnvConfig.__post_init__``), ``check_heldout(env_config, tasks_per_split)`` (an
    evaluation that draws held-out tasks) and ``check_data(env_config, prefix)`` (the files
    a job will read exist: the jobs' preflight). A domain whose tools take ids may declare
    them as ``id_kinds`` (a sequence of ``agentgrpo.envs.delex.IdKind``), which
    ``env.delexicalise`` needs, and places its tools take as ``place_kinds``, which
    ``env.delexicalise_places`` adds; one whose tools change its state may declare those as
    ``write_tools`` (tool names), which the training log's write shares need. One whose user
    answers confirmation requests by a rule may say why it declines one
    (``confirmation_faults(task, text)``, which ``eval --writes`` reports).
    """

    name: str
    tool_names: Sequence[str]
    """The tools of the domain (the veRL/TRL parsers accept these)."""

    def build(self, config: EnvConfig) -> EnvBundle:
        """The domain object and its splits: ``SPLIT_NAMES`` plus ``VALIDATION_SPLIT``."""
        ...

    def make_env(self, bundle: EnvBundle, task: Task, config: EnvConfig, user_seed: int, max_steps: int = 30,
                 user_client: ChatClient | None = None, abort_on_endpoint_error: bool = False) -> EpisodeEnv:
        """One episode of ``task`` with the configured user simulator (``user_client``: an LLM
        user's chat client); ``abort_on_endpoint_error`` ends it as ``aborted`` when the user's
        server fails for good."""
        ...

    def oracle(self, bundle: EnvBundle, task: Task, config: EnvConfig) -> Agent | None:
        """A reference agent that solves ``task`` (SFT's demonstrations), or None if the domain has none;
        ``config`` carries its settings (``oracle_arithmetic``)."""
        ...

    def build_heldout(self, config: EnvConfig, split_names: Sequence[str], tasks_per_split: int, seed: int = 0,
                      training: EnvBundle | None = None) -> list[EnvBundle]:
        """``tasks_per_split`` fresh tasks per split from worlds no training job uses; raises a
        ConfigError naming the key when the domain cannot draw them."""
        ...

    def split_families(self, bundle: EnvBundle) -> dict[str, list[str]]:
        """Task families of each split (covered_seen, uncovered_seen, unseen, validation) as held-out
        draws label them, from the training splits of ``bundle``."""
        ...


DomainFactory = Callable[[], Domain]
_registered: dict[str, str | DomainFactory | Domain] = dict(BUILTIN_DOMAINS)
_loaded: dict[str, Domain] = {}


def register_domain(name: str, factory: str | DomainFactory | Domain) -> None:
    """Make ``name`` a valid ``env.domain``: ``factory`` is ``"module:attr"`` (imported on first
    use), a zero-argument callable returning a :class:`Domain`, or the Domain itself.
    Registering a name again replaces it."""
    if not name or not isinstance(name, str):
        raise ValueError(f"a domain name must be a non-empty string, got {name!r}")
    _registered[name] = factory
    _loaded.pop(name, None)


def unregister_domain(name: str) -> None:
    """Remove ``name`` (e.g. a domain a test registered); unknown names are ignored."""
    _registered.pop(name, None)
    _loaded.pop(name, None)


def domain_names() -> list[str]:
    """The registered domain names, sorted."""
    return sorted(_registered)


def get_domain(name: str) -> Domain:
    """The domain registered as ``name``; a ConfigError naming ``env.domain`` and the choices if none is."""
    if name in _loaded:
        return _loaded[name]
    if name not in _registered:
        raise ConfigError(f"{DOMAIN_KEY}={name!r} is invalid: must be one of {domain_names()}")
    factory = _registered[name]
    if isinstance(factory, str):
        module_name, _, attr = factory.partition(":")
        factory = getattr(importlib.import_module(module_name), attr)
    # a class or a factory function is called; an instance is the domain itself
    domain = factory() if isinstance(factory, type) or (callable(factory) and not isinstance(factory, Domain)) \
        else factory
    if not isinstance(domain, Domain):
        raise TypeError(f"domain {name!r} ({_registered[name]!r}) does not implement agentgrpo.envs.registry.Domain")
    _loaded[name] = domain
    return domain


# ---- the calls the jobs make: each dispatches on ``config.domain`` ----

def build_env(config: EnvConfig) -> EnvBundle:
    """The configured domain's object and task splits (``Domain.build``)."""
    return get_domain(config.domain).build(config)


def make_env(bundle: EnvBundle, task: Task, config: EnvConfig, user_seed: int, max_steps: int = 30,
             user_client: ChatClient | None = None, abort_on_endpoint_error: bool = False,
             delexicalise: bool | None = None) -> EpisodeEnv:
    """One episode of ``task`` in the configured domain (``Domain.make_env``), wrapped in a
    ``DelexEnv`` if ``delexicalise`` (``config.delexicalise`` unless given; None is off)."""
    env = get_domain(config.domain).make_env(bundle, task, config, user_seed, max_steps=max_steps,
                                             user_client=user_client,
                                             abort_on_endpoint_error=abort_on_endpoint_error)
    if config.delexicalise if delexicalise is None else delexicalise:
        env = DelexEnv(env, id_kinds(config))
    return env


def id_kinds(config: EnvConfig, setting: str = "env.delexicalise") -> Sequence[IdKind]:
    """The configured domain's id kinds (its ``id_kinds``, then its ``place_kinds`` with
    ``env.delexicalise_places``), which delexicalisation replaces by slots and
    ``rollout.copy_by_kind`` reads; a ConfigError naming ``setting`` if the domain declares none
    (naming ``env.delexicalise_places`` if it declares no places)."""
    domain = get_domain(config.domain)
    kinds = getattr(domain, "id_kinds", None)
    if not kinds:
        raise ConfigError(f"{setting}=true is invalid: domain {config.domain!r} declares no id_kinds; "
                          f"set {setting}=false")
    if not config.delexicalise_places:
        return kinds
    places = getattr(domain, "place_kinds", None)
    if not places:
        raise ConfigError(f"env.delexicalise_places=true is invalid: domain {config.domain!r} declares no "
                          "place_kinds; set env.delexicalise_places=false")
    return (*kinds, *places)


def write_tools(config: EnvConfig) -> frozenset[str] | None:
    """The configured domain's tools that change its state (its optional ``write_tools``: for the
    airline the bookings, cancellations and changes its grader's database hash sees), or None
    when the domain declares none: nothing then says which calls are writes."""
    tools = getattr(get_domain(config.domain), "write_tools", None)
    return frozenset(tools) if tools else None


def build_heldout(config: EnvConfig, split_names: Sequence[str], tasks_per_split: int, seed: int = 0,
                  training: EnvBundle | None = None) -> list[EnvBundle]:
    """Fresh evaluation tasks of the configured domain (``Domain.build_heldout``)."""
    return get_domain(config.domain).build_heldout(config, split_names, tasks_per_split, seed=seed,
                                                   training=training)


def build_training_worlds(config: EnvConfig, training: EnvBundle | None = None) -> list[EnvBundle]:
    """The worlds training jobs draw tasks from: ``[build_env(config)]`` when ``env.train_worlds``
    is 1, else the domain's optional ``build_training_worlds(config, training)`` (world 0 first;
    ``training`` is world 0 if already built). A ConfigError naming ``env.train_worlds`` if the
    domain has no other worlds."""
    if config.train_worlds <= 1:
        return [training or build_env(config)]
    domain = get_domain(config.domain)
    build = getattr(domain, "build_training_worlds", None)
    if build is None:
        raise ConfigError(f"env.train_worlds={config.train_worlds} is invalid: domain {config.domain!r} "
                          "has one world; set env.train_worlds=1")
    return build(config, training=training)


def split_families(config: EnvConfig, bundle: EnvBundle) -> dict[str, list[str]]:
    """The families of each split of ``bundle``, a build of ``config`` (``Domain.split_families``)."""
    return get_domain(config.domain).split_families(bundle)


def check_heldout(config: EnvConfig, tasks_per_split: int) -> None:
    """A ConfigError naming the key if the configured domain cannot draw ``tasks_per_split``
    held-out tasks per split (its optional ``check_heldout``; nothing to check at 0)."""
    check = getattr(get_domain(config.domain), "check_heldout", None)
    if tasks_per_split and check is not None:
        check(config, tasks_per_split)


def check_data(config: EnvConfig, prefix: str = "env.") -> None:
    """The files the configured domain will read exist (its optional ``check_data``); the
    error names the key under ``prefix``."""
    check = getattr(get_domain(config.domain), "check_data", None)
    if check is not None:
        check(config, prefix)


def domain_oracle(config: EnvConfig, bundle: EnvBundle, task: Task) -> Agent:
    """The configured domain's oracle for ``task``; a ConfigError if the domain has none."""
    agent = get_domain(config.domain).oracle(bundle, task, config)
    if agent is None:
        raise ConfigError(f"{DOMAIN_KEY}={config.domain!r} has no oracle agent (demonstrations and "
                          f"agent=oracle need one)")
    return agent
