"""One experiment, three hosts: the native config's numbers as veRL and TRL read them.

The experiment YAMLs (``configs/experiment/*.yaml`` over ``configs/grpo.yaml``) are the
only place a variant's numbers live. This module loads the native ``GRPOConfig`` exactly
as ``agentgrpo train`` does and hands each host its objective whole — the
``agentgrpo.algos.ObjectiveSettings`` of ``config.algo`` — plus what that host counts
its own way:

* **veRL** (``verl_settings``): the objective as one JSON value, ``AGENTGRPO_OBJECTIVE``,
  which the plugins read (``integrations.verl.settings.read_objective``); the PRM-Lite
  weight (``AGENTGRPO_PRM_COEF``); and Hydra overrides of ``airline_grpo.yaml`` for what
  veRL itself runs (the estimator's name, tasks per step, group, mini-batch and epochs,
  its KL and entropy terms, temperature), which the launch check compares with the objective;
* **TRL** (``trl_settings``): ``AgentGRPOConfig(objective=...)`` and its batch fields, and
  the PRM-Lite reward's weight.

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
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from agentgrpo.config import ConfigError

if TYPE_CHECKING:
    from agentgrpo.algos import ObjectiveSettings
    from agentgrpo.train.grpo_config import GRPOConfig

HOSTS = ("verl", "trl")
VERL_PREFIX = "agentgrpo_"
"""veRL's name of registry estimator X is ``agentgrpo_X`` (``integrations.verl.estimators``)."""

HOST_NAMES = {"verl": "veRL", "trl": "TRL"}

TRL_SOURCES = {
    "objective": "algo.*",
    "scale_rewards": "algo.norm_by_std",
    "epsilon": "algo.clip_low",
    "epsilon_high": "algo.clip_high",
    "importance_sampling_level": "algo.importance",
    "beta": "algo.kl_coef",
    "temperature": "rollout.temperature",
    "num_generations": "trainer.group_size",
    "per_device_train_batch_size": "trainer.micro_batch_size",
    "gradient_accumulation_steps": "trainer.mini_batch_size",
    "steps_per_generation": "trainer.tasks_per_step",
    "num_iterations": "trainer.ppo_epochs",
}
"""``AgentGRPOConfig`` field -> the native key it comes from (set that key, not the field):
``objective`` and TRL's own copies of its values, and the batch fields."""


def load_native(overrides: list[str] | None = None, config_file: str | None = None) -> GRPOConfig:
    """The native ``GRPOConfig``, loaded as ``agentgrpo train`` loads it (grpo.yaml, experiment, file, overrides)."""
    from agentgrpo.config import load_config
    from agentgrpo.train.grpo_config import GRPOConfig

    return load_config(GRPOConfig, list(overrides or []), defaults="grpo.yaml", config_file=config_file)


def objective_problems(objective: ObjectiveSettings, host: str) -> list[str]:
    """Settings of ``objective`` that only the native trainer implements, one line each, for ``host``."""
    name = HOST_NAMES[host]
    problems = []
    if objective.turn_credit_coef > 0:
        problems.append(f"algo.turn_credit_coef={objective.turn_credit_coef}: per-turn PRM credit needs each turn's "
                        f"PRM-Lite score, which {name} never hands an advantage estimator; use experiment=joint "
                        "(PRM-Lite in the reward) there, or the native trainer")
    if objective.advantage_sign != 1:
        problems.append("algo.advantage_sign=-1 is a control of the native sanity check, not a training setting")
    if host == "trl" and objective.entropy_coef > 0:
        problems.append(f"algo.entropy_coef={objective.entropy_coef}: AgentGRPOTrainer has no entropy bonus; "
                        "set algo.entropy_coef=0")
    return problems


def host_problems(config: GRPOConfig, host: str) -> list[str]:
    """Settings of ``config`` that ``host`` cannot train as the native trainer does, one line each."""
    if host not in HOSTS:
        raise ConfigError(f"host {host!r} is unknown; choose one of {list(HOSTS)}")
    trainer, name = config.trainer, HOST_NAMES[host]
    problems = objective_problems(config.algo, host)
    if trainer.dynamic_sampling:
        problems.append(f"trainer.dynamic_sampling=true is the native trainer's; {name} would train on every group")
    if trainer.task_sampler != "uniform":
        problems.append(f"trainer.task_sampler={trainer.task_sampler} is the native trainer's; {name} samples "
                        "tasks uniformly")
    if trainer.write_task_share is not None:
        problems.append(f"trainer.write_task_share={trainer.write_task_share} is the native trainer's; {name} "
                        "draws tasks from the whole pool")
    if trainer.demo_coef > 0:
        problems.append(f"trainer.demo_coef={trainer.demo_coef}: the demonstration term is the native trainer's; "
                        f"{name}'s loss has no such term")
    if trainer.success_coef > 0:
        problems.append(f"trainer.success_coef={trainer.success_coef}: the self-imitation term is the native "
                        f"trainer's; {name}'s loss has no such term")
    if trainer.preserve_writes != "off":
        problems.append(f"trainer.preserve_writes={trainer.preserve_writes}: keeping the policy's successful write "
                        f"episodes from falling is the native trainer's; {name}'s update has no such step")
    if config.rollout.constrain_tool_calls:
        problems.append(f"rollout.constrain_tool_calls=true is the native trainer's; {name} would score the "
                        "unconstrained distribution, so its ratios would not be those of the sampler")
    if host == "verl":
        if trainer.mini_batch_size % trainer.group_size:
            problems.append(f"trainer.mini_batch_size={trainer.mini_batch_size} is not a multiple of "
                            f"trainer.group_size={trainer.group_size}: veRL's mini-batches are whole groups "
                            "(ppo_mini_batch_size tasks × rollout.n)")
        if config.reward.prm_weights:
            problems.append(f"reward.prm_weights={config.reward.prm_weights}: the veRL reward scores with the "
                            "packaged PRM-Lite weights; leave it null")
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
    """What a veRL launch gets: Hydra ``overrides`` of ``airline_grpo.yaml``, ``env`` (the objective
    whole in ``AGENTGRPO_OBJECTIVE``, the PRM-Lite weight) and ``bypass_mode``, the launch's default
    for old log-probs from the rollout (off when LLDS needs recomputed ones)."""

    overrides: list[str]
    env: dict[str, str]
    bypass_mode: bool

    def as_dict(self) -> dict[str, Any]:
        return {"overrides": self.overrides, "env": self.env, "bypass_mode": self.bypass_mode}

    def shell(self) -> str:
        """Bash that ``eval`` turns into exported variables, ``HOST_BYPASS_MODE`` and the array ``HOST_OVERRIDES``."""
        lines = [f"export {key}={shlex.quote(value)}" for key, value in self.env.items()]
        lines.append(f"HOST_BYPASS_MODE={_hydra(self.bypass_mode)}")
        lines.append("HOST_OVERRIDES=(" + " ".join(shlex.quote(item) for item in self.overrides) + ")")
        return "\n".join(lines)


def verl_settings(config: GRPOConfig) -> VerlSettings:
    """The native ``config`` as veRL overrides and the objective as one value (refuses what veRL cannot do)."""
    from agentgrpo.integrations.verl.settings import OBJECTIVE_ENV, objective_json

    check_host(config, "verl")
    algo, trainer = config.algo, config.trainer
    actor, rollout = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    values = {  # what veRL runs itself; the launch check compares each with the objective
        "algorithm.adv_estimator": VERL_PREFIX + algo.adv_estimator,
        # veRL counts batches in tasks: mini-batches of whole groups, as many updates per rollout as natively
        "data.train_batch_size": trainer.tasks_per_step,
        f"{rollout}.n": trainer.group_size,
        f"{actor}.ppo_mini_batch_size": trainer.mini_batch_size // trainer.group_size,
        f"{actor}.ppo_epochs": trainer.ppo_epochs,
        f"{actor}.use_kl_loss": algo.kl_coef > 0,
        f"{actor}.kl_loss_coef": algo.kl_coef,
        f"{actor}.kl_loss_type": algo.kl_kind,  # veRL's kl_penalty takes every name of algos.KL_KINDS
        f"{actor}.entropy_coeff": algo.entropy_coef,
        f"{rollout}.temperature": config.rollout.temperature,
    }
    env = {OBJECTIVE_ENV: objective_json(algo), "AGENTGRPO_PRM_COEF": _hydra(config.reward.process_coef)}
    return VerlSettings([f"{key}={_hydra(value)}" for key, value in values.items()], env,
                        bypass_mode=not algo.llds_coef > 0)


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
    trainer = config.trainer
    rollout_rows = trainer.tasks_per_step * trainer.group_size
    fields = {
        "objective": asdict(config.algo),  # TRL's own copies (epsilon, beta, ...) are written from it
        "temperature": config.rollout.temperature,
        "num_generations": trainer.group_size,
        "per_device_train_batch_size": trainer.micro_batch_size,
        "gradient_accumulation_steps": trainer.mini_batch_size // trainer.micro_batch_size,
        "steps_per_generation": rollout_rows // trainer.micro_batch_size,
        "num_iterations": trainer.ppo_epochs,
    }
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
        "hosts", help="an experiment's settings for veRL (overrides, AGENTGRPO_OBJECTIVE) or TRL (config)",
        description="Print the native GRPO config (grpo.yaml + experiment + overrides, as `agentgrpo train` "
                    "loads it) in a host's terms: veRL's Hydra overrides and the objective as one JSON value "
                    "(AGENTGRPO_OBJECTIVE), or TRL's AgentGRPOConfig fields (objective=...) and PRM-Lite weight. "
                    "Settings a host cannot reproduce are refused.")
    hosts.add_argument("host", choices=HOSTS, help="the training framework")
    hosts.add_argument("--config", help="a YAML file merged over configs/grpo.yaml (as agentgrpo train --config)")
    hosts.add_argument("--format", choices=("shell", "json"), default=None,
                       help="veRL: shell (default; `eval` it: exports, HOST_BYPASS_MODE, HOST_OVERRIDES=(...)) or "
                            "json; TRL: json")
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
