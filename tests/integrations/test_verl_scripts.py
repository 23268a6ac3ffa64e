"""The veRL launch on veRL 0.9 as ``agentgrpo[verl]`` installs it: the default trainer's modules
import, every ``examples/verl/run_*.sh`` passes the dry run (veRL's own validation, our loss
and estimator resolved from veRL's registries, the actor/rollout dataclasses built), and
settings that would replace ``agentgrpo_llds`` or mix test tasks into validation are refused."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import export_objective

pytest.importorskip("verl")
pytestmark = pytest.mark.verl

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "examples" / "verl"
CONFIGS = ROOT / "agentgrpo" / "integrations" / "verl" / "configs"

# script -> the experiment it runs (configs/experiment/NAME.yaml: its numbers, on every host)
EXPECTED = {
    "run_vanilla.sh": "vanilla",
    "run_exp1_turn_discount.sh": "turn_discount",
    "run_exp2_lata.sh": "lata",
    "run_exp3_prm_lite.sh": "prm_lite",
    "run_exp4_prm_lite_lata.sh": "joint",
    "run_llds.sh": "llds",
    "run_joint_llds.sh": "joint_llds",
}

def test_the_extra_declares_what_the_default_trainer_imports():
    """veRL 0.9's default V1 trainer imports transfer_queue; the dry runs below import the whole
    launch path (``dry_run.import_launch_path``: main_ppo, verl.trainer.ppo.v1 and its trainers,
    transfer_queue, the agent loop, the engine workers, the reward loader) with nothing installed
    beyond ``agentgrpo[verl]``."""
    verl_extra = re.search(r"^verl = \[(.*?)\]", (ROOT / "pyproject.toml").read_text(), re.M | re.S).group(1)
    assert '"transferqueue>=' in verl_extra, verl_extra
    from agentgrpo.integrations.verl.dry_run import V1_MODULES

    assert {"transfer_queue", "verl.trainer.ppo.v1", "verl.trainer.main_ppo"} <= set(V1_MODULES)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory, env_config) -> Path:
    from agentgrpo.integrations.verl.data import prepare

    out = tmp_path_factory.mktemp("verl_data")
    prepare(env_config, out)  # in-process: the scripts then skip their own preparation
    return out


def dry_run(script: str, data_dir: Path, cwd: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTGRPO_", "VERL_USE"))}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", ENV_SOURCE="generated",
               USER_KIND="scripted", DATA_DIR=str(data_dir), DRY_RUN="1")
    return subprocess.run(["bash", str(SCRIPTS / script), *overrides], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def report(stdout: str) -> dict[str, str]:
    return dict(re.findall(r"^([a-z_]+): (.*)$", stdout, re.M))


@pytest.mark.slow  # each script's dry run starts a fresh interpreter with veRL: ~25-40 s
@pytest.mark.parametrize("script", list(EXPECTED))
def test_every_script_passes_the_dry_run(script, data_dir, tmp_path):
    run = dry_run(script, data_dir, tmp_path, "trainer.total_training_steps=7")
    assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-3000:]
    found = report(run.stdout)
    from agentgrpo.integrations.host_settings import load_native

    native = load_native([f"experiment={EXPECTED[script]}"])
    estimator, llds = f"agentgrpo_{native.algo.adv_estimator}", native.algo.llds_coef
    prm, updates = native.reward.process_coef, native.updates_per_rollout
    assert "validate_config passed, nothing replaced" in run.stdout
    assert f"ppo_mini_batch_size={native.trainer.mini_batch_size // native.trainer.group_size}" in found["actor"]
    assert f"kl_loss_coef={native.algo.kl_coef}" in found["actor"]
    assert found["trainer"] == "v1 (sync)"
    assert found["effective_loss_mode"] == "agentgrpo_llds (agentgrpo.integrations.verl.losses.agentgrpo_llds)"
    assert found["effective_adv_estimator"] == f"{estimator} (agentgrpo.integrations.verl.estimators.{estimator})"
    # the objective reaches the Ray workers whole: one value, equal to the driver's (else refused)
    assert found["llds"].startswith(f"λ={llds} (AGENTGRPO_OBJECTIVE, forwarded to the Ray workers), gate "
                                    f"{native.algo.llds_gate}, pg aggregation {native.algo.loss_agg}")
    assert f"{updates} update(s) per rollout" in found["llds"]
    assert found["reward"].startswith(f"outcome + {prm}·PRM-Lite")
    assert found["agent_loop"] == "agentgrpo_airline -> agentgrpo.integrations.verl.agent_loop.AirlineAgentLoop"
    assert f"val_files {data_dir}/val.parquet (8 rows, splits validation)" in found["data"]
    assert "loss_agg_mode=token-mean" in found["actor"]
    assert f"RolloutConfig(name=vllm, mode=async, n={native.trainer.group_size})" == found["rollout"]
    # bypass mode (old log-probs from vLLM) defaults off when λ > 0: LLDS must be 0 on unchanged weights
    assert found["old_logprobs"] == ("recomputed by the actor" if llds > 0 else "the rollout's (bypass mode)")


@pytest.mark.slow
def test_the_legacy_trainer_in_bypass_mode_is_refused_naming_the_settings(data_dir, tmp_path):
    # run_vanilla.sh: λ = 0, so bypass mode stays on by default (with λ > 0 it defaults to off)
    run = dry_run("run_vanilla.sh", data_dir, tmp_path, "trainer.use_v1=false")
    assert run.returncode == 2
    line = run.stderr.strip().splitlines()[-1]
    assert "algorithm.rollout_correction.bypass_mode=true" in line and "'bypass_mode'" in line
    assert "loss_mode=agentgrpo_llds" in line and "trainer.use_v1=true" in line


# ---- the rules, on configs composed in this process ---------------------------------------------


@pytest.fixture
def compose(monkeypatch, data_dir):
    from agentgrpo.integrations.verl.dry_run import compose as hydra_compose

    for key in [k for k in os.environ if k.startswith("AGENTGRPO_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("AGENTGRPO_VERL_CONFIGS", str(CONFIGS))
    monkeypatch.setenv("AGENTGRPO_REWARD_FILE", str(CONFIGS.parent / "reward.py"))
    monkeypatch.setenv("AGENTGRPO_DATA_DIR", str(data_dir))
    from agentgrpo.integrations.host_settings import load_native, verl_settings

    # experiment=llds with λ = 0.3 as the scripts launch it: 4 tasks × 8, 2 tasks per mini-batch
    settings = verl_settings(load_native(["experiment=llds", "algo.llds_coef=0.3"]))
    for key, value in settings.env.items():
        monkeypatch.setenv(key, value)
    base = [*settings.overrides, "algorithm.rollout_correction.bypass_mode=false"]
    return lambda *overrides: hydra_compose(str(CONFIGS), "airline_grpo", [*base, *overrides])


@pytest.mark.parametrize("overrides, named", [
    (["trainer.use_v1=false", "algorithm.rollout_correction.bypass_mode=true"],
     ["algorithm.rollout_correction.bypass_mode=true", "legacy trainer"]),
    (["algorithm.rollout_correction.bypass_mode=true", "actor_rollout_ref.rollout.calculate_log_probs=true"],
     ["algo.llds_coef=0.3 with algorithm.rollout_correction.bypass_mode=true", "never 0 on unchanged"]),
    (["actor_rollout_ref.actor.shuffle=true"], ["actor_rollout_ref.actor.shuffle=true"]),
    (["trainer.n_gpus_per_node=2"], ["algorithm.llds_dp_size=1 must be 2"]),
    (["algorithm.llds_rollout_n=4"], ["algorithm.llds_rollout_n=4 must be 8"]),
    (["algorithm.adv_estimator=grpo"], ["does not carry the LLDS preserve counts"]),
    (["distillation.enabled=true", "distillation.distillation_loss.use_task_rewards=false"],
     ["distillation.distillation_loss.use_task_rewards=false", "distillation.enabled=false"]),
    (["actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum"],
     ["actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum", "algo.loss_agg"]),
    (["actor_rollout_ref.actor.ppo_mini_batch_size=4"], ["algo.llds_coef=0.3 never acts", "ppo_mini_batch_size"]),
    # veRL's own copies of the objective's values must agree with it
    (["algorithm.adv_estimator=agentgrpo_lata"],
     ["algorithm.adv_estimator=agentgrpo_lata disagrees with the objective's algo.adv_estimator=grpo"]),
    (["actor_rollout_ref.actor.kl_loss_coef=0.05"], ["kl_loss_coef=0.05 disagrees", "algo.kl_coef=0.01"]),
    (["actor_rollout_ref.actor.use_kl_loss=false"], ["use_kl_loss=False disagrees", "algo.kl_coef=0.01"]),
    (["actor_rollout_ref.actor.entropy_coeff=0.01"], ["entropy_coeff=0.01 disagrees", "algo.entropy_coef=0.0"]),
    # the Ray workers must get the objective this process exported, whole
    (["+ray_kwargs.ray_init.runtime_env.env_vars.AGENTGRPO_OBJECTIVE='{\"llds_coef\": 0.2}'"],
     ["env_vars.AGENTGRPO_OBJECTIVE differs from the AGENTGRPO_OBJECTIVE of this process"]),
])
def test_settings_that_replace_or_disable_our_loss_are_named(compose, overrides, named):
    from agentgrpo.integrations.verl.checks import launch_problems

    problems = launch_problems(compose(*overrides))
    assert any(all(text in problem for text in named) for problem in problems), problems


def test_bypass_mode_needs_rollout_log_probs(compose, monkeypatch):
    from agentgrpo.integrations.verl.checks import launch_problems

    export_objective(monkeypatch, llds_coef=0.0)
    problems = launch_problems(compose("algorithm.rollout_correction.bypass_mode=true",
                                       "actor_rollout_ref.rollout.calculate_log_probs=false"))
    assert len(problems) == 1 and "actor_rollout_ref.rollout.calculate_log_probs=true" in problems[0]


@pytest.mark.parametrize("estimator, agg, refused", [
    ("grpo", "token-mean", True), ("lata", "seq-mean-token-mean", True),
    ("dr_grpo", "token-mean", False), ("lata", "seq-mean-token-sum", False),
])
def test_dividing_by_the_length_twice_is_refused(compose, monkeypatch, estimator, agg, refused):
    from agentgrpo.integrations.verl.checks import launch_problems

    export_objective(monkeypatch, adv_estimator=estimator, loss_agg=agg, llds_coef=0.3)
    problems = launch_problems(compose(f"algorithm.adv_estimator=agentgrpo_{estimator}"))
    assert any("divides by the response length twice" in p for p in problems) == refused, problems


def test_unset_objective_means_its_defaults_and_no_llds(compose, monkeypatch):
    from agentgrpo.integrations.verl.checks import launch_problems
    from agentgrpo.integrations.verl.settings import read_objective

    monkeypatch.delenv("AGENTGRPO_OBJECTIVE")
    assert read_objective().llds_coef == 0.0
    assert not launch_problems(compose("algorithm.rollout_correction.bypass_mode=true",
                                       "actor_rollout_ref.rollout.calculate_log_probs=true",
                                       "actor_rollout_ref.actor.ppo_mini_batch_size=4"))


def test_v1_bypass_mode_keeps_our_loss_and_legacy_without_it_too(compose):
    from agentgrpo.integrations.verl.checks import effective_loss_mode, launch_problems

    assert effective_loss_mode(compose()) == ("agentgrpo_llds", None) and not launch_problems(compose())
    legacy = compose("trainer.use_v1=false", "algorithm.rollout_correction.bypass_mode=false")
    assert effective_loss_mode(legacy) == ("agentgrpo_llds", None) and not launch_problems(legacy)
    replaced = compose("trainer.use_v1=false", "algorithm.rollout_correction.bypass_mode=true")
    assert effective_loss_mode(replaced)[0] == "bypass_mode"


def test_validation_files_with_test_tasks_are_refused(compose, data_dir):
    from agentgrpo.config import ConfigError
    from agentgrpo.integrations.verl.dry_run import data_description

    assert "splits validation" in data_description(compose())
    with pytest.raises(ConfigError, match=r"data.val_files=.*test.parquet holds test tasks \(splits \['unseen'\]\)"):
        data_description(compose(f"data.val_files={data_dir}/test.parquet"))


def test_every_run_script_is_dry_run_here():
    assert sorted(path.name for path in SCRIPTS.glob("run_*.sh")) == sorted(EXPECTED)


@pytest.mark.parametrize("script", list(EXPECTED))
def test_a_run_script_names_its_experiment_and_holds_no_number(script):
    """The numbers are the experiment YAML's (agentgrpo hosts verl): a script only names it."""
    code = [line for line in (SCRIPTS / script).read_text().splitlines() if not line.startswith("#")]
    assert f"run_experiment {EXPECTED[script]} \"$@\"" in code
    assert not any(char.isdigit() for line in code for char in line.replace("$0", "")), code


def test_the_dry_run_takes_main_ppos_command_line():
    from agentgrpo.integrations.verl.dry_run import split_argv

    argv = ["--config-path=/c", "--config-name=airline_grpo", "a.b=1", "--cfg", "job", "+x.y='z w'", "--resolve"]
    assert split_argv(argv) == ("/c", "airline_grpo", ["a.b=1", "+x.y='z w'"])
