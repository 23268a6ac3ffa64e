"""One experiment, three hosts: the native config's numbers as veRL and TRL read them.

The experiment YAMLs (``configs/experiment/*.yaml`` over ``configs/grpo.yaml``) are the
only place a variant's numbers live. This module loads the native ``GRPOConfig`` exactly
as ``agentgrpo train`` does and writes it in each host's terms:

* **veRL** (``verl_settings``): Hydra overrides of ``airline_grpo.yaml`` (estimator,
  ε, Turn-Discount α and unit, tasks per step, group, mini-batch and epochs, clip, KL,
  entropy, temperature) and the ``AGENTGRPO_*`` variables the plugins read where veRL's
  strict actor config has no key (λ, gate, aggregation, ratio level, PRM-Lite weight);
* **TRL** (``trl_settings``): ``AgentGRPOConfig`` fields and the PRM-Lite reward's weight.

``agentgrpo hosts verl|trl [experiment=NAME] [key=value ...]`` prints them;
``examples/verl/common.sh`` and ``examples/trl/train_airline.py`` read them from here, so
``experiment=llds`` is one λ on every host. A setting a host cannot reproduce is refused
with one line naming it (``host_problems``). Cluster-shaped settings stay with each host:
model, GPUs, micro-batches, sequence budgets, learning rate, bypass mode.

No torch at import: the native config is imported when a config is loaded.
"""
from __future__ import annotations

import argparse
import json
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentgrpo.config import ConfigError

if TYPE_CHECKING:
    from agentgrpo.train.grpo_config import GRPOConfig

HOSTS = ("verl", "trl")
VERL_PREFIX = "agentgrpo_"
"""veRL's name of registry estimator X is ``agentgrpo_X`` (``integrations.verl.estimators``)."""

TRL_SOURCES = {
    "adv_estimator": "algo.adv_estimator",
    "scale_rewards": "algo.norm_by_std",
    "adv_std_eps": "algo.adv_std_eps",
    "turn_discount_alpha": "algo.turn_discount_alpha",
    "turn_discount_unit": "algo.turn_discount_unit",
    "epsilon": "algo.clip_low",
    "epsilon_high": "algo.clip_high",
    "loss_agg": "algo.loss_agg",
    "importance_sampling_level": "algo.importance",
    "beta": "algo.kl_coef",
    "llds_coef": "algo.llds_coef",
    "llds_gate": "algo.llds_gate",
    "temperature": "rollout.temperature",
    "num_generations": "trainer.group_size",
    "per_device_train_batch_size": "trainer.micro_batch_size",
    "gradient_accumulation_steps": "trainer.mini_batch_size",
    "steps_per_generation": "trainer.tasks_per_step",
    "num_iterations": "trainer.ppo_epochs",
}
"""``AgentGRPOConfig`` field -> the native key it comes from (set that key, not the field)."""


def load_native(overrides: list[str] | None = None, config_file: str | None = None) -> GRPOConfig:
    """The native ``GRPOConfig``, loaded as ``agentgrpo train`` loads it (grpo.yaml, experiment, file, overrides)."""
    from agentgrpo.config import load_config
    from agentgrpo.train.grpo_config import GRPOConfig

    return load_config(GRPOConfig, list(overrides or []), defaults="grpo.yaml", config_file=config_file)


def host_problems(config: GRPOConfig, host: str) -> list[str]:
    """Settings of ``config`` that ``host`` cannot train as the native trainer does, one line each."""
    if host not in HOSTS:
        raise ConfigError(f"host {host!r} is unknown; choose one of {list(HOSTS)}")
    algo, trainer, name = config.algo, config.trainer, {"verl": "veRL", "trl": "TRL"}[host]
    problems = []
    if algo.turn_credit_coef > 0:
        problems.append(f"algo.turn_credit_coef={algo.turn_credit_coef}: per-turn PRM credit needs each turn's "
                        f"PRM-Lite score, which {name} never hands an advantage estimator; use experiment=joint "
                        "(PRM-Lite in the reward) there, or the native trainer")
    if algo.advantage_sign != 1:
        problems.append("algo.advantage_sign=-1 is a control of the native sanity check, not a training setting")
    if trainer.dynamic_sampling:
        problems.append(f"trainer.dynamic_sampling=true is the native trainer's; {name} would train on every group")
    if trainer.task_sampler != "uniform":
        problems.append(f"trainer.task_sampler={trainer.task_sampler} is the native trainer's; {name} samples "
                        "tasks uniformly")
    if host == "verl":
        if trainer.mini_batch_size % trainer.group_size:
            problems.append(f"trainer.mini_batch_size={trainer.mini_batch_size} is not a multiple of "
                            f"trainer.group_size={trainer.group_size}: veRL's mini-batches are whole groups "
                            "(ppo_mini_batch_size tasks × rollout.n)")
        if config.reward.prm_weights:
            problems.append(f"reward.prm_weights={config.reward.prm_weights}: the veRL reward scores with the "
                            "packaged PRM-Lite weights; leave it null")
    if host == "trl":
        if algo.kl_coef > 0 and algo.kl_kind not in ("k3", "low_var_kl"):
            problems.append(f"algo.kl_kind={algo.kl_kind}: AgentGRPOTrainer's KL term is k3 (low_var_kl); set "
                            "algo.kl_kind=k3 or algo.kl_coef=0")
        if algo.entropy_coef > 0:
            problems.append(f"algo.entropy_coef={algo.entropy_coef}: AgentGRPOTrainer has no entropy bonus; "
                            "set algo.entropy_coef=0")
    return problems


def check_host(config: GRPOConfig, host: str) -> None:
    """Raise one ConfigError line listing every ``host_problems``."""
    problems = host_problems(config, host)
    if problems:
        raise ConfigError(f"experiment={config.experiment} cannot run as such on {host}: " + "; ".join(problems))


def _hydra(value: Any) -> str:
    """A Python value as a Hydra override value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


@dataclass
class VerlSettings:
    """What a veRL launch gets: Hydra ``overrides`` of ``airline_grpo.yaml`` and ``env`` (``AGENTGRPO_*``)."""

    overrides: list[str]
    env: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        return {"overrides": self.overrides, "env": self.env}

    def shell(self) -> str:
        """Bash that ``eval`` turns into exported variables and the array ``HOST_OVERRIDES``."""
        lines = [f"export {key}={shlex.quote(value)}" for key, value in self.env.items()]
        lines.append("HOST_OVERRIDES=(" + " ".join(shlex.quote(item) for item in self.overrides) + ")")
        return "\n".join(lines)


def verl_settings(config: GRPOConfig) -> VerlSettings:
    """The native ``config`` as veRL overrides and ``AGENTGRPO_*`` settings (refuses what veRL cannot do)."""
    check_host(config, "verl")
    algo, trainer = config.algo, config.trainer
    actor, rollout = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    values = {
        "algorithm.adv_estimator": VERL_PREFIX + algo.adv_estimator,
        "algorithm.norm_adv_by_std_in_grpo": algo.norm_by_std,
        "algorithm.adv_std_eps": algo.adv_std_eps,
        "algorithm.turn_discount_alpha": algo.turn_discount_alpha,
        "algorithm.turn_discount_unit": algo.turn_discount_unit,
        # veRL counts batches in tasks: mini-batches of whole groups, as many updates per rollout as natively
        "data.train_batch_size": trainer.tasks_per_step,
        f"{rollout}.n": trainer.group_size,
        f"{actor}.ppo_mini_batch_size": trainer.mini_batch_size // trainer.group_size,
        f"{actor}.ppo_epochs": trainer.ppo_epochs,
        f"{actor}.clip_ratio_low": algo.clip_low,
        f"{actor}.clip_ratio_high": algo.clip_high,
        f"{actor}.use_kl_loss": algo.kl_coef > 0,
        f"{actor}.kl_loss_coef": algo.kl_coef,
        f"{actor}.kl_loss_type": algo.kl_kind,  # veRL's kl_penalty takes every name of algos.KL_KINDS
        f"{actor}.entropy_coeff": algo.entropy_coef,
        f"{rollout}.temperature": config.rollout.temperature,
    }
    env = {
        "AGENTGRPO_LLDS_COEF": algo.llds_coef,
        "AGENTGRPO_LLDS_GATE": algo.llds_gate,
        "AGENTGRPO_LOSS_AGG": algo.loss_agg,
        "AGENTGRPO_IMPORTANCE": algo.importance,
        "AGENTGRPO_PRM_COEF": config.reward.process_coef,
    }
    return VerlSettings([f"{key}={_hydra(value)}" for key, value in values.items()],
                        {key: _hydra(value) for key, value in env.items()})


@dataclass
class TrlSettings:
    """What a TRL run gets: ``AgentGRPOConfig`` fields and the PRM-Lite reward's arguments."""

    config: dict[str, Any]
    prm_coef: float
    prm_weights: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"config": self.config, "reward": {"prm_coef": self.prm_coef, "prm_weights": self.prm_weights}}


def trl_settings(config: GRPOConfig) -> TrlSettings:
    """The native ``config`` as ``AgentGRPOConfig`` fields for one process (refuses what TRL cannot do).

    Batches: TRL's generation batch is ``per_device_train_batch_size × steps_per_generation``
    rows (× processes), an optimizer step ``gradient_accumulation_steps`` of them, each
    generation batch used ``num_iterations`` times: the native micro-batch, mini-batch,
    rollout and PPO epochs. With N processes, divide ``per_device_train_batch_size`` by N.
    """
    check_host(config, "trl")
    algo, trainer = config.algo, config.trainer
    rollout_rows = trainer.tasks_per_step * trainer.group_size
    fields = {
        "adv_estimator": algo.adv_estimator,
        "scale_rewards": "group" if algo.norm_by_std else "none",
        "adv_std_eps": algo.adv_std_eps,
        "turn_discount_alpha": algo.turn_discount_alpha,
        "turn_discount_unit": algo.turn_discount_unit,
        "epsilon": algo.clip_low,
        "epsilon_high": algo.clip_high,
        "loss_agg": algo.loss_agg,
        "importance_sampling_level": algo.importance,
        "beta": algo.kl_coef,
        "llds_coef": algo.llds_coef,
        "llds_gate": algo.llds_gate,
        "temperature": config.rollout.temperature,
        "num_generations": trainer.group_size,
        "per_device_train_batch_size": trainer.micro_batch_size,
        "gradient_accumulation_steps": trainer.mini_batch_size // trainer.micro_batch_size,
        "steps_per_generation": rollout_rows // trainer.micro_batch_size,
        "num_iterations": trainer.ppo_epochs,
    }
    assert set(fields) == set(TRL_SOURCES), "TRL_SOURCES names every field set here"
    return TrlSettings(fields, config.reward.process_coef, config.reward.prm_weights)


def refuse_trl_overrides(trl_args: dict[str, Any]) -> None:
    """Refuse TRL fields that the experiment sets (``TRL_SOURCES``), naming the native key to set instead."""
    taken = {name: TRL_SOURCES[name] for name in trl_args if name in TRL_SOURCES}
    if taken:
        raise ConfigError("set by the experiment, so equal on every host: "
                          + ", ".join(f"{name} (set {key}=...)" for name, key in taken.items()))


# ---- the command ------------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction) -> None:
    hosts = subparsers.add_parser(
        "hosts", help="an experiment's settings for veRL (overrides, AGENTGRPO_* env) or TRL (config)",
        description="Print the native GRPO config (grpo.yaml + experiment + overrides, as `agentgrpo train` "
                    "loads it) in a host's terms: veRL's Hydra overrides and AGENTGRPO_* variables, or TRL's "
                    "AgentGRPOConfig fields and PRM-Lite weight. Settings a host cannot reproduce are refused.")
    hosts.add_argument("host", choices=HOSTS, help="the training framework")
    hosts.add_argument("--config", help="a YAML file merged over configs/grpo.yaml (as agentgrpo train --config)")
    hosts.add_argument("--format", choices=("shell", "json"), default=None,
                       help="veRL: shell (default; `eval` it: exports + HOST_OVERRIDES=(...)) or json; TRL: json")
    hosts.add_argument("overrides", nargs="*", metavar="key=value", help="native overrides, e.g. experiment=llds")
    hosts.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = load_native(args.overrides, args.config)
    if args.host == "verl":
        settings = verl_settings(config)
        print(json.dumps(settings.as_dict(), indent=2) if args.format == "json" else settings.shell())
    else:
        if args.format == "shell":
            raise ConfigError("agentgrpo hosts trl prints JSON (--format json); shell is for veRL")
        print(json.dumps(trl_settings(config).as_dict(), indent=2))
    return 0
