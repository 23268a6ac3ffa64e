"""The batched multi-turn rollout engine on the airline environment with the tiny preset."""
from __future__ import annotations

import pytest
import torch
from helpers import small_env_config

import agentgrpo.rollout.engine as engine_module
from agentgrpo.agent.chat import ChatFormat
from agentgrpo.envs.airline.factory import build_env, make_env
from agentgrpo.policy.forward import PolicyForward
from agentgrpo.policy.hf import load_policy, read_agent_config
from agentgrpo.rollout.engine import EpisodeSpec, RolloutConfig, RolloutEngine, prefill_groups


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


def test_grouped_prefill_keeps_sampling_logprobs_exact(setup, monkeypatch):
    # zero overhead: every distinct chunk length gets its own prefill group
    monkeypatch.setattr(engine_module, "PREFILL_GROUP_OVERHEAD_TOKENS", 0)
    bundle, model, chat = setup
    engine = RolloutEngine(model, chat, RolloutConfig(max_turns=4, max_new_tokens=24, temperature=0.8))
    trajectories = engine.run(specs(bundle, n_tasks=2, group=4, max_steps=4), seed=5)
    stats = engine.last_stats
    assert stats.rounds >= 2 and stats.prefill_forwards > stats.rounds  # some rounds were split
    assert_sampling_logprobs_match_the_training_forward(model, trajectories, 0.8)


def _padded_cost(lengths, groups, overhead):
    *side, main = groups
    cost = sum(len(g) * max(lengths[i] for i in g) + overhead for g in side)
    return cost + len(lengths) * max(lengths[i] for i in main)


@pytest.mark.parametrize("lengths", [[20, 30, 600, 25, 200, 210, 22], [5] * 6, [1, 100], [300]])
def test_prefill_groups_partition_rows_at_the_cheapest_cost(lengths):
    overhead = 64
    groups = prefill_groups(lengths, overhead)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert groups[-1], "the main group is never empty"
    # brute force over contiguous cuts of the longest-first order
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    best = float("inf")
    for mask in range(2 ** (len(lengths) - 1)):
        cuts = [0] + [k + 1 for k in range(len(lengths) - 1) if mask >> k & 1] + [len(lengths)]
        candidate = [order[a:b] for a, b in zip(cuts, cuts[1:])]
        best = min(best, _padded_cost(lengths, candidate, overhead))
    assert _padded_cost(lengths, groups, overhead) == best
