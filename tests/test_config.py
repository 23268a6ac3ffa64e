"""Layered configs: experiments, overrides, and errors that name the key."""
from __future__ import annotations

import pytest

from agentgrpo.config import ConfigError, available_experiments, load_config, to_dict
from agentgrpo.eval.evaluator import EvalConfig
from agentgrpo.train.grpo_config import GRPOConfig
from agentgrpo.train.sft import SFTConfig

EXPECTED = {
    "vanilla": ("grpo", None, 0.0, 0.0),
    "turn_discount": ("turn_discount", 1.05, 0.0, 0.0),
    "lata": ("lata", None, 0.0, 0.0),
    "prm_lite": ("grpo", None, 0.3, 0.0),
    "joint": ("lata", None, 0.3, 0.0),
    "llds": ("grpo", None, 0.0, 0.2),
    "joint_llds": ("lata", None, 0.3, 0.2),
}


def test_every_experiment_is_a_few_values():
    assert sorted(available_experiments()) == sorted(EXPECTED)
    for name, (estimator, alpha, process, llds) in EXPECTED.items():
        config = load_config(GRPOConfig, [f"experiment={name}"], defaults="grpo.yaml")
        assert config.experiment == name
        assert (config.algo.adv_estimator, config.algo.turn_discount_alpha) == (estimator, alpha)
        assert (config.reward.process_coef, config.algo.llds_coef) == (process, llds)
        # the seed's shared hyper-parameters
        assert (config.trainer.group_size, config.trainer.tasks_per_step) == (8, 4)
        assert (config.algo.clip_low, config.algo.kl_coef, config.algo.kl_kind) == (0.2, 0.01, "k3")


def test_overrides_win_and_the_config_round_trips():
    config = load_config(GRPOConfig, ["experiment=joint", "trainer.steps=40", "seed=1", "env.splits.unseen=5"],
                         defaults="grpo.yaml")
    assert (config.trainer.steps, config.seed, config.env.splits.unseen) == (40, 1, 5)
    assert to_dict(config)["algo"]["adv_estimator"] == "lata"
    assert load_config(SFTConfig, [], defaults="sft.yaml").data.splits == ["covered_seen"]
    assert load_config(EvalConfig, ["trials=2"], defaults="eval.yaml").trials == 2


@pytest.mark.parametrize("override, message", [
    ("trainer.stepz=3", "unknown config key 'trainer.stepz'"),
    ("algo.loss_agg=bogus", "algo.loss_agg: invalid value 'bogus'"),
    ("trainer.steps=abc", "trainer.steps: expected int"),
    ("trainer.mini_batch_size=5", "trainer.mini_batch_size (5) must divide"),
    ("experiment=nope", "experiment='nope' is unknown"),
    ("env.source=tau_bench", "env.data_dir is required"),
    ("algo.clip_low=-1", "algo.clip_low"),
    ("novalue", "not of the form key=value"),
])
def test_bad_values_fail_at_start_naming_the_key(override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(GRPOConfig, [override], defaults="grpo.yaml")
