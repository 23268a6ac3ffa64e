"""The toy domain: grading by state, the oracle, malformed calls, determinism, the registry entry."""
from __future__ import annotations

import pytest

from agentgrpo.agent.turn import play_turn
from agentgrpo.config import ConfigError, load_config
from agentgrpo.envs.config import EnvConfig
from agentgrpo.envs.episode import run_episode
from agentgrpo.envs.registry import VALIDATION_SPLIT, build_env, get_domain, make_env
from agentgrpo.envs.toy import KEYS, SUBMIT, TOY, ToyAgent, ToyDomain, task_key, warmup_agent
from agentgrpo.envs.types import Action


@pytest.fixture(scope="module")
def config() -> EnvConfig:
    return load_config(EnvConfig, ["domain=toy"])


@pytest.fixture(scope="module")
def bundle(config):
    return build_env(config)


def play(bundle, config, task, agent, user_seed=0):
    return run_episode(make_env(bundle, task, config, user_seed=user_seed), agent)


def test_registered_as_toy(config, bundle):
    assert get_domain("toy") is TOY
    assert bundle.domain.keys == KEYS[:4]
    assert bundle.split_sizes == {"covered_seen": 16, "uncovered_seen": 24, "unseen": 10, VALIDATION_SPLIT: 8}
    ids = [t.task_id for tasks in bundle.splits.values() for t in tasks]
    assert len(ids) == len(set(ids))


def test_grading_right_key_wrong_key_no_call(config, bundle):
    task = bundle.splits["covered_seen"][0]
    key = task_key(task)
    wrong = next(k for k in bundle.domain.keys if k != key)
    assert play(bundle, config, task, ToyAgent(key)).reward == 1.0
    result = play(bundle, config, task, ToyAgent(wrong))
    assert result.reward == 0.0 and result.info["grade"]["submitted"] == [wrong]

    class Talker:  # answers the user without calling the tool
        def act(self, observation):
            return Action.respond("Noted.")

    result = play(bundle, config, task, Talker())
    assert result.reward == 0.0 and result.termination == "user_stop" and result.info["grade"]["submitted"] == []


def test_a_second_submission_is_refused_and_changes_nothing(bundle):
    domain, task = bundle.domain, bundle.splits["unseen"][0]
    state = domain.new_state()
    assert domain.execute(state, SUBMIT, {"key": task_key(task)}) == f"Key {task_key(task)} submitted."
    assert domain.execute(state, SUBMIT, {"key": task_key(task)}).startswith("Error: ")
    assert domain.grade(state, task).reward == 1.0


def test_oracle_solves_every_task_in_two_turns(config, bundle):
    for tasks in bundle.splits.values():
        for i, task in enumerate(tasks):
            result = play(bundle, config, task, TOY.oracle(bundle, task, config), user_seed=i)
            assert result.reward == 1.0, task.task_id
            assert [s.kind for s in result.steps] == ["tool", "respond"]


@pytest.mark.parametrize("text, error", [
    ('<tool_call>\n{"name": "submit", "arguments": {"key": "zebra"}}\n</tool_call>', "unknown key 'zebra'"),
    ('<tool_call>\n{"name": "submit", "arguments": {"key": 3}}\n</tool_call>', "unknown key '3'"),
    ('<tool_call>\n{"name": "submit", "arguments": {"code": "amber"}}\n</tool_call>', "expected exactly {'key'}"),
    ('<tool_call>\n{"name": "submit", "arguments": {"key": "amber"</tool_call>', None),  # bad JSON: parser's error
    ('<tool_call>\n{"name": "erase", "arguments": {}}\n</tool_call>', None),  # unknown tool: parser's error
])
def test_malformed_calls_become_error_observations(config, bundle, text, error):
    task = bundle.splits["covered_seen"][0]
    env = make_env(bundle, task, config, user_seed=0)
    env.reset()
    _, outcome = play_turn(env, text, bundle.domain.tool_names)
    assert outcome.step.error and outcome.step.observation.startswith("Error: ")
    if error is not None:
        assert error in outcome.step.observation
    assert env.state.submitted == [] and not env.done


def test_domain_execute_never_raises_on_junk():
    domain = ToyDomain(4)
    state = domain.new_state()
    for name, kwargs in [(None, None), (SUBMIT, None), (SUBMIT, ["amber"]), (SUBMIT, {"key": None}), (7, {})]:
        assert domain.execute(state, name, kwargs).startswith("Error: ")
    assert state.submitted == []


def test_deterministic_per_seed(config):
    first, again = build_env(config), build_env(config)
    other = build_env(load_config(EnvConfig, ["domain=toy", "seed=1"]))
    keys = [[task_key(t) for t in first.splits[n]] for n in first.splits]
    assert keys == [[task_key(t) for t in again.splits[n]] for n in again.splits]
    assert keys != [[task_key(t) for t in other.splits[n]] for n in other.splits]
    task = first.splits["covered_seen"][0]
    openings = {make_env(first, task, config, user_seed=s).reset() for s in range(12)}
    assert len(openings) > 1 and all(task_key(task) in text for text in openings)
    assert make_env(first, task, config, user_seed=5).reset() == make_env(again, task, config, user_seed=5).reset()


def test_warmup_keys_are_uniform_and_ignore_the_user(bundle):
    task = bundle.splits["covered_seen"][0]
    drawn = [warmup_agent(task, bundle.domain.keys, seed).key for seed in range(400)]
    counts = {key: drawn.count(key) for key in bundle.domain.keys}
    assert all(70 <= count <= 130 for count in counts.values()), counts  # 100 ± ~4 binomial sd
    assert drawn == [warmup_agent(task, bundle.domain.keys, seed).key for seed in range(400)]


def test_heldout_tasks_are_fresh(config, bundle):
    [heldout] = TOY.build_heldout(config, ["unseen", VALIDATION_SPLIT], tasks_per_split=6)
    assert heldout.split_sizes == {"unseen": 6, VALIDATION_SPLIT: 6}
    trained = {t.task_id for tasks in bundle.splits.values() for t in tasks}
    assert not trained & {t.task_id for t in heldout.tasks(["unseen", VALIDATION_SPLIT])}


@pytest.mark.parametrize("override, key", [("user.kind=llm", "env.user.kind"), ("source=tau_bench", "env.source")])
def test_config_the_toy_domain_cannot_honour_is_refused(override, key):
    with pytest.raises(ConfigError, match=key):
        load_config(EnvConfig, ["domain=toy", override, "data_dir=/nonexistent"])


def test_one_key_variant_states_one_key_of_four():
    bundle = build_env(load_config(EnvConfig, ["domain=toy_one_key"]))
    assert get_domain("toy_one_key").n_keys == 4 and bundle.domain.keys == KEYS[:4]
    assert {task_key(t) for tasks in bundle.splits.values() for t in tasks} == {KEYS[0]}
    assert bundle.domain.tool_schemas()[0]["function"]["parameters"]["properties"]["key"]["enum"] == list(KEYS[:4])
