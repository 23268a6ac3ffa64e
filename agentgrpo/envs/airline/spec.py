"""The airline domain as the registry sees it (``env.domain=airline``, the default).

``AirlineDomainSpec`` implements ``agentgrpo.envs.registry.Domain`` by delegating to
``factory`` (tasks, splits, held-out worlds, episodes) and ``simulation.plans`` (the
oracle); ``AIRLINE`` is the instance ``BUILTIN_DOMAINS`` names.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

from agentgrpo.envs.airline import factory
from agentgrpo.envs.airline.core.domain import AirlineDomain
from agentgrpo.envs.airline.core.environment import AirlineEnv
from agentgrpo.envs.airline.core.tau_bench import check_tau_bench_dir
from agentgrpo.envs.airline.simulation import dialogue
from agentgrpo.envs.airline.simulation.oracle import OracleAgent
from agentgrpo.envs.airline.simulation.plans import oracle_agent
from agentgrpo.envs.airline.simulation.scenario import Scenario
from agentgrpo.envs.airline.tasks.world import AIRPORTS
from agentgrpo.envs.config import EnvConfig
from agentgrpo.envs.delex import IdKind
from agentgrpo.envs.registry import EnvBundle
from agentgrpo.envs.types import Task
from agentgrpo.envs.user_sim import ChatClient

AIRLINE_ID_KINDS: tuple[IdKind, ...] = (
    IdKind("F", r"HAT\d{3}", 48, ("flight_number",)),           # flight numbers, before reservation codes
    IdKind("U", r"[a-z]+(?:_[a-z]+)*_\d{4}", 4, ("user_id",)),   # sara_lee_2916
    IdKind("P", r"(?:credit_card|gift_card|certificate|paypal)_\d{5,}", 12, ("payment_id",)),
    IdKind("R", r"[A-Z0-9]{6}", 16, ("reservation_id",)),       # 4WQ150, VAAOXJ, and τ-bench's 429815
)
"""What ``env.delexicalise`` replaces by slots in the airline: flight numbers, user ids, payment
methods and reservation codes (τ-bench's shapes and the generator's). Slots per episode: a
profile holds a few reservations and payment methods; searches list up to a few dozen flights.
Each names the tool arguments that take its ids (every argument of the 14 tools that holds an id)."""


AIRPORT_KIND = IdKind("A", "(?:" + "|".join(code for code, _ in AIRPORTS) + ")", len(AIRPORTS),
                      ("origin", "destination"))
"""What ``env.delexicalise_places`` also replaces by slots in the airline: airport codes (``LGA`` →
``<A1>``). The generated worlds' 20 airports, which are also τ-bench's: a closed list, since three
capitals also spell a country (``USA``) or a word. Their arguments are the searches' and the
booking's ``origin`` and ``destination``."""

_SLOT = re.compile(rf"<[{''.join(kind.tag for kind in (*AIRLINE_ID_KINDS, AIRPORT_KIND))}][1-9][0-9]*>")
"""A slot of ``env.delexicalise`` (``<R1>``): an id the transcript does not show."""
_ID_ENTITIES = tuple(argument for kind in AIRLINE_ID_KINDS for argument in kind.arguments)


class AirlineDomainSpec:
    """τ-bench's airline: 14 tools, generated worlds or τ-bench's data, an oracle for generated tasks."""

    name = "airline"
    tool_names: frozenset[str] = AirlineDomain.tool_names
    write_tools: frozenset[str] = AirlineDomain.write_tools
    id_kinds: tuple[IdKind, ...] = AIRLINE_ID_KINDS
    place_kinds: tuple[IdKind, ...] = (AIRPORT_KIND,)

    def check_config(self, config: EnvConfig) -> None:
        factory.check_config(config)

    def check_heldout(self, config: EnvConfig, tasks_per_split: int) -> None:
        factory.check_heldout(config, tasks_per_split)

    def check_data(self, config: EnvConfig, prefix: str) -> None:
        if config.source == "tau_bench":
            check_tau_bench_dir(config.data_dir, f"{prefix}data_dir:")

    def build(self, config: EnvConfig) -> EnvBundle:
        return factory.build_env(config)

    def make_env(self, bundle: EnvBundle, task: Task, config: EnvConfig, user_seed: int, max_steps: int = 30,
                 user_client: ChatClient | None = None, abort_on_endpoint_error: bool = False) -> AirlineEnv:
        return factory.make_env(bundle, task, config, user_seed, max_steps=max_steps, user_client=user_client,
                                abort_on_endpoint_error=abort_on_endpoint_error)

    def confirmation_faults(self, task: Task, text: str) -> list[str] | None:
        """Why the agent message ``text``, a confirmation request, is not one the scripted user of
        the generated ``task`` says yes to (``dialogue.confirmation_faults`` against the closest of
        the writes it wants; empty: it would say yes). None when ``text`` asks no confirmation or
        the user wants no write (a question, a transfer). Ids written as slots (a delexicalised
        transcript) go unchecked."""
        if not dialogue.is_confirmation_request(text) or not isinstance(task.scenario, (dict, Scenario)):
            return None
        wanted = Scenario.of(task.scenario).confirmations
        if not wanted:
            return None
        faults = min((dialogue.confirmation_faults(spec, text) for spec in wanted), key=len)
        if _SLOT.search(text):
            faults = [f for f in faults if f.split(" ", 1)[-1] not in _ID_ENTITIES]
        return faults

    def oracle(self, bundle: EnvBundle, task: Task, config: EnvConfig) -> OracleAgent:
        return oracle_agent(bundle.domain, task, calculator=config.oracle_arithmetic in ("calculator", "quoted"),
                            quote_fares=config.oracle_arithmetic == "quoted", state_goal=config.oracle_goal)

    def build_heldout(self, config: EnvConfig, split_names: Sequence[str], tasks_per_split: int, seed: int = 0,
                      training: EnvBundle | None = None) -> list[EnvBundle]:
        return factory.build_heldout(config, split_names, tasks_per_split, seed=seed, training=training)

    def build_training_worlds(self, config: EnvConfig, training: EnvBundle | None = None) -> list[EnvBundle]:
        return factory.build_training_worlds(config, training=training)

    def split_families(self, bundle: EnvBundle) -> dict[str, list[str]]:
        return factory.split_families(bundle)


AIRLINE = AirlineDomainSpec()
