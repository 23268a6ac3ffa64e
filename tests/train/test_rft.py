"""Rejection-sampling fine-tuning's data: a policy's own successful episodes, kept distinct, erred turns untrained."""
from __future__ import annotations

import json

import pytest
from helpers import SMALL_ENV_OVERRIDES, small_env_config

from agentgrpo.config import ConfigError, load_config
from agentgrpo.envs.airline.factory import build_env
from agentgrpo.envs.registry import write_tools
from agentgrpo.envs.types import Step
from agentgrpo.rollout.config import RolloutConfig
from agentgrpo.train.demonstrations import collect_demonstrations
from agentgrpo.train.rft import (
    EPISODES_FILE,
    assistant_path,
    erred_turns,
    load_own_episodes,
    own_successful_episodes,
    save_own_episodes,
)
from agentgrpo.train.sft import train_sft
from agentgrpo.train.sft_config import RFT_SEED_OFFSET, SFTConfig

SPLITS = ["covered_seen", "uncovered_seen"]
SHORT = RolloutConfig(max_turns=6, max_new_tokens=24, temperature=1.0)  # a random policy's turns, kept cheap


@pytest.fixture(scope="module")
def sampled(tiny_policy_dir):
    env = small_env_config()
    bundle = build_env(env)
    found = own_successful_episodes(str(tiny_policy_dir), [bundle], env, SPLITS, 4, SHORT, 0, write_tools(env))
    return bundle, env, found


def test_only_distinct_successful_episodes_are_kept_with_their_erred_turns_untrained(sampled, tiny_policy_dir):
    bundle, env, found = sampled
    tasks = {task.task_id: task for task in bundle.tasks(SPLITS)}
    assert found.tasks == len(tasks) and found.episodes == 4 * len(tasks)
    # an untrained policy still ends some refusal tasks right (it changes nothing and the user gives up)
    assert 0 < len(found.demos) <= found.successful < found.episodes
    assert sum(found.kept_by_family.values()) == len(found.demos)
    assert found.write_tasks == sum(any(a.name in write_tools(env) for a in t.actions) for t in tasks.values())
    paths = [(d.task_id, assistant_path(d.messages)) for d in found.demos]
    assert len(set(paths)) == len(paths)
    for demo in found.demos:
        assert demo.source == "policy" and demo.reward == 1.0 and demo.fault is None
        assert demo.user_seed >= RFT_SEED_OFFSET  # never the oracle's scripted user (seed * 1000 + k, k small)
        assert demo.messages[0]["role"] == "system" and demo.messages[1]["role"] == "user"
        for index in demo.untrained:  # an erred turn: a call whose answer is an error (or a malformed turn)
            assert demo.messages[index]["role"] == "assistant"
            answer = demo.messages[index + 1]
            assert answer["role"] == "tool" and "error" in answer["content"].lower()
    assert found.with_erred_turns == sum(bool(d.untrained) for d in found.demos)
    again = own_successful_episodes(str(tiny_policy_dir), [bundle], env, SPLITS, 4, SHORT, 0, write_tools(env))
    assert [(d.task_id, d.messages) for d in again.demos] == [(d.task_id, d.messages) for d in found.demos]


def test_the_kept_episodes_are_saved_and_read_back_only_for_the_same_sampling(sampled, tmp_path):
    _, _, found = sampled
    path, settings = tmp_path / EPISODES_FILE, {"player": "p", "samples": 4, "rollout": {"temperature": 1.0}}
    save_own_episodes(found, path, settings)
    back = load_own_episodes(path, settings)
    assert back is not None and back.demos == found.demos and back.stats() == found.stats()
    assert load_own_episodes(path, {**settings, "samples": 8}) is None  # other settings: sample again
    path.write_text("\n".join(path.read_text().splitlines()[:-1]))  # a cut file is not read
    assert load_own_episodes(path, settings) is None and load_own_episodes(tmp_path / "none", settings) is None


def test_erred_turns_are_the_assistant_turns_of_failed_steps_and_a_mismatch_is_refused():
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "<tool_call>{bad"}, {"role": "tool", "content": "Error: malformed"},
                {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "x"}}]},
                {"role": "tool", "content": "{}"}, {"role": "assistant", "content": "done"}]
    steps = [Step("invalid", "invalid", observation="Error: malformed"), Step("tool", "x", observation="{}"),
             Step("respond", "respond", {"content": "done"})]
    assert erred_turns(messages, steps) == (2,)
    with pytest.raises(ValueError, match="3 assistant turns for 2 steps"):
        erred_turns(messages, steps[:2])


def test_sft_trains_on_the_policys_successes_beside_the_oracles_and_checks_its_settings(tmp_path, tiny_policy_dir):
    args = [*SMALL_ENV_OVERRIDES, "data.demos_per_task=1", "data.splits=[covered_seen,uncovered_seen]",
            "data.opening_repeats=0", "trainer.epochs=1",
            "trainer.batch_size=4", "progress=false", "data.copy_check_tasks=0", "data.rft_samples=4",
            "data.rft_rollout.max_turns=6", "data.rft_rollout.max_new_tokens=24"]
    config = load_config(SFTConfig, [*args, f"run_dir={tmp_path / 'sft'}", f"data.rft_policy={tiny_policy_dir}"],
                         defaults="sft.yaml")
    train_sft(config)
    stats = json.loads((tmp_path / "sft" / "sft_stats.json").read_text())
    oracle = collect_demonstrations(build_env(config.env), config.env, config.data.splits, 1, config.seed)
    rft = stats["rft"]
    assert rft["episodes"] == 4 * rft["tasks"] and 0 < rft["kept"] <= rft["successful"]
    assert stats["demonstrations"] == len(oracle) + rft["kept"]
    saved = json.loads((tmp_path / "sft" / EPISODES_FILE).read_text().splitlines()[0])
    assert saved["counts"] == rft and saved["settings"]["player"] == str(tiny_policy_dir)
    with pytest.raises(ConfigError, match="data.rft_samples"):
        load_config(SFTConfig, ["data.rft_samples=0"], defaults="sft.yaml")
    with pytest.raises(ConfigError, match="data.rft_rollout.temperature"):
        load_config(SFTConfig, ["data.rft_rollout.temperature=-1"], defaults="sft.yaml")
    with pytest.raises(ConfigError, match="data.rft_policy.*no such checkpoint"):
        train_sft(load_config(SFTConfig, [*args, f"run_dir={tmp_path / 'x'}", "data.rft_policy=/nonexistent"],
                              defaults="sft.yaml"))
    with pytest.raises(ConfigError, match="data.rft_policy.*delexicalise"):  # it must read ids as the SFT shows them
        train_sft(load_config(SFTConfig, [*args, f"run_dir={tmp_path / 'y'}", "env.delexicalise=true",
                                          f"data.rft_policy={tiny_policy_dir}"], defaults="sft.yaml"))


def test_rft_rounds_train_the_player_first_and_match_the_two_run_recipe(tmp_path):
    from safetensors.torch import load_file

    from agentgrpo.train.sft import _earlier_rounds

    args = [*SMALL_ENV_OVERRIDES, "data.demos_per_task=1", "data.opening_repeats=0", "trainer.epochs=1",
            "trainer.batch_size=4", "progress=false", "data.copy_check_tasks=0", "data.rft_samples=2",
            "data.rft_rollout.max_turns=6", "data.rft_rollout.max_new_tokens=24"]
    rounds = load_config(SFTConfig, [*args, f"run_dir={tmp_path / 'rounds'}", "data.rft_rounds=1"],
                         defaults="sft.yaml")
    final = train_sft(rounds)
    player = tmp_path / "rounds" / "rft_rounds" / "round0" / "final"
    round0 = json.loads((player.parent / "sft_stats.json").read_text())
    stats = json.loads((tmp_path / "rounds" / "sft_stats.json").read_text())
    assert "rft" not in round0 and stats["rft_player"] == str(player) and stats["rft"]["episodes"] > 0
    assert stats["demonstrations"] == round0["demonstrations"] + stats["rft"]["kept"]
    # the same as an SFT given round0's checkpoint as data.rft_policy: one recipe, two ways to run it
    given = load_config(SFTConfig, [*args, f"run_dir={tmp_path / 'given'}", f"data.rft_policy={player}"],
                        defaults="sft.yaml")
    ours, theirs = load_file(final / "model.safetensors"), load_file(train_sft(given) / "model.safetensors")
    assert ours.keys() == theirs.keys() and all(ours[k].equal(theirs[k]) for k in ours)
    # a finished round of the same config is kept, not trained again
    before = (player / "model.safetensors").stat().st_mtime_ns
    again = load_config(SFTConfig, [*args, f"run_dir={tmp_path / 'rounds'}", "data.rft_rounds=1"], defaults="sft.yaml")
    assert _earlier_rounds(again, False, False) == str(player)
    assert (player / "model.safetensors").stat().st_mtime_ns == before
    with pytest.raises(ConfigError, match="data.rft_rounds"):
        load_config(SFTConfig, ["data.rft_rounds=6"], defaults="sft.yaml")
