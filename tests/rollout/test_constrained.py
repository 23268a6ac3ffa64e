"""Schema-guided decoding in the rollout engine, and the trainer scoring the same distribution.

The tiny preset is random, so a forward hook on its output head raises the logit of
``<tool_call>`` (in the sampler and the training forward alike): every turn then opens a
call, and what follows the tag is up to the grammar.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import small_env_config

from agentgrpo.agent.chat import ChatFormat
from agentgrpo.agent.format import TOOL_CALL_OPEN
from agentgrpo.agent.grammar import word_kind
from agentgrpo.envs.airline.factory import build_env, make_env
from agentgrpo.envs.airline.spec import AIRLINE_ID_KINDS
from agentgrpo.policy.forward import PolicyForward
from agentgrpo.policy.hf import load_policy, read_agent_config
from agentgrpo.rollout.config import RolloutConfig
from agentgrpo.rollout.engine import EpisodeSpec, RolloutEngine
from agentgrpo.train.batch import collate

MAX_NEW_TOKENS = 120


@pytest.fixture(scope="module")
def setup(tiny_policy_dir):
    bundle = build_env(small_env_config())
    model, tokenizer = load_policy(tiny_policy_dir)
    chat = ChatFormat(tokenizer, bundle.domain.tool_schemas(), bundle.domain.policy,
                      **read_agent_config(tiny_policy_dir))
    tag = tokenizer.convert_tokens_to_ids(TOOL_CALL_OPEN)

    def favour_calls(module, inputs, output):
        output = output.clone()
        output[..., tag] += 30.0
        return output

    handle = model.get_output_embeddings().register_forward_hook(favour_calls)
    yield bundle, model, chat
    handle.remove()


def rollouts(setup, constrained: bool, seed: int = 0, temperature: float = 1.0, copy: bool = False,
             by_kind: bool = False, evidence: bool = False):
    bundle, model, chat = setup
    config = RolloutConfig(max_turns=3, max_new_tokens=MAX_NEW_TOKENS, max_total_tokens=4096,
                           temperature=temperature, constrain_tool_calls=constrained, copy_arguments=copy,
                           copy_by_kind=by_kind, copy_from_evidence=evidence)
    engine = RolloutEngine(model, chat, config, AIRLINE_ID_KINDS if by_kind else ())
    specs = [EpisodeSpec(make_env(bundle, task, small_env_config(), user_seed=g, max_steps=3), task.task_id,
                         f"g{i}", g) for i, task in enumerate(bundle.tasks()[:3]) for g in range(2)]
    return engine, engine.run(specs, seed=seed)


def finished_turns(trajectories, eos_ids):
    """(trajectory, turn) pairs that ended with an end-of-turn token (not cut at the budget)."""
    return [(traj, turn) for traj in trajectories for turn in traj.turns
            if traj.token_ids[turn.end - 1] in eos_ids]


def test_every_finished_turn_is_a_well_formed_call(setup):
    _, _, chat = setup
    _, free = rollouts(setup, constrained=False)
    _, guided = rollouts(setup, constrained=True)
    free_kinds = [turn.step.kind for traj in free for turn in traj.turns]
    guided_turns = finished_turns(guided, chat.eos_token_ids)
    assert free_kinds and set(free_kinds) == {"invalid"}  # tag after tag: never a valid call
    assert len(guided_turns) >= 3  # the others ran out of tokens inside a random string
    assert [turn.step.kind for _, turn in guided_turns] == ["tool"] * len(guided_turns)
    names = {turn.step.name for _, turn in guided_turns}
    assert names <= chat.tool_names


@pytest.mark.parametrize("copy, by_kind, evidence", [(False, False, False), (True, False, False),
                                                    (True, True, False), (True, True, True)],
                         ids=["schema", "schema+copy", "schema+copy-by-kind", "schema+copy-by-kind-from-evidence"])
def test_sampled_tokens_are_allowed_and_the_trainer_scores_the_sampled_distribution(setup, copy, by_kind, evidence):
    bundle, model, chat = setup
    engine, trajectories = rollouts(setup, constrained=True, seed=1, copy=copy, by_kind=by_kind, evidence=evidence)
    grammar = engine.grammar
    assert grammar.copy_values == copy and bool(grammar.value_kinds) == by_kind
    assert (grammar.own_turns is not None) == evidence
    for traj in trajectories:
        for turn in traj.turns:
            tokens = traj.token_ids[turn.start : turn.end]
            masks = grammar.turn_masks(tokens, traj.token_ids[: turn.start])
            bits = np.unpackbits(masks.view(np.uint8), bitorder="little")
            bits = bits.reshape(len(tokens), -1)
            assert all(bits[k, token] for k, token in enumerate(tokens))
    batch = collate(trajectories, chat.pad_token_id, grammar)
    forward = PolicyForward(model)
    with torch.no_grad():
        scored = forward.token_logprobs(batch.input_ids, batch.attention_mask, batch.response_mask,
                                        token_masks=batch.token_masks).logprobs
        unmasked = forward.token_logprobs(batch.input_ids, batch.attention_mask, batch.response_mask).logprobs
    mask = batch.response_mask.bool()
    torch.testing.assert_close(scored[mask], batch.rollout_logprobs[mask], atol=2e-4, rtol=0)
    # the grammar moves real mass: inside a call the unrestricted policy puts most of it elsewhere
    gap = (scored - unmasked)[mask]
    assert (gap >= -1e-5).all() and gap.max() > 1.0


def test_greedy_constrained_decoding_is_deterministic(setup):
    _, first = rollouts(setup, constrained=True, seed=0, temperature=0.0)
    _, again = rollouts(setup, constrained=True, seed=5, temperature=0.0)
    assert [t.token_ids for t in first] == [t.token_ids for t in again]


def test_copy_by_kind_fills_every_id_argument_with_an_id_of_its_kind(setup):
    _, _, chat = setup
    _, trajectories = rollouts(setup, constrained=True, seed=2, copy=True, by_kind=True)
    tag_of = {argument: kind.tag for kind in AIRLINE_ID_KINDS for argument in kind.arguments}
    filled = 0
    for _, turn in finished_turns(trajectories, chat.eos_token_ids):
        for name, value in (turn.step.arguments or {}).items():
            if name in tag_of:
                assert word_kind(value, AIRLINE_ID_KINDS) == tag_of[name], (turn.step.name, name, value)
                filled += 1
    assert filled >= 1


def test_copy_by_kind_needs_the_domains_id_kinds(setup):
    _, model, chat = setup
    config = RolloutConfig(constrain_tool_calls=True, copy_arguments=True, copy_by_kind=True)
    with pytest.raises(ValueError, match="copy_by_kind"):
        RolloutEngine(model, chat, config)
