"""Dry run of a veRL launch: everything ``verl.trainer.main_ppo`` checks and resolves, no Ray, no GPU.

::

    python -m agentgrpo.integrations.verl.dry_run --config-path DIR --config-name airline_grpo [OVERRIDE ...]

Every ``examples/verl/run_*.sh`` runs this before it starts veRL (``DRY_RUN=1`` stops
there). In order:

1. compose the Hydra config as ``main_ppo`` would (same config dir, name and overrides;
   Hydra's own flags such as ``--cfg job`` are ignored here);
2. import the modules of the trainer veRL will run — V1 (0.9's default: ``verl.trainer.
   ppo.v1``, which needs ``transfer_queue``, brought by ``agentgrpo[verl]``) or legacy —
   so a missing dependency fails here, not after Ray started;
3. run veRL's own ``validate_config`` (batch sizes, micro-batches, the actor config's
   ``__post_init__``/``validate``);
4. refuse any setting that would replace or silently disable agentgrpo's loss or
   estimator (``checks.launch_problems``), and a ``data.val_files`` holding test tasks;
5. resolve the policy loss and the advantage estimator through veRL's registries
   (``get_policy_loss_fn`` / ``get_adv_estimator_fn``), build the actor and rollout
   config dataclasses (``omega_conf_to_dataclass``), load the reward function
   (``get_custom_reward_fn``) and the agent-loop class of ``default_agent_loop``;
6. print what would train: trainer, effective loss and estimator (``effective_loss_mode``,
   ``effective_adv_estimator`` lines), λ, reward, data files.

The algorithm section stays a DictConfig: veRL 0.9 hands it to estimators as one (our
mini-batch layout keys such as ``llds_mini_batch_size`` live there; veRL's ``AlgoConfig``
dataclass would reject them). The objective itself is ``AGENTGRPO_OBJECTIVE``
(``settings.read_objective``). A refusal is one line on stderr and exit code 2, like every
agentgrpo command.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgrpo.config import AgentGRPOError, ConfigError, MissingFileError
from agentgrpo.integrations.verl import checks
from agentgrpo.integrations.verl.reward import prm_coef
from agentgrpo.integrations.verl.settings import read_objective

V1_MODULES = ("transfer_queue", "verl.trainer.ppo.v1", "verl.trainer.main_ppo")
LEGACY_MODULES = ("verl.trainer.main_ppo_v0", "verl.trainer.ppo.ray_trainer", "verl.trainer.main_ppo")
SHARED_MODULES = ("verl.experimental.agent_loop", "verl.workers.engine_workers", "verl.trainer.ppo.reward")
TEST_SPLITS = ("unseen",)


@dataclass
class LaunchReport:
    """What a launch would train (every field a printable string)."""

    verl_version: str
    trainer: str
    loss_mode: str
    loss_fn: str
    adv_estimator: str
    estimator_fn: str
    llds: str
    old_logprobs: str
    reward: str
    agent_loop: str
    data: str
    actor: str
    rollout: str

    def lines(self) -> list[str]:
        return [
            f"veRL {self.verl_version}: composed, imported, validate_config passed, nothing replaced",
            f"trainer: {self.trainer}",
            f"effective_loss_mode: {self.loss_mode} ({self.loss_fn})",
            f"effective_adv_estimator: {self.adv_estimator} ({self.estimator_fn})",
            f"llds: {self.llds}",
            f"old_logprobs: {self.old_logprobs}",
            f"reward: {self.reward}",
            f"agent_loop: {self.agent_loop}",
            f"data: {self.data}",
            f"actor: {self.actor}",
            f"rollout: {self.rollout}",
        ]


def split_argv(argv: list[str]) -> tuple[str, str, list[str]]:
    """``(config dir, config name, overrides)`` from ``main_ppo``'s command line.

    Overrides are the ``[+~]key=value`` arguments; Hydra's own flags (``--cfg job``,
    ``--resolve``, ``-m``...) and their values are not overrides and are skipped.
    """
    config_dir, config_name, overrides = None, "ppo_trainer", []
    for arg in argv:
        if arg.startswith("--config-path="):
            config_dir = arg.split("=", 1)[1]
        elif arg.startswith("--config-name="):
            config_name = arg.split("=", 1)[1]
        elif "=" in arg and not arg.startswith("-"):
            overrides.append(arg)
    if config_dir is None:
        raise ConfigError("the dry run needs --config-path=DIR (and --config-name=NAME), as main_ppo gets them")
    return config_dir, config_name, overrides


def compose(config_dir: str, config_name: str, overrides: list[str]) -> Any:
    """The Hydra config ``main_ppo`` would get (no job is run, no working directory made)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    directory = Path(config_dir).resolve()
    if not (directory / f"{config_name}.yaml").is_file():
        raise MissingFileError(f"no {config_name}.yaml in {directory} (--config-path / --config-name)")
    with initialize_config_dir(config_dir=str(directory), version_base=None):
        return hydra_compose(config_name=config_name, overrides=list(overrides))


def import_launch_path(config: Any) -> None:
    """Import the modules the chosen trainer imports (a missing dependency fails here)."""
    modules = (V1_MODULES if checks.uses_v1(config) else LEGACY_MODULES) + SHARED_MODULES
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            hint = ("pip install 'agentgrpo[verl]' (it brings transferqueue), or select the legacy trainer "
                    "with trainer.use_v1=false" if name == "transfer_queue" else "pip install 'agentgrpo[verl]'")
            raise ConfigError(f"the {checks.trainer_name(config)} trainer imports {name}, which fails ({exc}): "
                              f"{hint}") from exc


def verl_validate(config: Any) -> None:
    """veRL's ``validate_config``, as ``main_ppo`` calls it; its errors become one ConfigError."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    try:
        validate_config(config=config, use_reference_policy=need_reference_policy(config),
                        use_critic=need_critic(config))
    except (AssertionError, ValueError, TypeError) as exc:
        raise ConfigError(f"veRL's validate_config rejects the config: {exc}") from exc


def _qualname(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def resolve_functions(config: Any, loss_mode: str) -> tuple[str, str]:
    """The loss and estimator veRL's registries hand out for the config's names."""
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn

    estimator = str(config.algorithm.adv_estimator)
    try:
        loss_fn, estimator_fn = get_policy_loss_fn(loss_mode), get_adv_estimator_fn(estimator)
    except ValueError as exc:
        raise ConfigError(f"{exc}: is the agentgrpo plugin loaded (import agentgrpo.integrations.verl)?") from exc
    return _qualname(loss_fn), _qualname(estimator_fn)


def build_dataclasses(config: Any) -> tuple[Any, Any]:
    """The actor and rollout config dataclasses the workers will build (veRL reshapes the
    reference section in the worker before building its dataclass, so it is not built here)."""
    from verl.utils.config import omega_conf_to_dataclass

    section = config.actor_rollout_ref
    try:
        actor = omega_conf_to_dataclass(section.actor)
        rollout = omega_conf_to_dataclass(section.rollout)
    except Exception as exc:  # Hydra's InstantiationException, OmegaConf's ValidationError
        raise ConfigError(f"actor_rollout_ref does not build veRL's config dataclasses: {exc}") from exc
    return actor, rollout


def agent_loop_class(config: Any) -> str:
    """``name -> class`` of the rollout's ``default_agent_loop`` (from ``agent_loop_config_path``)."""
    from hydra.utils import get_class
    from omegaconf import OmegaConf

    agent = config.actor_rollout_ref.rollout.agent
    name, path = agent.get("default_agent_loop"), agent.get("agent_loop_config_path")
    if not path:
        return f"{name} (veRL's own)"
    if not Path(path).is_file():
        raise MissingFileError(f"actor_rollout_ref.rollout.agent.agent_loop_config_path={path} does not exist")
    entries = {entry.name: entry for entry in OmegaConf.load(path)}
    if name not in entries:
        raise ConfigError(f"actor_rollout_ref.rollout.agent.default_agent_loop={name} is not in {path} "
                          f"(it has {sorted(entries)})")
    return f"{name} -> {_qualname(get_class(entries[name]['_target_']))}"


def reward_description(config: Any) -> str:
    from verl.trainer.ppo.reward import get_custom_reward_fn

    section = config.reward.get("custom_reward_function") or {}
    if not section.get("path"):
        return "veRL's default reward (no custom_reward_function)"
    get_custom_reward_fn(config)  # loads the file and the function, as the reward manager will
    return f"outcome + {prm_coef()}·PRM-Lite (AGENTGRPO_PRM_COEF) via {section['path']}:{section['name']}"


def data_description(config: Any) -> str:
    """Row counts of the data files; refuses a validation file that holds test tasks."""
    import pyarrow.parquet as pq

    parts = []
    for key in ("train_files", "val_files"):
        for path in _as_list(config.data.get(key)):
            if not Path(path).is_file():
                raise MissingFileError(f"data.{key}: {path} does not exist; write it with agentgrpo verl-prepare")
            table = pq.read_table(path)
            splits = sorted({str((row or {}).get("split")) for row in table.column("extra_info").to_pylist()}
                            if "extra_info" in table.column_names else set())
            if key == "val_files" and set(splits) & set(TEST_SPLITS):
                raise ConfigError(f"data.val_files={path} holds test tasks (splits {splits}): validation chooses "
                                  "checkpoints, so it must not see the test split; use the val.parquet that "
                                  "agentgrpo verl-prepare writes and evaluate test.parquet's tasks after training")
            parts.append(f"{key} {path} ({table.num_rows} rows, splits {','.join(splits)})")
    return "; ".join(parts)


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    return [str(value)] if isinstance(value, str) else [str(v) for v in value]


def dry_run(config_dir: str, config_name: str, overrides: list[str]) -> LaunchReport:
    """Steps 1–5 of the module docstring; returns what the launch would train."""
    import verl

    config = compose(config_dir, config_name, overrides)
    import_launch_path(config)
    verl_validate(config)
    problems = checks.launch_problems(config)
    if problems:
        raise ConfigError("; ".join(problems))
    loss_mode, _ = checks.effective_loss_mode(config)
    loss_fn, estimator_fn = resolve_functions(config, loss_mode)
    actor, rollout = build_dataclasses(config)
    objective = read_objective()
    workers = "forwarded to" if checks.worker_objective(config) is not None else "not forwarded to"
    llds = (f"λ={objective.llds_coef} (AGENTGRPO_OBJECTIVE, {workers} the Ray workers), gate {objective.llds_gate}, "
            f"pg aggregation {objective.loss_agg}, {checks.updates_per_rollout(config)} update(s) per rollout"
            if loss_mode == checks.OUR_LOSS else "not agentgrpo's loss")
    old = "the rollout's (bypass mode)" if checks.bypass_mode(config) else "recomputed by the actor"
    return LaunchReport(
        verl_version=getattr(verl, "__version__", "?"),
        trainer=checks.trainer_name(config),
        loss_mode=loss_mode,
        loss_fn=loss_fn,
        adv_estimator=str(config.algorithm.adv_estimator),
        estimator_fn=estimator_fn,
        llds=llds,
        old_logprobs=old,
        reward=reward_description(config),
        agent_loop=agent_loop_class(config),
        data=data_description(config),
        actor=(f"{type(actor).__name__}(loss_mode={actor.policy_loss.loss_mode}, "
               f"loss_agg_mode={actor.loss_agg_mode}, ppo_mini_batch_size={actor.ppo_mini_batch_size}, "
               f"ppo_epochs={actor.ppo_epochs}, kl_loss_coef={actor.kl_loss_coef})"),
        rollout=f"{type(rollout).__name__}(name={rollout.name}, mode={rollout.mode}, n={rollout.n})",
    )


def main(argv: list[str] | None = None) -> int:
    """Print the report (exit 0), or one line saying what is refused and why (exit 2)."""
    try:
        report = dry_run(*split_argv(list(sys.argv[1:] if argv is None else argv)))
    except AgentGRPOError as exc:
        if os.environ.get("AGENTGRPO_DEBUG"):
            raise
        print(f"agentgrpo veRL launch check: {exc}", file=sys.stderr)
        return 2
    print("\n".join(report.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
