"""The domain registry: ``env.domain`` picks the environment family every job uses."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest

from agentgrpo.config import ConfigError, load_config
from agentgrpo.envs.config import EnvConfig, SplitConfig, UserConfig
from agentgrpo.envs.episode import DomainEnv, run_episode
from agentgrpo.envs.registry import (
    Domain,
    EnvBundle,
    build_env,
    build_heldout,
    check_heldout,
    domain_names,
    domain_oracle,
    get_domain,
    id_kinds,
    make_env,
    register_domain,
    split_families,
    unregister_domain,
    write_tools,
)
from agentgrpo.envs.types import USER_STOP, Action, Task


def fingerprint(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def split_fingerprints(bundle: EnvBundle) -> dict[str, str]:
    return {name: fingerprint([task.to_dict() for task in tasks]) for name, tasks in bundle.splits.items()}


# ---- unknown and built-in domains ----

def test_an_unknown_domain_is_one_error_naming_env_domain_and_the_choices():
    with pytest.raises(ConfigError, match=r"env\.domain='retail' is invalid: must be one of \[.*'airline'"):
        get_domain("retail")
    with pytest.raises(ConfigError, match=r"env\.domain='retail'"):
        EnvConfig(domain="retail")
    with pytest.raises(ConfigError, match=r"env\.domain='retail'"):
        load_config(EnvConfig, ["domain=retail"])


def test_airline_is_the_default_domain_and_resolves_to_its_spec():
    assert "airline" in domain_names()
    assert EnvConfig().domain == "airline" and load_config(EnvConfig, []).domain == "airline"
    airline = get_domain("airline")
    assert isinstance(airline, Domain) and airline.name == "airline"
    assert get_domain("airline") is airline  # loaded once
    bundle = build_env(EnvConfig(n_tasks=12, splits=SplitConfig(covered_seen=4, uncovered_seen=4, unseen=4)))
    assert set(airline.tool_names) == set(bundle.domain.tool_names) and len(airline.tool_names) == 14


def test_the_write_tools_are_the_domains_state_changing_tools():
    """The airline's are the tools its task facts count as writes; the toy's ``submit`` is the one
    change its grader compares; a domain that declares none has None (no write share is logged)."""
    bundle = build_env(EnvConfig(n_tasks=12, splits=SplitConfig(covered_seen=4, uncovered_seen=4, unseen=4)))
    assert write_tools(EnvConfig()) == bundle.domain.write_tools
    assert {"book_reservation", "cancel_reservation", "update_reservation_flights"} <= write_tools(EnvConfig())
    assert not {"get_user_details", "transfer_to_human_agents", "think"} & write_tools(EnvConfig())
    assert write_tools(EnvConfig(domain="toy")) == {"submit"}


# Fingerprints of the splits and of one oracle episode, computed with the code before the registry
# (agentgrpo.envs.airline.factory called directly): the registry must build exactly the same tasks.
GENERATED_BEFORE = [
    (EnvConfig(), "gen-0-36-cancel_airline_cancelled", "8772171676c749be",
     {"covered_seen": "b628f88172012a2b", "uncovered_seen": "7bdccd4c672f8a73", "unseen": "1bd76122b97311d1",
      "validation": "36d80230b9380f6d"}),
    (EnvConfig(seed=3, n_tasks=12, splits=SplitConfig(4, 4, 4, validation=2)), "gen-3-10-compensation_refused",
     "f053a78b13380fbf",
     {"covered_seen": "89f256a8f76cbaa5", "uncovered_seen": "2b49e71d8f39c4a1", "unseen": "dbe0f05d61a88e0a",
      "validation": "7c7adaf4cf2cb74e"}),
]


@pytest.mark.parametrize(("config", "task_id", "messages", "splits"), GENERATED_BEFORE)
def test_airline_through_the_registry_builds_the_same_tasks_and_episodes_as_before(config, task_id, messages,
                                                                                   splits):
    bundle = build_env(config)
    assert split_fingerprints(bundle) == splits
    task = bundle.splits["covered_seen"][0]
    result = run_episode(make_env(bundle, task, config, user_seed=7), domain_oracle(config, bundle, task))
    assert (task.task_id, result.reward, fingerprint(result.messages)) == (task_id, 1.0, messages)


def test_airline_tau_bench_splits_are_the_same_as_before(tau_bench_dir):
    config = EnvConfig(source="tau_bench", data_dir=str(tau_bench_dir), user=UserConfig(kind="llm"),
                       splits=SplitConfig(validation=4))
    assert split_fingerprints(build_env(config)) == {
        "covered_seen": "81757aa14987408d", "uncovered_seen": "c228d667ac297cae", "unseen": "be838e6b327a3829",
        "validation": "a12309d1e6863ea6"}
    with pytest.raises(ConfigError, match="tasks_per_split.*env.source=generated"):
        check_heldout(config, 2)  # the airline's held-out worlds are generated ones
    check_heldout(config, 0)


def test_airline_heldout_draws_go_through_the_registry():
    config = EnvConfig(n_tasks=12, splits=SplitConfig(covered_seen=4, uncovered_seen=4, unseen=4))
    training = build_env(config)
    families = split_families(config, training)
    assert families["validation"] == sorted({t.family for n in ("covered_seen", "uncovered_seen")
                                             for t in training.splits[n]})
    worlds = build_heldout(config, ["covered_seen"], 3, seed=0, training=training)
    tasks = [task for world in worlds for task in world.splits["covered_seen"]]
    assert len(tasks) == 3 and {t.family for t in tasks} <= set(families["covered_seen"])
    assert all(world.world_seed >= 10**9 for world in worlds)  # never a training world


def test_importing_the_registry_imports_no_domain():
    code = ("import sys, agentgrpo.envs.registry as r, agentgrpo.envs.config\n"
            "before = [m for m in sys.modules if m.startswith('agentgrpo.envs.airline')]\n"
            "r.get_domain('airline')\n"
            "print(before, 'agentgrpo.envs.airline.spec' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["[]", "True"]


# ---- a domain registered at test time ----

@dataclass
class PingGrade:
    reward: float
    pinged: bool


@dataclass
class PingDomain:
    """One tool, ``ping``: a task is solved when the agent pings and then says so."""

    tasks: list[Task]
    policy: str = "Ping, then tell the user."
    tool_names: frozenset[str] = frozenset({"ping", "hang_up"})
    terminal_tools: frozenset[str] = frozenset({"hang_up"})

    def tool_schemas(self) -> list[dict[str, Any]]:
        return [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
                for n in sorted(self.tool_names)]

    def task_by_id(self, task_id: str) -> Task:
        return next(task for task in self.tasks if task.task_id == task_id)

    def new_state(self) -> dict[str, int]:
        return {"pings": 0}

    def execute(self, state: dict[str, int], name: Any, kwargs: Any) -> str:
        if name not in self.tool_names:
            return f"Error: unknown tool {name}"
        state["pings"] += name == "ping"
        return "pong" if name == "ping" else "bye"

    def is_error(self, observation: str) -> bool:
        return observation.startswith("Error: ")

    def grade(self, state: dict[str, int], task: Task, replies: Any) -> PingGrade:
        pinged = state["pings"] == 1
        return PingGrade(float(pinged and any("pong" in r for r in replies)), pinged)


class PingUser:
    def reset(self) -> str:
        return "please ping"

    def step(self, reply: str) -> str:
        return USER_STOP


@dataclass
class PingSpec:
    name: str = "ping"
    tool_names: frozenset[str] = frozenset({"ping", "hang_up"})
    built: list[EnvConfig] = field(default_factory=list)

    def build(self, config: EnvConfig) -> EnvBundle:
        self.built.append(config)
        tasks = [Task(f"ping-{config.seed}-{i}", "u", "ping", [Action("ping")], ["pong"], family="ping")
                 for i in range(3)]
        return EnvBundle(PingDomain(tasks), {"covered_seen": tasks[:1], "uncovered_seen": tasks[1:2],
                                             "unseen": tasks[2:], "validation": []})

    def make_env(self, bundle: EnvBundle, task: Task, config: EnvConfig, user_seed: int, max_steps: int = 30,
                 user_client: Any = None, abort_on_endpoint_error: bool = False) -> DomainEnv:
        return DomainEnv(bundle.domain, task, PingUser(), max_steps=max_steps)

    def oracle(self, bundle: EnvBundle, task: Task, config: EnvConfig) -> None:
        return None

    def build_heldout(self, config: EnvConfig, split_names: Any, tasks_per_split: int, seed: int = 0,
                      training: EnvBundle | None = None) -> list[EnvBundle]:
        raise ConfigError("tasks_per_split: the ping domain has no held-out tasks")

    def split_families(self, bundle: EnvBundle) -> dict[str, list[str]]:
        return {"covered_seen": ["ping"], "uncovered_seen": [], "unseen": [], "validation": ["ping"]}


class PingAgent:
    def __init__(self) -> None:
        self.turn = 0

    def act(self, observation: str) -> Action:
        self.turn += 1
        return Action("ping") if self.turn == 1 else Action.respond(f"the server said {observation}")


@pytest.fixture
def ping_spec():
    spec = PingSpec()
    register_domain("ping", lambda: spec)
    yield spec
    unregister_domain("ping")
    assert "ping" not in domain_names()


def test_a_domain_registered_at_run_time_is_reachable_through_every_call(ping_spec):
    assert "ping" in domain_names() and get_domain("ping") is ping_spec
    config = EnvConfig(domain="ping", seed=5)
    bundle = build_env(config)
    assert ping_spec.built == [config]
    assert [t.task_id for t in bundle.tasks()] == ["ping-5-0", "ping-5-1", "ping-5-2"]
    env = make_env(bundle, bundle.splits["covered_seen"][0], config, user_seed=0, max_steps=4)
    result = run_episode(env, PingAgent())
    assert (result.reward, result.termination, [a.name for a in result.actions]) == (1.0, "user_stop",
                                                                                      ["ping", "respond"])
    assert result.info["grade"] == {"reward": 1.0, "pinged": True}
    assert result.messages[0] == {"role": "system", "content": "Ping, then tell the user."}
    assert split_families(config, bundle)["covered_seen"] == ["ping"]
    with pytest.raises(ConfigError, match=r"env\.domain='ping' has no oracle"):
        domain_oracle(config, bundle, bundle.splits["covered_seen"][0])
    with pytest.raises(ConfigError, match="no held-out tasks"):
        build_heldout(config, ["unseen"], 2)
    check_heldout(config, 2)  # no check_heldout method: nothing to check at load time
    assert write_tools(config) is None  # no write_tools: nothing says which calls are writes


def test_a_domain_can_be_registered_by_module_path(ping_spec):
    register_domain("ping_by_path", f"{__name__}:PingSpec")
    try:
        domain = get_domain("ping_by_path")
        assert isinstance(domain, PingSpec) and domain is not ping_spec  # the class, instantiated once
        assert get_domain("ping_by_path") is domain
    finally:
        unregister_domain("ping_by_path")


def test_an_object_that_is_not_a_domain_is_refused():
    register_domain("broken", lambda: object())
    try:
        with pytest.raises(TypeError, match="does not implement"):
            get_domain("broken")
    finally:
        unregister_domain("broken")


def test_the_id_kinds_name_every_id_argument_of_the_airline_tools():
    """``rollout.copy_by_kind`` reads which argument takes which kind of id; a domain without
    id kinds is refused naming the setting that needs them."""
    from agentgrpo.rollout.config import RolloutConfig
    from agentgrpo.rollout.engine import copy_kinds

    kinds = id_kinds(EnvConfig(), "rollout.copy_by_kind")
    assert {argument: kind.tag for kind in kinds for argument in kind.arguments} == {
        "flight_number": "F", "user_id": "U", "payment_id": "P", "reservation_id": "R"}
    by_kind = RolloutConfig(constrain_tool_calls=True, copy_arguments=True, copy_by_kind=True)
    assert copy_kinds(by_kind, EnvConfig()) == kinds and copy_kinds(RolloutConfig(), EnvConfig()) == ()
    with pytest.raises(ConfigError, match=r"rollout.copy_by_kind=true is invalid: domain 'toy' declares no id_kinds"):
        copy_kinds(by_kind, EnvConfig(domain="toy"))
