"""``GRPOTrainer.step``: one whole step, what ``train()`` logs for it, under names from one vocabulary."""
from __future__ import annotations

import json
import math

import pytest
import torch
from helpers import fast_grpo_config

from agentgrpo import metric_names as metric
from agentgrpo.algos import OBJECTIVE_METRICS, get_advantage_estimator
from agentgrpo.train.batch import Dropped
from agentgrpo.train.grpo import GRPOTrainer
from agentgrpo.train.grpo_config import GRPOConfig
from agentgrpo.train.step_plan import LOGPROB_CHANGE_METRICS


def fast_config(policy_dir, run_dir, *overrides: str) -> GRPOConfig:
    return fast_grpo_config(policy_dir, run_dir, "experiment=joint", "algo.entropy_coef=0.05", *overrides)


def without_timings(metrics: dict) -> dict:
    """The metrics that do not depend on the machine's speed; NaN and ±inf as None (as metrics.jsonl logs them)."""
    return {key: None if isinstance(value, float) and not math.isfinite(value) else value
            for key, value in metrics.items() if not key.startswith("perf/")}


@pytest.fixture(scope="module")
def trained_run(tiny_policy_dir, tmp_path_factory):
    """A two-step ``train()`` run: its metrics.jsonl records."""
    run_dir = tmp_path_factory.mktemp("train")
    GRPOTrainer(fast_config(tiny_policy_dir, run_dir)).train()
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_train_logs_exactly_what_step_returns(tiny_policy_dir, tmp_path, trained_run):
    trainer = GRPOTrainer(fast_config(tiny_policy_dir, tmp_path))
    for step, record in enumerate(trained_run):
        metrics = trainer.step(step)
        assert record["step"] == step + 1
        # float64 values round-trip through JSON exactly: every non-timing metric equals the logged one
        assert without_timings(metrics) == without_timings({k: v for k, v in record.items() if k != "step"})
        phases = (metric.PERF_ROLLOUT_S, metric.PERF_SCORE_S, metric.PERF_OLD_LOGPROB_S, metric.PERF_UPDATE_S,
                  metric.PERF_LLD_S)
        assert metrics[metric.PERF_STEP_S] == pytest.approx(sum(metrics[key] for key in phases))
        batch = trainer.last_batch
        assert batch is not None and batch.input_ids.shape[0] == 4  # 2 tasks × G = 2, none left out
        assert metrics[metric.REWARD_NON_FINITE] == 0.0


def test_step_leaves_out_unusable_episodes(tiny_policy_dir, tmp_path):
    """What ``train()`` does each step, ``step()`` does: an episode whose reward is NaN leaves the batch
    (``drop_unusable``), and its group, left with one episode, is skipped."""
    trainer = GRPOTrainer(fast_config(tiny_policy_dir, tmp_path))
    score = trainer.groups.score

    def score_one_nan(trajectories):
        score(trajectories)
        trajectories[0].info["total_reward"] = math.nan

    trainer.groups.score = score_one_nan
    metrics = trainer.step(0)
    assert metrics[metric.REWARD_NON_FINITE] == 1.0 and metrics[metric.ROLLOUT_SKIPPED_GROUPS] == 1.0
    assert trainer.last_batch.input_ids.shape[0] == 2  # the other group's two episodes
    assert math.isfinite(metrics[metric.LOSS_TOTAL])


def test_every_logged_name_is_in_the_vocabulary(trained_run):
    logged = {key for record in trained_run for key in record if key != "step"}
    assert logged and all(metric.is_step_metric(name) for name in logged), sorted(
        name for name in logged if not metric.is_step_metric(name))
    assert metric.rollout_end("max_turns") == "rollout/end_max_turns"
    assert metric.prm_rule("tool_error") == "prm/tool_error_per_traj"
    assert not metric.is_step_metric("rollout/end_") and not metric.is_step_metric("algo/lld")


def test_names_spelt_outside_the_vocabulary_module_are_in_it():
    """``agentgrpo.algos`` imports nothing from the package, so it spells its metric names itself."""
    estimator = get_advantage_estimator("grpo")
    advantages = estimator(torch.tensor([1.0, 0.0]), ["g", "g"], torch.ones(2, 3))
    spelt_elsewhere = [*OBJECTIVE_METRICS, *advantages.metrics, *Dropped().metrics(), *LOGPROB_CHANGE_METRICS]
    assert set(spelt_elsewhere) <= metric.STEP_METRICS, set(spelt_elsewhere) - metric.STEP_METRICS
    assert all(name.count("/") == 1 and name == name.lower() for name in metric.STEP_METRICS)


def test_the_vocabulary_module_imports_nothing_of_the_package():
    """diagnose, report and eval import it: it must not pull in torch or the trainer."""
    import subprocess
    import sys

    code = ("import sys, agentgrpo.metric_names; "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('agentgrpo.')))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "['agentgrpo.metric_names']"
