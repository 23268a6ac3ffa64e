"""GRPO with an LLM user whose server fails: an aborted episode leaves its group, a group left
with fewer than two is skipped, ``rollout/aborted`` counts them, and the step goes on."""
from __future__ import annotations

import json
import math

import pytest
from flaky_server import FlakyServer
from helpers import SMALL_ENV_OVERRIDES

from agentgrpo.agent.types import Trajectory
from agentgrpo.config import EndpointError, load_config
from agentgrpo.train.batch import drop_unusable
from agentgrpo.train.grpo import derive_seed, train_grpo
from agentgrpo.train.grpo_config import GRPOConfig


def episode(group: str, termination: str = "user_stop", outcome: float = 0.0) -> Trajectory:
    return Trajectory(task_id=group, group_id=group, outcome_reward=outcome, termination=termination)


def test_drop_unusable_by_hand():
    batch = [episode("a"), episode("a", "aborted", math.nan), episode("a"),  # a keeps two
             episode("b"), episode("b", "aborted", math.nan),                  # b is left alone: skipped
             episode("c", outcome=math.nan), episode("c"),                     # non-finite: c left alone
             episode("d")]                                                    # a group of one from the start
    kept, dropped = drop_unusable(batch)
    assert kept == [batch[0], batch[2], batch[7]]
    assert (dropped.aborted, dropped.non_finite, dropped.skipped_groups, dropped.skipped_episodes) == (2, 1, 2, 2)
    assert dropped.metrics() == {"reward/non_finite": 1.0, "rollout/aborted": 2.0, "rollout/skipped_groups": 2.0}
    gone = [episode("a", "aborted", math.nan), episode("b", "aborted", math.nan)]
    gone[0].info["error"] = "HTTP 500 from the user server"
    with pytest.raises(EndpointError, match="all 2 episodes of the batch were aborted.*HTTP 500"):
        drop_unusable(gone)


def test_grpo_steps_go_on_when_an_llm_user_request_fails(tiny_policy_dir, tmp_path):
    doomed_seed = derive_seed("user", 0, 0, 0, 0)  # step 0, first task, first sample

    def plan(n: int, body: dict) -> str:
        return "500" if body.get("seed") == doomed_seed else "ok"

    with FlakyServer(plan) as server:
        config = load_config(GRPOConfig, [
            *SMALL_ENV_OVERRIDES, f"policy.init={tiny_policy_dir}", f"run_dir={tmp_path}",
            "env.user.kind=llm", f"env.user.base_url={server.url}", "env.user.model=flaky",
            "env.user.request.max_retries=1", "env.user.request.backoff=0.01",
            "rollout.max_turns=1", "rollout.max_new_tokens=4", "rollout.max_total_tokens=900",
            "trainer.steps=2", "trainer.tasks_per_step=2", "trainer.group_size=2", "trainer.mini_batch_size=2",
            "trainer.micro_batch_size=2", "algo.kl_coef=0", "trainer.lld_diagnostic=false",
            "trainer.old_logprobs=rollout", "logging.progress=false",
        ], defaults="grpo.yaml")
        train_grpo(config)
    first, second = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert (first["rollout/aborted"], first["rollout/skipped_groups"]) == (1.0, 1.0)  # its mate left alone
    assert first["algo/groups"] == 1 and math.isfinite(first["loss/total"])  # trained on the other group
    assert (second["rollout/aborted"], second["rollout/skipped_groups"]) == (0.0, 0.0)
    assert second["algo/groups"] == 2
    assert server.behaviours.count("500") == 2  # the doomed user's request and its one retry
