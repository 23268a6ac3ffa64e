"""``agentgrpo hosts``: every experiment's numbers, read back by each host's own code, equal the native config's.

For every experiment the command's printed output is taken as the launch scripts take it,
and the host reads it: veRL's Hydra composes ``airline_grpo.yaml`` with the overrides, the
plugin's own readers (``read_objective`` of the one ``AGENTGRPO_OBJECTIVE`` value,
``estimator_settings``, ``loss_settings``, ``prm_coef``, ``checks.updates_per_rollout``) and
veRL's config dataclasses read the result, and the estimator and loss veRL's registries hand
out are run on a batch against ``agentgrpo.algos`` called with the native values; TRL's
``AgentGRPOConfig`` (and once, ``AgentGRPOTrainer``) is built from the printed fields.
``joint_turn`` (per-turn PRM credit) is refused on both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from agentgrpo.algos import get_advantage_estimator, grpo_objective, preserve_token_count
from agentgrpo.cli import main
from agentgrpo.config import ConfigError, available_experiments
from agentgrpo.integrations.host_settings import TRL_SOURCES, load_native, refuse_trl_overrides

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "agentgrpo" / "integrations" / "verl" / "configs"
REFUSED = {"joint_turn": "algo.turn_credit_coef=0.3"}
SUPPORTED = [name for name in available_experiments() if name not in REFUSED]


def printed(capsys, host: str, *overrides: str) -> dict:
    """What ``agentgrpo hosts HOST --format json OVERRIDES`` prints."""
    assert main(["hosts", host, "--format", "json", *overrides]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_seven_variants_and_joint_turn_are_all_here():
    assert len(SUPPORTED) == 7 and set(REFUSED) <= set(available_experiments())
    assert {"vanilla", "turn_discount", "lata", "prm_lite", "joint", "llds", "joint_llds"} == set(SUPPORTED)


def _multi_turn_batch(rows: int = 8, length: int = 14, group: int = 4):
    """Scores, group ids, a response mask with 1–3 assistant turns per row, veRL's reward layout."""
    g = torch.Generator().manual_seed(rows * length)
    mask = torch.zeros(rows, length)
    for row in range(rows):
        start = 0
        for _ in range(1 + row % 3):
            span = int(torch.randint(1, 4, (1,), generator=g))
            mask[row, start : start + span] = 1
            start += span + 1 + row % 2
    scores = torch.randint(0, 2, (rows,), generator=g).float() + 0.1 * torch.rand(rows, generator=g)
    token_rewards = torch.zeros(rows, length)
    last = (mask.cumsum(-1) == mask.sum(-1, keepdim=True)) & mask.bool()
    token_rewards[last] = scores.repeat_interleave(last.sum(-1))
    ids = np.array([f"task{r // group}" for r in range(rows)], dtype=object)
    return scores, ids, mask, token_rewards


@pytest.fixture
def verl_host(monkeypatch):
    """``experiment -> (native config, composed veRL config)`` with the printed environment set."""
    pytest.importorskip("verl")
    from agentgrpo.integrations.verl.dry_run import compose

    def build(capsys, experiment: str):
        native = load_native([f"experiment={experiment}"])
        out = printed(capsys, "verl", f"experiment={experiment}")
        for key in [k for k in os.environ if k.startswith("AGENTGRPO_")]:
            monkeypatch.delenv(key)
        for key, value in out["env"].items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("AGENTGRPO_VERL_CONFIGS", str(CONFIGS))
        # recomputed old log-probs (the launch scripts' default with λ > 0; bypass is a memory choice)
        overrides = [*out["overrides"], "algorithm.rollout_correction.bypass_mode=false"]
        return native, compose(str(CONFIGS), "airline_grpo", overrides)

    return build


@pytest.mark.verl
@pytest.mark.parametrize("experiment", SUPPORTED)
def test_verl_reads_the_native_numbers(experiment, verl_host, capsys):
    from verl.utils.config import omega_conf_to_dataclass

    from agentgrpo.integrations.verl import checks
    from agentgrpo.integrations.verl.estimators import estimator_settings
    from agentgrpo.integrations.verl.losses import loss_settings
    from agentgrpo.integrations.verl.reward import prm_coef
    from agentgrpo.integrations.verl.settings import read_objective

    native, config = verl_host(capsys, experiment)
    algo, trainer = native.algo, native.trainer
    assert read_objective() == algo  # the objective reaches veRL whole
    assert config.algorithm.adv_estimator == f"agentgrpo_{algo.adv_estimator}"
    assert estimator_settings() == {
        "norm_by_std": algo.norm_by_std, "turn_discount_alpha": algo.turn_discount_alpha,
        "turn_discount_unit": algo.turn_discount_unit, "turn_credit_coef": 0.0, "eps": algo.adv_std_eps}
    actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    assert loss_settings() == {  # β and the entropy bonus: veRL's own terms (below)
        "llds_coef": algo.llds_coef, "llds_gate": algo.llds_gate, "loss_agg": algo.loss_agg,
        "importance": algo.importance, "clip_low": algo.clip_low, "clip_high": algo.clip_high,
        "kl_coef": 0.0, "kl_kind": algo.kl_kind, "entropy_coef": 0.0}
    assert (actor.use_kl_loss, actor.kl_loss_coef, actor.kl_loss_type, actor.entropy_coeff) == (
        algo.kl_coef > 0, algo.kl_coef, algo.kl_kind, algo.entropy_coef)
    assert prm_coef() == native.reward.process_coef
    assert checks.updates_per_rollout(config) == native.updates_per_rollout
    assert (config.data.train_batch_size, config.actor_rollout_ref.rollout.n) == (
        trainer.tasks_per_step, trainer.group_size)
    assert actor.ppo_mini_batch_size * trainer.group_size == trainer.mini_batch_size
    rollout = omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    assert rollout.temperature == native.rollout.temperature
    assert checks.launch_problems(config) == []


@pytest.mark.verl
@pytest.mark.parametrize("experiment", SUPPORTED)
def test_verls_estimator_and_loss_compute_the_native_values(experiment, verl_host, capsys):
    """The functions veRL's registries hand out, on the composed config, against ``agentgrpo.algos``
    called with the native config's values."""
    from verl.trainer.ppo import core_algos
    from verl.utils.config import omega_conf_to_dataclass

    import agentgrpo.integrations.verl  # noqa: F401  (registers the plugins)

    native, config = verl_host(capsys, experiment)
    algo = native.algo
    scores, ids, mask, token_rewards = _multi_turn_batch()
    ours, _ = core_algos.get_adv_estimator_fn(config.algorithm.adv_estimator)(
        token_level_rewards=token_rewards, response_mask=mask, config=config.algorithm, index=ids)
    expected = get_advantage_estimator(algo.adv_estimator)(scores, list(ids), mask, **algo.estimator_kwargs()).token
    assert torch.allclose(ours * mask, expected, rtol=1e-6, atol=1e-7)  # off the mask: the carried LLDS count

    g = torch.Generator().manual_seed(3)
    old = -2 * torch.rand(mask.shape, generator=g)
    logp = old + 0.2 * torch.randn(mask.shape, generator=g)
    actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    loss, _ = core_algos.get_policy_loss_fn(config.actor_rollout_ref.actor.policy_loss.loss_mode)(
        old_log_prob=old, log_prob=logp, advantages=expected, response_mask=mask.bool(),
        loss_agg_mode=actor.loss_agg_mode, config=actor, rollout_is_weights=None)
    counts = {"num_tokens": mask.sum(), "num_seqs": (mask.sum(-1) > 0).sum(),
              "num_preserve_tokens": preserve_token_count(expected, mask)}
    no_kl = replace(algo, kl_coef=0.0)  # veRL adds β·KL itself (test_objective_parity covers it)
    reference, _ = grpo_objective(logp, old, expected, mask, **no_kl.loss_kwargs(), **counts)
    assert torch.allclose(loss, reference, rtol=1e-6, atol=1e-7)
    if algo.llds_coef > 0:  # λ reached the loss: without it the value differs
        without, _ = grpo_objective(logp, old, expected, mask, **replace(no_kl, llds_coef=0.0).loss_kwargs(),
                                    **counts)
        assert not torch.allclose(loss, without)


@pytest.mark.trl
@pytest.mark.parametrize("experiment", SUPPORTED)
def test_trl_reads_the_native_numbers(experiment, capsys, tmp_path):
    pytest.importorskip("trl")
    from agentgrpo.integrations.trl import AgentGRPOConfig, PRMLiteReward

    native = load_native([f"experiment={experiment}"])
    out = printed(capsys, "trl", f"experiment={experiment}")
    args = AgentGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", **out["config"])
    algo, trainer = native.algo, native.trainer
    assert args.objective_settings == algo  # the objective reaches TRL whole
    # TRL's own copies, written from it (GRPOTrainer: epsilon_low = epsilon; epsilon_high falls back to epsilon)
    epsilon_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon
    assert (args.epsilon, epsilon_high) == (algo.clip_low, algo.clip_high)
    assert (args.scale_rewards == "group", args.importance_sampling_level, args.beta) == (
        algo.norm_by_std, algo.importance, algo.kl_coef)
    assert args.temperature == native.rollout.temperature
    # one process: a generation batch is one rollout, an optimizer step one mini-batch
    assert args.generation_batch_size == trainer.tasks_per_step * trainer.group_size
    assert args.num_generations == trainer.group_size
    assert args.per_device_train_batch_size * args.gradient_accumulation_steps == trainer.mini_batch_size
    assert (args.steps_per_generation * args.num_iterations // args.gradient_accumulation_steps
            == native.updates_per_rollout)
    assert PRMLiteReward(coef=out["reward"]["prm_coef"]).coef == native.reward.process_coef
    assert out["reward"]["prm_weights"] == native.reward.prm_weights


@pytest.mark.trl
def test_the_trl_trainer_takes_the_printed_config(capsys, tmp_path, bundle):
    """``AgentGRPOTrainer`` built from ``hosts trl experiment=joint_llds`` holds the native numbers
    where TRL keeps them (``epsilon_low``/``epsilon_high``, ``beta``, ``num_iterations``...)."""
    pytest.importorskip("trl")
    from datasets import Dataset

    from agentgrpo.integrations.trl import AgentGRPOConfig, AgentGRPOTrainer, PRMLiteReward
    from agentgrpo.policy.hf import build_policy, load_policy
    from agentgrpo.policy.tokenizer import domain_corpus

    overrides = ["experiment=joint_llds", "algo.clip_high=0.28", "algo.kl_coef=0.02", "trainer.ppo_epochs=2"]
    native = load_native(overrides)
    out = printed(capsys, "trl", *overrides)
    build_policy("tiny", domain_corpus(bundle.domain), tmp_path / "tiny", seed=0)
    model, tokenizer = load_policy(tmp_path / "tiny")  # from a directory: β > 0 loads the reference from it
    trainer = AgentGRPOTrainer(
        model=model, processing_class=tokenizer, reward_funcs=[PRMLiteReward(coef=out["reward"]["prm_coef"])],
        args=AgentGRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, report_to="none", max_steps=1,
                             **out["config"]),
        train_dataset=Dataset.from_dict({"prompt": [[{"role": "user", "content": "hi"}]] * 4}))
    algo = native.algo
    assert (trainer.epsilon_low, trainer.epsilon_high, trainer.beta) == (algo.clip_low, 0.28, 0.02)
    assert (trainer.num_iterations, trainer.num_generations, trainer.temperature) == (
        2, native.trainer.group_size, native.rollout.temperature)
    assert trainer.importance_sampling_level == algo.importance
    assert (trainer.args.objective_settings.llds_coef, trainer.args.objective_settings.adv_estimator) == (0.2, "lata")
    assert trainer.reward_funcs[0].coef == 0.3


@pytest.mark.parametrize("host", ["verl", "trl"])
def test_joint_turn_is_refused_in_one_line_naming_the_setting(host, capsys):
    assert main(["hosts", host, "experiment=joint_turn"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and REFUSED["joint_turn"] in err and "experiment=joint" in err


@pytest.mark.parametrize("host, overrides, named", [
    ("verl", ["trainer.mini_batch_size=4", "trainer.micro_batch_size=4"],
     "trainer.mini_batch_size=4 is not a multiple of trainer.group_size=8"),
    ("verl", ["reward.prm_weights=/x.yaml"], "reward.prm_weights=/x.yaml"),
    ("trl", ["algo.entropy_coef=0.01"], "algo.entropy_coef=0.01"),
    ("verl", ["trainer.dynamic_sampling=true"], "trainer.dynamic_sampling=true"),
    ("trl", ["trainer.task_sampler=frontier"], "trainer.task_sampler=frontier"),
    ("verl", ["trainer.write_task_share=0.5"], "trainer.write_task_share=0.5"),
    ("trl", ["trainer.demo_coef=0.5"], "trainer.demo_coef=0.5"),
    ("verl", ["trainer.success_coef=0.5"], "trainer.success_coef=0.5"),
    ("trl", ["trainer.preserve_writes=hinge"], "trainer.preserve_writes=hinge"),
    ("verl", ["rollout.constrain_tool_calls=true"], "rollout.constrain_tool_calls=true"),
    ("trl", ["rollout.constrain_tool_calls=true"], "rollout.constrain_tool_calls=true"),
])
def test_settings_a_host_cannot_reproduce_are_refused(host, overrides, named, capsys):
    assert main(["hosts", host, "experiment=vanilla", *overrides]) == 2
    assert named in capsys.readouterr().err


def test_trl_fields_the_experiment_sets_are_refused_naming_the_native_key():
    refuse_trl_overrides({"logging_steps": 1, "learning_rate": 1e-5})  # the host's own: fine
    with pytest.raises(ConfigError, match=r"beta \(set algo.kl_coef=...\), epsilon \(set algo.clip_low=...\)"):
        refuse_trl_overrides({"beta": 0.0, "epsilon": 0.3})
    with pytest.raises(ConfigError, match=r"objective \(set algo.\*=...\)"):
        refuse_trl_overrides({"objective": {"llds_coef": 0.3}})
    assert set(TRL_SOURCES.values()) >= {"algo.*", "algo.kl_coef", "rollout.temperature"}


def test_the_shell_form_is_what_the_launch_scripts_evaluate(capsys):
    """``eval "$(agentgrpo hosts verl ...)"`` in bash gives the JSON form's variables and overrides,
    and the objective arrives whole: one variable, the native ``algo`` section's JSON."""
    from agentgrpo.integrations.verl.settings import read_objective

    as_json = printed(capsys, "verl", "experiment=joint_llds", "algo.llds_coef=0.3")
    script = ('eval "$(' + f"'{sys.executable}'" + ' -m agentgrpo.cli hosts verl experiment=joint_llds '
              'algo.llds_coef=0.3)"; env | grep ^AGENTGRPO_ | sort; echo "$HOST_BYPASS_MODE"; '
              'printf "%s\\n" "${HOST_OVERRIDES[@]}"')
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTGRPO_")}
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert sorted(as_json["env"]) == ["AGENTGRPO_OBJECTIVE", "AGENTGRPO_PRM_COEF"]
    assert lines[:2] == sorted(f"{k}={v}" for k, v in as_json["env"].items())
    assert lines[2] == "false" and as_json["bypass_mode"] is False  # λ > 0: old log-probs recomputed
    assert lines[3:] == as_json["overrides"]
    assert "algorithm.adv_estimator=agentgrpo_lata" in lines
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENTGRPO_OBJECTIVE", lines[0].split("=", 1)[1])
        assert read_objective() == load_native(["experiment=joint_llds", "algo.llds_coef=0.3"]).algo


def test_the_command_loads_the_config_as_train_does(capsys, tmp_path):
    """--config and overrides layer as in ``agentgrpo train``; a bad key is one line naming it."""
    extra = tmp_path / "extra.yaml"
    extra.write_text("algo: {clip_high: 0.28}\nrollout: {temperature: 0.7}\n")
    out = printed(capsys, "trl", "--config", str(extra), "experiment=lata", "algo.kl_coef=0")
    objective = out["config"]["objective"]
    assert (objective["clip_high"], out["config"]["temperature"], objective["kl_coef"]) == (0.28, 0.7, 0.0)
    assert main(["hosts", "verl", "algo.bogus=1"]) == 2
    assert "algo.bogus" in capsys.readouterr().err
