"""``algo.turn_discount_unit``: the per-turn discount in the native trainer (DESIGN §3.3, ``unit: turn``)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import SMALL_ENV_OVERRIDES

from agentgrpo.agent.types import Trajectory, Turn
from agentgrpo.algos import ObjectiveSettings
from agentgrpo.config import ConfigError, load_config, to_dict
from agentgrpo.envs.types import Step
from agentgrpo.integrations.verl.estimators import verl_token_advantages
from agentgrpo.integrations.verl.settings import OBJECTIVE_ENV, objective_json
from agentgrpo.train.grpo import GRPOTrainer
from agentgrpo.train.grpo_config import GRPOConfig
from agentgrpo.train.resume import config_differences

ALPHA = 2.0
A = 0.5 / (0.5 + 1e-6)
"""GRPO advantage of rewards (1, 0) in one group: ±(R − mean) / (std + ε), std = 0.5."""

# Two two-turn trajectories, 3 response tokens each: turns of 2 + 1 tokens, and of 1 + 2.
#   token unit: k = 0, 1, 2 → α^2, α^1, α^0 = 4, 2, 1 (mean 7/3) → 12/7, 6/7, 3/7 in both rows
#   turn unit:  row 0: turn 0, 0, 1 → 2, 2, 1 (mean 5/3) → 6/5, 6/5, 3/5
#               row 1: turn 0, 1, 1 → 2, 1, 1 (mean 4/3) → 3/2, 3/4, 3/4
# times A·n(L) with the turn_discount estimator's n(L) = 1/L = 1/3, and −A for the failed row.
EXPECTED = {
    "token": [[A / 3 * w for w in (12 / 7, 6 / 7, 3 / 7)], [-A / 3 * w for w in (12 / 7, 6 / 7, 3 / 7)]],
    "turn": [[A / 3 * w for w in (6 / 5, 6 / 5, 3 / 5)], [-A / 3 * w for w in (3 / 2, 3 / 4, 3 / 4)]],
}


def two_turn_trajectories() -> list[Trajectory]:
    """prompt [5, 6] · turn 0 · an observation · turn 1; rewards 1 and 0 in one group."""
    layouts = [([7, 8], [10]), ([11], [13, 14])]
    trajectories = []
    for index, ((first, second), reward) in enumerate(zip(layouts, (1.0, 0.0))):
        step = Step("respond", "respond", {"content": "x"}, "ok", text="x")
        traj = Trajectory(task_id="t", group_id="g", sample_index=index)
        traj.token_ids = [5, 6, *first, 9, *second]
        traj.response_mask = [0, 0, *[1] * len(first), 0, *[1] * len(second)]
        traj.logprobs = [0.0] * len(traj.token_ids)
        second_start = 2 + len(first) + 1
        traj.steps = [step, step]
        traj.turns = [Turn(2, 2 + len(first), step), Turn(second_start, second_start + len(second), step)]
        traj.outcome_reward = reward
        traj.info["total_reward"] = reward
        trajectories.append(traj)
    return trajectories


def config(policy_dir, run_dir, *overrides: str) -> GRPOConfig:
    return load_config(GRPOConfig, [
        *SMALL_ENV_OVERRIDES, f"policy.init={policy_dir}", f"run_dir={run_dir}", "logging.progress=false",
        "experiment=turn_discount", f"algo.turn_discount_alpha={ALPHA}", *overrides,
    ], defaults="grpo.yaml")


@pytest.mark.parametrize("unit", ["token", "turn"])
def test_the_trainer_discounts_by_the_configured_unit(tiny_policy_dir, tmp_path, unit, monkeypatch):
    overrides = [] if unit == "token" else ["algo.turn_discount_unit=turn"]  # token: the default
    trainer = GRPOTrainer(config(tiny_policy_dir, tmp_path, *overrides))
    assert trainer.config.algo.turn_discount_unit == unit
    batch, _ = trainer.compute_advantages(two_turn_trajectories())
    sampled = batch.response_mask.bool()
    rows = [batch.advantages[row][sampled[row]].tolist() for row in range(2)]
    assert rows == [pytest.approx(values, rel=1e-6) for values in EXPECTED[unit]]
    assert torch.all(batch.advantages[~sampled] == 0)

    # veRL's estimator, given the same batch and the same objective (exported whole, as the
    # launch scripts do), computes the same token advantages
    monkeypatch.setenv(OBJECTIVE_ENV, objective_json(trainer.config.algo))
    rewards = torch.zeros_like(batch.response_mask)
    rewards[:, -1] = batch.scores
    verl, _ = verl_token_advantages("turn_discount", rewards, batch.response_mask, None,
                                    np.array(batch.group_ids, dtype=object))
    assert torch.allclose(verl, batch.advantages, rtol=1e-6, atol=0)


def test_the_unit_is_checked_in_one_line_naming_the_key():
    with pytest.raises(ConfigError, match=r"^algo\.turn_discount_unit: invalid value 'step', expected one of "
                                          r"\['token', 'turn'\]$"):
        load_config(GRPOConfig, ["algo.turn_discount_unit=step"], defaults="grpo.yaml")
    with pytest.raises(ValueError, match=r"^algo\.turn_discount_unit='step' is invalid: must be one of"):
        ObjectiveSettings(adv_estimator="turn_discount", turn_discount_unit="step").check(key_format="algo.{}")
    # an estimator that does not discount would silently ignore it
    with pytest.raises(ConfigError, match=r"algo\.turn_discount_unit='turn' is invalid: has no effect with "
                                          r"algo\.adv_estimator=lata.*set algo\.adv_estimator=turn_discount"):
        load_config(GRPOConfig, ["algo.adv_estimator=lata", "algo.turn_discount_unit=turn"], defaults="grpo.yaml")
    for estimator in ("turn_discount", "turn_discount_lata"):
        ObjectiveSettings(adv_estimator=estimator, turn_discount_unit="turn").check()


def test_checkpoints_from_before_the_setting_resume_with_its_default():
    new = to_dict(load_config(GRPOConfig, ["experiment=turn_discount"], defaults="grpo.yaml"))
    saved = {**new, "algo": {k: v for k, v in new["algo"].items() if k != "turn_discount_unit"}}
    assert config_differences(saved, new, to_dict(GRPOConfig())) == {}
    turn = to_dict(load_config(GRPOConfig, ["experiment=turn_discount", "algo.turn_discount_unit=turn"],
                               defaults="grpo.yaml"))
    differences = config_differences(saved, turn, to_dict(GRPOConfig()))
    assert list(differences) == ["algo.turn_discount_unit"] and differences["algo.turn_discount_unit"][1] == "turn"
