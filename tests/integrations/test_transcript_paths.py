"""One way from a transcript to steps: the native trainer (recorded steps), veRL's reward and
TRL's reward (transcripts) give one episode the same PRM-Lite score, malformed turns and an
episode that ends on a failing call included."""

from __future__ import annotations

import pytest

from agentgrpo.agent.types import Trajectory
from agentgrpo.integrations.trl.rewards import PRMLiteReward
from agentgrpo.integrations.verl.episode import AirlineEpisode, env_config_json
from agentgrpo.integrations.verl.reward import score_transcript
from agentgrpo.rewards import PRMLite, parse_messages
from agentgrpo.rewards.messages import opening_messages

PRM = PRMLite()
MALFORMED = '<tool_call>\n{"name": "get_user_details", "arguments": {\n</tool_call>'
FAILING = '<tool_call>\n{"name": "get_reservation_details", "arguments": {"reservation_id": "ZZZZZZ"}}\n</tool_call>'


def _episode(env_config, oracle_writer, max_turns: int) -> AirlineEpisode:
    """The oracle on a change-flight task with a malformed turn before every third move,
    ending with a failing call on its last allowed turn."""
    extra = {"task_id": "gen-0-28-change_flight", "env_config": env_config_json(env_config)}
    episode = AirlineEpisode.from_extra_info(extra, max_turns=max_turns)
    writer = oracle_writer(episode.env.domain, episode.env.task)
    observation = episode.start()[-1]["content"]
    while not episode.done:
        if episode.num_turns == max_turns - 1:
            text = FAILING
        elif episode.num_turns % 3 == 1:
            text = MALFORMED
        else:
            text = writer.turn(observation)
        reply = episode.act(text)
        observation = reply["content"] if reply else ""
    return episode


@pytest.mark.parametrize("max_turns", [5, 8])
def test_recorded_steps_and_both_rewards_agree(env_config, oracle_writer, max_turns):
    episode = _episode(env_config, oracle_writer, max_turns)
    steps, transcript = episode.steps, episode.transcript
    assert episode.termination == "max_turns" and steps[-1].error and steps[-1].kind == "tool"
    assert any(s.kind == "invalid" for s in steps)
    assert parse_messages(transcript).steps == steps
    native = PRM.score_steps(steps, opening_messages(transcript))
    assert "P9" in native.fired_per_step[-1]  # the failing last call is charged everywhere
    assert score_transcript(transcript, 0.0, coef=1.0)["process_score"] == native.process_score
    trl = PRMLiteReward(coef=1.0)(prompts=[None], completions=[None], transcript=[transcript])
    assert trl == [native.process_score]

    # the rollout engine's trajectory of the same turns: ``messages`` is what the policy saw
    # (no answer to the last turn), ``transcript`` the complete record that TRL and eval log
    seen = transcript[:-1]
    traj = Trajectory(task_id="t", group_id="g", messages=seen, steps=list(steps))
    assert traj.transcript == transcript
    assert PRM.score_trajectory(traj) == native == PRM.score_messages(traj.transcript)
