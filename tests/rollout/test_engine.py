"""The batched multi-turn rollout engine on the airline environment with the tiny preset."""
from __future__ import annotations

import pytest
import torch
from helpers import small_env_config

from agentgrpo.agent.chat import ChatFormat
from agentgrpo.envs.airline.factory import build_env, make_env
from agentgrpo.policy.forward import PolicyForward
from agentgrpo.policy.hf import load_policy, read_agent_config
from agentgrpo.rollout.config import RolloutConfig
from agentgrpo.rollout.engine import EpisodeSpec, RolloutEngine


@pytest.fixture(scope="module")
def setup(tiny_policy_dir):
    bundle = build_env(small_env_config())
    model, tokenizer = load_policy(tiny_policy_dir)
    chat = ChatFormat(tokenizer, bundle.domain.tool_schemas(), bundle.domain.policy,
                      **read_agent_config(tiny_policy_dir))
    return bundle, model, chat


def specs(bundle, n_tasks=2, group=2, max_steps=30, seed=0):
    tasks = bundle.tasks()[:n_tasks]
    return [EpisodeSpec(make_env(bundle, task, small_env_config(), user_seed=seed * 100 + i * 10 + g,
                                 max_steps=max_steps), task.task_id, f"g{i}", g)
            for i, task in enumerate(tasks) for g in range(group)]


def run(setup, seed=0, **config):
    bundle, model, chat = setup
    options = {"max_turns": 3, "max_new_tokens": 24, "temperature": 1.0, **config}
    engine = RolloutEngine(model, chat, RolloutConfig(**options))
    return engine, engine.run(specs(bundle, max_steps=options["max_turns"]), seed=seed)


def test_same_seed_same_trajectories_and_different_seed_differs(setup):
    _, first = run(setup, seed=3)
    _, again = run(setup, seed=3)
    _, other = run(setup, seed=4)
    assert [t.token_ids for t in first] == [t.token_ids for t in again]
    assert [t.messages for t in first] == [t.messages for t in again]
    assert [t.token_ids for t in first] != [t.token_ids for t in other]


def test_tokens_masks_turns_and_transcript_agree(setup):
    bundle, model, chat = setup
    engine, trajectories = run(setup, seed=1)
    for traj in trajectories:
        n = len(traj.token_ids)
        assert len(traj.response_mask) == len(traj.logprobs) == n
        assert 1 <= len(traj.turns) <= 3 and len(traj.steps) == len(traj.turns)
        covered = [0] * n
        for turn in traj.turns:
            for t in range(turn.start, turn.end):
                covered[t] = 1
        assert covered == traj.response_mask  # the mask is exactly the sampled turns
        # the token stream decodes to the rendered transcript (which strips messages' outer spaces)
        rendered = chat.render(traj.messages, add_generation_prompt=False)
        assert chat.decode(traj.token_ids).split() == rendered.split()
        for step in traj.steps:  # an untrained policy writes garbage: it becomes error observations
            if step.kind == "invalid":
                assert step.observation.startswith("Error:") and step.error
    assert engine.last_stats.policy_tokens == sum(t.num_response_tokens for t in trajectories)
    prompt_tokens = sum(t.turns[0].start for t in trajectories)
    assert engine.last_stats.prefill_tokens < prompt_tokens + sum(len(t.token_ids) for t in trajectories)


def assert_sampling_logprobs_match_the_training_forward(model, trajectories, temperature):
    forward = PolicyForward(model)
    for traj in trajectories:
        ids = torch.tensor([traj.token_ids])
        mask = torch.tensor([traj.response_mask])
        with torch.no_grad():
            recomputed = forward.token_logprobs(ids, torch.ones_like(ids), mask, temperature=temperature).logprobs[0]
        sampled = torch.tensor(traj.logprobs) * mask[0]
        torch.testing.assert_close(recomputed, sampled, atol=2e-4, rtol=0)


def test_sampling_logprobs_match_the_training_forward(setup):
    _, trajectories = run(setup, seed=2, temperature=0.8)
    assert_sampling_logprobs_match_the_training_forward(setup[1], trajectories, 0.8)


def test_turn_limit_and_token_budget_end_episodes(setup):
    _, limited = run(setup, max_turns=2)
    assert all(len(t.turns) <= 2 for t in limited)
    assert all(t.termination in ("max_turns", "user_stop", "transfer") for t in limited)
    prompt = len(limited[0].token_ids) - sum(turn.num_tokens for turn in limited[0].turns)
    _, budget = run(setup, max_turns=10, max_total_tokens=400, max_new_tokens=64)
    assert any(t.termination == "token_budget" for t in budget)
    assert all(len(t.token_ids) <= 400 for t in budget)
    assert prompt > 0


def test_greedy_rollouts_ignore_the_seed(setup):
    _, a = run(setup, seed=1, temperature=0.0)
    _, b = run(setup, seed=2, temperature=0.0)
    assert [t.token_ids for t in a] == [t.token_ids for t in b]


def test_episodes_joining_and_prefilling_while_others_decode_keep_logprobs_exact(setup):
    # 8 episodes through 3 rows: later episodes take the rows of finished ones, and rows whose
    # turn hit the token budget early prefill their observation while the others still decode
    bundle, model, chat = setup
    config = RolloutConfig(max_turns=4, max_new_tokens=24, max_total_tokens=520, temperature=0.8, max_batch=3)
    engine = RolloutEngine(model, chat, config)
    trajectories = engine.run(specs(bundle, n_tasks=2, group=4, max_steps=4), seed=5)
    stats = engine.last_stats
    assert stats.peak_rows == 3 and len(trajectories) == 8
    assert all(t.turns for t in trajectories)
    assert stats.decode_tokens + stats.prefill_tokens > stats.policy_tokens
    assert_sampling_logprobs_match_the_training_forward(model, trajectories, 0.8)


def test_each_episode_is_handed_over_the_moment_it_ends(setup):
    # two rows for four episodes: the callback gets every episode once, finished, with its index,
    # and a row's first episode is handed over before the episode that takes its row ends
    bundle, model, chat = setup
    engine = RolloutEngine(model, chat, RolloutConfig(max_turns=3, max_new_tokens=24, temperature=1.0, max_batch=2))
    handed: list[tuple[int, object, int]] = []
    trajectories = engine.run(specs(bundle, max_steps=3), seed=7,
                              on_episode_end=lambda i, traj: handed.append((i, traj, len(traj.turns))))
    assert sorted(i for i, _, _ in handed) == [0, 1, 2, 3]
    assert all(traj is trajectories[i] and traj.termination and n == len(traj.turns) for i, traj, n in handed)
    assert handed[0][0] in (0, 1)  # a waiting episode cannot end first
    _, again = run(setup, seed=7, max_batch=2)  # watching changes nothing
    assert [t.token_ids for t in trajectories] == [t.token_ids for t in again]


def test_episodes_joining_later_are_seeded_too(setup):
    # two rows for four episodes: the same seed gives the same trajectories, another seed others
    _, first = run(setup, seed=7, max_batch=2)
    _, again = run(setup, seed=7, max_batch=2)
    _, other = run(setup, seed=8, max_batch=2)
    assert [t.token_ids for t in first] == [t.token_ids for t in again]
    assert [t.token_ids for t in first] != [t.token_ids for t in other]


def test_grouping_rows_by_length_changes_no_trajectory(setup):
    # 8 sampled episodes through 5 rows in buckets of 2, regrouped every step, against one bucket
    bundle, model, chat = setup
    runs = {}
    for bucket_rows in (0, 2):
        config = RolloutConfig(max_turns=4, max_new_tokens=24, max_total_tokens=520, temperature=0.8,
                               max_batch=5, bucket_rows=bucket_rows, regroup_every=1)
        engine = RolloutEngine(model, chat, config)
        runs[bucket_rows] = engine.run(specs(bundle, n_tasks=2, group=4, max_steps=4), seed=9)
        assert engine.last_stats.rows_moved > 0 if bucket_rows else engine.last_stats.rows_moved == 0
    assert [t.token_ids for t in runs[2]] == [t.token_ids for t in runs[0]]
    for grouped, plain in zip(runs[2], runs[0]):
        torch.testing.assert_close(grouped.logprobs, plain.logprobs, atol=1e-5, rtol=0)


def test_runs_under_autocast(setup):
    # on CUDA the trainer rolls out under bfloat16 autocast: keys (float32 out of RoPE) and values
    # (bfloat16) are kept in the autocast dtype
    with torch.autocast("cpu", dtype=torch.bfloat16):
        engine, trajectories = run(setup, seed=0, max_turns=2, max_new_tokens=6)
    assert all(len(t.turns) >= 1 and len(t.logprobs) == len(t.token_ids) for t in trajectories)
    assert engine.last_stats.policy_tokens > 0
