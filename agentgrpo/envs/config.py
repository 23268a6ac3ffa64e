"""The ``env`` section of every job's config: which domain, which tasks, which user.

One schema for every domain (``agentgrpo.envs.registry``): ``domain`` picks the
environment family (``airline`` by default); ``source``, ``seed``, ``n_tasks`` and
``splits`` say which tasks it builds; ``user`` how the customer is simulated. ``world``
sizes a generated world and ``compat`` picks tool semantics — a domain without them
ignores them. A domain checks its own keys through its optional ``check_config``
(called here, so a bad value fails when the config is loaded). No torch here, and no
domain package is imported until ``domain`` is looked up.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from agentgrpo.config import require
from agentgrpo.endpoint import RequestConfig
from agentgrpo.envs.registry import DEFAULT_DOMAIN, get_domain

DEFAULT_VALIDATION = {"generated": 8, "tau_bench": 0}
"""Validation tasks when ``splits.validation`` is null: 8 generated ones; none on τ-bench,
whose tasks are all in the seed's three splits."""


@dataclass
class SplitConfig:
    covered_seen: int = 16
    """Training tasks with teacher demonstrations (the seed: 16)."""
    uncovered_seen: int = 24
    """Training tasks without demonstrations (the seed: 24)."""
    unseen: int = 10
    """Test tasks (the seed: 10)."""
    validation: int | None = None
    """Validation tasks: training families, never trained on, used to choose checkpoints and
    settings (never the test split). generated: drawn after the task pool from the same
    world; tau_bench: held out of uncovered_seen (which keeps the rest). null = 8
    (generated) or 0 (tau_bench)."""

    def __post_init__(self) -> None:
        for key in ("covered_seen", "uncovered_seen", "unseen"):
            require(getattr(self, key) >= 0, f"env.splits.{key}", getattr(self, key), "must be >= 0")
        require(self.validation is None or self.validation >= 0, "env.splits.validation", self.validation,
                "must be >= 0 (or null for the source's default)")


@dataclass
class WorldConfig:
    """Sizes of a generated world (the airline domain's: ``agentgrpo.envs.airline.tasks.world.WorldSpec``,
    whose ranges its ``check_config`` enforces)."""

    n_airports: int = 8
    """Airports on the route network (3 to the number the generator knows)."""
    n_flights: int = 40
    """Flight numbers (at least 2 × n_airports: one each way along a ring of airports)."""
    n_users: int = 150
    """Users (at least 1)."""
    n_reservations: int = 340
    """Reservations (at most 3 per user)."""


@dataclass
class UserConfig:
    kind: Literal["scripted", "llm"] = "scripted"
    """scripted (offline, deterministic per seed; generated tasks only) or llm (OpenAI-compatible API)."""
    model: str = "gpt-4o"
    """LLM user: model name served at ``base_url``."""
    base_url: str = "http://127.0.0.1:8000/v1"
    """LLM user: OpenAI-compatible endpoint (e.g. a vLLM server with a 72B model)."""
    api_key_env: str = "OPENAI_API_KEY"
    """LLM user: environment variable holding the API key."""
    temperature: float | None = None
    """LLM user: sampling temperature; null = the source's default: 0.0 on generated tasks,
    and on τ-bench tasks none is sent (the server's default, 1.0 on OpenAI), as τ-bench does."""
    request: RequestConfig = field(default_factory=lambda: RequestConfig(timeout=60.0))
    """LLM user: deadline, retries and size cap of each request (a request that still fails
    ends its episode as ``aborted`` in evaluation and training)."""

    def __post_init__(self) -> None:
        require(self.temperature is None or self.temperature >= 0, "env.user.temperature", self.temperature,
                "must be >= 0, or null for the source's default")


@dataclass
class EnvConfig:
    domain: str = DEFAULT_DOMAIN
    """Environment family (``agentgrpo.envs.registry.domain_names()``): its tools, policy, tasks and grader."""
    source: Literal["generated", "tau_bench"] = "generated"
    """Task source: a seeded generated world (offline default) or a τ-bench-format directory."""
    data_dir: str | None = None
    """τ-bench data directory (users.json, flights.json, reservations.json, policy.md, tasks_test.json)."""
    seed: int = 0
    """World, task and split seed of the generated source."""
    n_tasks: int = 50
    """Tasks to generate (≥ the sum of the split sizes)."""
    train_worlds: int = 1
    """Generated worlds training jobs (SFT's demonstrations, GRPO's tasks) draw from: world 0 is
    ``seed``'s own, each other adds tasks of the training families from a world of its own
    (``Domain.build_training_worlds``). Test and validation tasks never come from them."""
    delexicalise: bool | None = None
    """The policy sees each id (user, reservation, payment method, flight) as a slot token
    (``<U1>``, ``<R2>``, ...) numbered by first appearance in the episode, and the environment
    gets the ids back (``agentgrpo.envs.delex``). None: the policy checkpoint's own choice (its
    ``agentgrpo.json``; off for a model without one)."""
    delexicalise_places: bool | None = None
    """With ``env.delexicalise``, places too are slots (the airline: airport codes, ``LGA`` → ``<A1>``;
    the domain's ``place_kinds``), so a policy copies them from the user's request as it copies an
    id rather than writing them from memory. Places can carry meaning (a city), so they are kept
    apart from ``env.delexicalise``'s ids. None: the policy checkpoint's own choice (off for one
    that records none)."""
    compat: Literal["tau_bench", "fixed"] | None = None
    """Tool semantics: τ-bench's quirks or τ²-bench's fixes; None = the source's default."""
    oracle_arithmetic: Literal["stated", "calculator", "quoted"] = "stated"
    """How the domain's oracle (demonstrations, ``agent=oracle``, ``eval --decisions``' labels) gets
    the prices and sums it states: ``stated``, worked out silently as a human agent would, or
    ``calculator``, one ``calculate`` call per sum whose expression holds only numbers already in
    the conversation, its result then stated (a small policy copies operands far more reliably
    than it adds them: docs/results/write-levers.md), or ``quoted``, the calculator and each
    operand looked up in a table (a chosen flight's fare) also stated where it was looked up, so
    the sum copies it from one sentence. A domain without arithmetic ignores it."""
    oracle_goal: bool | Literal["think"] = False
    """The oracle's reasons for its first reads (the profile, the reservation) open with the user's
    request in one fixed phrase per request ("The user wants to cancel a reservation ..."), so a
    policy that imitates it restates the request beside the decisions that depend on it, rather than
    reading the user's own words back across a tool's output. Its actions and rewards are unchanged.
    ``think``: as ``true``, and right after reading the reservation the user names the oracle calls
    the domain's ``think`` tool with the same phrase ("The user wants to add checked bags to a
    reservation."), so the reply that follows the reservation's record has the request a few tokens
    back, written by a copy of the agent's own earlier words, not across the record (its writes and
    rewards are unchanged; one more tool call per reservation read). A domain whose oracle has no
    such phrases ignores it."""
    world: WorldConfig = field(default_factory=WorldConfig)
    splits: SplitConfig = field(default_factory=SplitConfig)
    user: UserConfig = field(default_factory=UserConfig)

    def __post_init__(self) -> None:
        check = getattr(get_domain(self.domain), "check_config", None)  # unknown: a ConfigError naming env.domain
        if check is not None:
            check(self)
        if self.source == "tau_bench" and not self.data_dir:
            raise ValueError("env.data_dir is required when env.source=tau_bench")
        require(self.n_tasks >= 1, "env.n_tasks", self.n_tasks, "must be >= 1")
        require(self.train_worlds >= 1, "env.train_worlds", self.train_worlds, "must be >= 1")
        self.check_view()
        total = self.splits.covered_seen + self.splits.uncovered_seen + self.splits.unseen
        if self.source == "generated" and self.n_tasks < total:
            raise ValueError(f"env.n_tasks ({self.n_tasks}) must be >= the split sizes' sum ({total})")
        if self.source == "tau_bench" and self.user.kind == "scripted":
            raise ValueError("τ-bench tasks have no structured scenario: set env.user.kind=llm")
        if self.splits.validation is None:
            self.splits.validation = DEFAULT_VALIDATION[self.source]

    def check_view(self) -> None:
        """A ConfigError if places are to be slots in a view whose ids are not (also once a
        checkpoint's view is resolved: ``agentgrpo.policy.hf.resolve_view``)."""
        require(not (self.delexicalise_places and self.delexicalise is False), "env.delexicalise_places",
                self.delexicalise_places, "places are slots only in a delexicalised view: needs env.delexicalise=true")

    @property
    def user_temperature(self) -> float | None:
        """The LLM user's temperature: ``user.temperature``, else the source's default
        (0.0 on generated tasks; None, i.e. not sent, on τ-bench tasks as τ-bench does)."""
        if self.user.temperature is not None:
            return self.user.temperature
        return None if self.source == "tau_bench" else 0.0
