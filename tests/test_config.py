"""Layered configs: experiments, overrides, and errors that name the key."""
from __future__ import annotations

import re

import pytest

from agentgrpo.config import (
    ABSENT,
    ConfigError,
    available_experiments,
    differing_keys,
    flatten_keys,
    load_config,
    to_dict,
)
from agentgrpo.eval.evaluator import EvalConfig
from agentgrpo.train.grpo_config import GRPOConfig
from agentgrpo.train.sft_config import SFTConfig

EXPECTED = {
    "vanilla": ("grpo", None, 0.0, 0.0),
    "turn_discount": ("turn_discount", 1.05, 0.0, 0.0),
    "lata": ("lata", None, 0.0, 0.0),
    "prm_lite": ("grpo", None, 0.3, 0.0),
    "joint": ("lata", None, 0.3, 0.0),
    "llds": ("grpo", None, 0.0, 0.2),
    "joint_llds": ("lata", None, 0.3, 0.2),
    "joint_turn": ("lata", None, 0.3, 0.0),
}


def test_every_experiment_is_a_few_values():
    assert sorted(available_experiments()) == sorted(EXPECTED)
    for name, (estimator, alpha, process, llds) in EXPECTED.items():
        config = load_config(GRPOConfig, [f"experiment={name}"], defaults="grpo.yaml")
        assert config.experiment == name
        assert (config.algo.adv_estimator, config.algo.turn_discount_alpha) == (estimator, alpha)
        assert (config.reward.process_coef, config.algo.llds_coef) == (process, llds)
        assert config.algo.turn_credit_coef == (0.3 if name == "joint_turn" else 0.0)
        # a process reward is a tie-breaker: groups that differ only by it stay near zero advantage
        assert config.algo.adv_std_eps == (0.1 if process > 0 else 1e-6)
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
    ("rollout.copy_by_kind=true", "rollout.copy_by_kind=True is invalid: needs rollout.copy_arguments=true"),
    ("rollout.copy_from_evidence=true", "rollout.copy_from_evidence=True is invalid: needs rollout.copy_arguments"),
    ("policy.cpu_autocast=maybe", "policy.cpu_autocast: invalid value 'maybe', expected a bool or one of ['auto']"),
    ("env.oracle_goal=thinking", "env.oracle_goal: invalid value 'thinking', expected a bool or one of ['think']"),
])
def test_bad_values_fail_at_start_naming_the_key(override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(GRPOConfig, [override], defaults="grpo.yaml")


def test_packaged_configs_and_the_quickstart_overrides_load():
    from agentgrpo.jobs.quickstart import QUICKSTART_DEFAULTS, SAMPLER_OLD_LOGPROBS, grpo_overrides

    for name in available_experiments():
        for extra in ([], grpo_overrides(name, [])):
            config = load_config(GRPOConfig, [f"experiment={name}", *extra], defaults="grpo.yaml")
            assert config.experiment == name
        # the sampler's log-probs stand in for the old ones only where LLDS is off
        assert (SAMPLER_OLD_LOGPROBS in grpo_overrides(name, [])) == (config.algo.llds_coef == 0)
    sft = load_config(SFTConfig, QUICKSTART_DEFAULTS["sft"], defaults="sft.yaml")
    # the tiny preset learns which slot to copy before SFT, and keeps it during SFT
    assert (sft.env.delexicalise, sft.trainer.copy_warmup_task, sft.trainer.copy_warmup_steps,
            sft.trainer.copy_mix_weight) == (True, "slot", 300, 0.5)
    load_config(EvalConfig, QUICKSTART_DEFAULTS["eval"], defaults="eval.yaml")


def test_the_smollm2_quickstart_preset_is_the_measured_recipe():
    """Its stages load, and its SFT is the one docs/results/write-levers.md measured (runs/smol-calc.sh)."""
    from agentgrpo.jobs.quickstart import PRESETS, grpo_overrides

    sft = load_config(SFTConfig, PRESETS["smollm2"]["sft"], defaults="sft.yaml")
    assert (sft.policy.init, sft.prompt_style, sft.env.train_worlds, sft.env.delexicalise, sft.env.oracle_arithmetic,
            sft.data.demos_per_task, sft.trainer.epochs, sft.trainer.lr, sft.trainer.batch_size,
            sft.policy.cpu_autocast) == ("smollm2-135m", "compact", 12, True, "calculator", 1, 2, 5e-5, 4, "auto")
    assert (sft.trainer.copy_warmup_steps, sft.trainer.copy_mix_weight) == (0, 0)  # it copies as it ships
    grpo = load_config(GRPOConfig, ["experiment=joint", *grpo_overrides("joint", [], "smollm2")], defaults="grpo.yaml")
    assert (grpo.trainer.micro_batch_size, grpo.trainer.old_logprobs, grpo.trainer.lr, grpo.policy.cpu_autocast,
            grpo.trainer.group_size) == (1, "recompute", 2e-5, "auto", 8)
    evaluation = load_config(EvalConfig, PRESETS["smollm2"]["eval"], defaults="eval.yaml")
    assert (evaluation.policy.cpu_autocast, evaluation.heldout_seed, evaluation.tasks_per_family) == ("auto", 1, 9)


@pytest.mark.parametrize("estimator, agg, ok", [
    ("grpo", "seq-mean-token-sum", True),     # A/L, summed per sequence: GRPO's seq-mean-token-mean
    ("lata", "seq-mean-token-sum-norm", True),
    ("dr_grpo", "token-mean", True),          # no length factor in the advantage
    ("grpo", "token-mean", False),            # 1/L in the advantage, then divided by tokens again
    ("lata", "seq-mean-token-mean", False),
    ("turn_discount", "seq-mean-token-mean", False),
])
def test_estimator_and_aggregation_must_not_divide_by_the_length_twice(estimator, agg, ok):
    overrides = [f"algo.adv_estimator={estimator}", f"algo.loss_agg={agg}"]
    if ok:
        assert load_config(GRPOConfig, overrides, defaults="grpo.yaml").algo.loss_agg == agg
    else:
        with pytest.raises(ConfigError, match=r"algo\.loss_agg=.*algo\.adv_estimator=.*twice"):
            load_config(GRPOConfig, overrides, defaults="grpo.yaml")


def test_llds_that_can_never_act_is_rejected():
    """One update per rollout with recomputed old log-probs: old_logp == logp, LLDS is 0 by construction."""
    single = ["experiment=llds", "trainer.mini_batch_size=32", "trainer.ppo_epochs=1"]
    never_acts = r"^algo\.llds_coef=0\.2 never acts.*trainer\.mini_batch_size.*trainer\.ppo_epochs"
    with pytest.raises(ConfigError, match=never_acts):
        load_config(GRPOConfig, single, defaults="grpo.yaml")
    for fix in ("trainer.ppo_epochs=2", "algo.llds_coef=0"):
        load_config(GRPOConfig, [*single, fix], defaults="grpo.yaml")
    # the sampler's log-probs are another numeric path: LLDS would not be 0 on unchanged weights
    with pytest.raises(ConfigError, match=r"^algo\.llds_coef=0\.2 with trainer\.old_logprobs=rollout"):
        load_config(GRPOConfig, ["experiment=llds", "trainer.old_logprobs=rollout"], defaults="grpo.yaml")
    load_config(GRPOConfig, ["experiment=joint", "trainer.old_logprobs=rollout"], defaults="grpo.yaml")
    assert load_config(GRPOConfig, ["experiment=llds"], defaults="grpo.yaml").llds_active


def test_interpolations_resolve_and_a_bad_one_names_its_key():
    config = load_config(GRPOConfig, ["run_dir=runs/${experiment}-${seed}", "experiment=joint"], defaults="grpo.yaml")
    assert config.run_dir == "runs/joint-0"
    with pytest.raises(ConfigError, match=r"^trainer\.lr: cannot resolve .*'nope'"):
        load_config(GRPOConfig, ["trainer.lr=${nope}"], defaults="grpo.yaml")


def test_choices_come_from_the_algos_registry():
    from agentgrpo.algos import AGG_MODES, GATES, KL_KINDS

    for key, names in (("algo.loss_agg", AGG_MODES), ("algo.llds_gate", GATES), ("algo.kl_kind", KL_KINDS)):
        for name in names:
            overrides = [f"{key}={name}"] + (["algo.adv_estimator=dr_grpo"] if key == "algo.loss_agg" else [])
            load_config(GRPOConfig, overrides, defaults="grpo.yaml")


def test_differing_keys_compares_dotted_keys_with_patterns_defaults_and_assumed_values():
    saved = {"seed": 0, "trainer": {"lr": 1e-5, "steps": 4}, "logging": {"project": "a"}, "extra": {}}
    assert flatten_keys(saved) == {"seed": 0, "trainer.lr": 1e-5, "trainer.steps": 4, "logging.project": "a",
                                   "extra": {}}
    new = {**saved, "trainer": {"lr": 2e-5, "steps": 8}, "logging": {"project": "b"}}
    assert differing_keys(saved, new) == {"trainer.lr": (1e-5, 2e-5), "trainer.steps": (4, 8),
                                          "logging.project": ("a", "b")}
    assert differing_keys(saved, new, may_change=("logging.*", "trainer.steps")) == {"trainer.lr": (1e-5, 2e-5)}
    added = {**saved, "algo": {"knob": 1}}
    assert differing_keys(saved, added) == {"algo.knob": (ABSENT, 1)}
    assert differing_keys(saved, added, defaults={"algo": {"knob": 1}}) == {}  # new, at its default
    assert differing_keys(added, saved, defaults={"algo": {"knob": 1}}) == {"algo.knob": (1, ABSENT)}  # removed
    assert differing_keys(saved, added, assumed={"algo.knob": 0}) == {"algo.knob": (0, 1)}
    assert differing_keys(saved, added, assumed={"algo.knob": 1}) == {}
    assert differing_keys(saved, {**saved, "extra": {"x": 1}}) == {"extra": ({}, ABSENT), "extra.x": (ABSENT, 1)}


def test_a_choice_named_off_survives_yamls_reading_of_it_as_false():
    # key=off reaches the schema as False (YAML 1.1); a choice list holding exactly one such word takes it back
    def preserve(value: str) -> str:
        config = load_config(GRPOConfig, [f"trainer.preserve_writes={value}"], defaults="grpo.yaml")
        return config.trainer.preserve_writes

    assert preserve("off") == "off" and preserve("hinge") == "hinge"
    with pytest.raises(ConfigError, match=r"trainer.preserve_writes: invalid value True, expected one of"):
        preserve("yes")
