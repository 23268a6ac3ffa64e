"""The continuous-batching engine against the round-based engine it replaced (``oracle_engine``):
under greedy decoding both give every episode the same trajectory, token for token.

The tiny policy has random weights, redrawn larger than the preset's initialisation (an
untrained model at that scale repeats one pattern and runs every turn to
``max_new_tokens``), and its end-of-turn logit is scaled up, so turns end at lengths from 1
to ``max_new_tokens`` that differ between episodes: rows prefill their observations while
others decode, the case where the two engines schedule work differently.
"""
from __future__ import annotations

import pytest
import torch
from helpers import small_env_config

from agentgrpo.agent.chat import ChatFormat
from agentgrpo.envs.airline.factory import build_env, make_env
from agentgrpo.policy.hf import load_policy, read_agent_config
from agentgrpo.rollout.config import RolloutConfig
from agentgrpo.rollout.engine import EpisodeSpec, RolloutEngine

from .oracle_engine import OracleEngine

WEIGHT_STD = 0.1
"""Standard deviation of the redrawn projection weights (the preset initialises at 0.02)."""

EOS_LOGIT_SCALE = 2.0
"""Scales the end-of-turn row of the (untied) LM head."""


@pytest.fixture(scope="module")
def eos_prone(tiny_policy_dir):
    bundle = build_env(small_env_config())
    model, tokenizer = load_policy(tiny_policy_dir)
    chat = ChatFormat(tokenizer, bundle.domain.tool_schemas(), bundle.domain.policy,
                      **read_agent_config(tiny_policy_dir))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if weight.dim() == 2 and "embed" not in name:
                weight.copy_(torch.randn(weight.shape, generator=generator) * WEIGHT_STD)
        head = torch.nn.Parameter(model.lm_head.weight.detach().clone(), requires_grad=False)
        head[chat.eos_token_ids[0]] *= EOS_LOGIT_SCALE
        model.lm_head.weight = head
    return bundle, model, chat


def episode_specs(bundle, n_tasks=2, group=3, max_steps=4):
    tasks = bundle.tasks()[:n_tasks]
    return [EpisodeSpec(make_env(bundle, task, small_env_config(), user_seed=i * 10 + g, max_steps=max_steps),
                        task.task_id, f"g{i}", g)
            for i, task in enumerate(tasks) for g in range(group)]


def assert_same_trajectories(new, old):
    assert len(new) == len(old)
    for a, b in zip(new, old):
        assert a.token_ids == b.token_ids
        assert a.response_mask == b.response_mask
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0)
        assert [(t.start, t.end) for t in a.turns] == [(t.start, t.end) for t in b.turns]
        assert [s.observation for s in a.steps] == [s.observation for s in b.steps]
        assert (a.termination, a.outcome_reward, a.messages) == (b.termination, b.outcome_reward, b.messages)


@pytest.mark.parametrize("max_batch", [0, 4], ids=["all-at-once", "episodes-join"])
def test_greedy_trajectories_match_the_round_based_engine_token_for_token(eos_prone, max_batch):
    bundle, model, chat = eos_prone
    config = RolloutConfig(max_turns=4, max_new_tokens=32, max_total_tokens=800, temperature=0.0,
                           max_batch=max_batch)
    engine = RolloutEngine(model, chat, config)
    new = engine.run(episode_specs(bundle), seed=0)
    old = OracleEngine(model, chat, config).run(episode_specs(bundle), seed=0)
    assert_same_trajectories(new, old)
    lengths = {turn.num_tokens for traj in new for turn in traj.turns}
    assert len(lengths) >= 5  # turns did end unevenly
    assert engine.last_stats.peak_rows == (max_batch or len(new))


def test_greedy_trajectories_match_under_a_tight_token_budget(eos_prone):
    bundle, model, chat = eos_prone
    config = RolloutConfig(max_turns=6, max_new_tokens=48, max_total_tokens=420, temperature=0.0)
    new = RolloutEngine(model, chat, config).run(episode_specs(bundle, n_tasks=2, group=2), seed=0)
    old = OracleEngine(model, chat, config).run(episode_specs(bundle, n_tasks=2, group=2), seed=0)
    assert_same_trajectories(new, old)
    assert any(t.termination == "token_budget" for t in new)
