"""The rollout engine's two views of an episode, from the one transcript builder: ``messages``
(what the policy saw, which the tokens encode) and ``transcript`` (the complete record, which
reads back as exactly the recorded steps)."""
from __future__ import annotations

import pytest
from helpers import small_env_config

from agentgrpo.agent.chat import ChatFormat
from agentgrpo.envs.airline.factory import build_env, make_env
from agentgrpo.policy.hf import load_policy, read_agent_config
from agentgrpo.rewards import PRMLite, parse_messages
from agentgrpo.rollout.config import RolloutConfig
from agentgrpo.rollout.engine import EpisodeSpec, RolloutEngine


@pytest.fixture(scope="module")
def trajectories(tiny_policy_dir):
    bundle = build_env(small_env_config())
    model, tokenizer = load_policy(tiny_policy_dir)
    chat = ChatFormat(tokenizer, bundle.domain.tool_schemas(), bundle.domain.policy,
                      **read_agent_config(tiny_policy_dir))
    task = bundle.tasks()[0]
    specs = [EpisodeSpec(make_env(bundle, task, small_env_config(), user_seed=g, max_steps=2), task.task_id, "g", g)
             for g in range(3)]
    engine = RolloutEngine(model, chat, RolloutConfig(max_turns=2, max_new_tokens=16, temperature=1.0))
    return chat, engine.run(specs, seed=5)


def test_the_transcript_reads_back_as_the_steps_and_messages_are_what_was_shown(trajectories):
    chat, trajs = trajectories
    prm = PRMLite()
    for traj in trajs:
        transcript = traj.transcript
        assert parse_messages(transcript).steps == traj.steps
        assert prm.score_messages(transcript) == prm.score_trajectory(traj)
        # every turn ended on max_turns or earlier: the last answer was never shown to the policy
        assert traj.messages == transcript[:-1]
        assert chat.openai_messages(chat.chat_messages(traj.messages)) == traj.messages
