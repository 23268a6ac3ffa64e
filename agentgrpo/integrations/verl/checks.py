"""What a veRL launch would really train, and the settings that would silently change it.

veRL resolves the policy loss and the advantage estimator by name, but some of its
settings swap them behind the name the config shows. In veRL 0.9.1 (read from its
source):

* the **legacy trainer** (``trainer.use_v1=false``; the only trainer before 0.9) in
  **bypass mode** (``algorithm.rollout_correction.bypass_mode=true``) overwrites
  ``actor.policy_loss.loss_mode`` with ``bypass_mode`` (veRL's own PPO-clip) in
  ``rollout_corr_helper.apply_bypass_mode``: ``agentgrpo_llds`` and its LLDS term are
  gone. The V1 trainer (0.9's default) only takes the old log-probs from the rollout and
  keeps the loss;
* **distillation** without task rewards (``distillation.enabled=true``,
  ``distillation.distillation_loss.use_task_rewards=false``) replaces the policy loss by
  the distillation loss;
* one update per rollout without bypass mode (``ppo_epochs=1``, ``ppo_mini_batch_size =
  data.train_batch_size``) makes the old log-probs equal the current ones, so LLDS is
  exactly 0 whatever λ says (the native trainer refuses the same setup);
* ``actor.loss_agg_mode`` other than ``token-mean`` changes what β means (``agentgrpo_llds``
  refuses it at the first step; we refuse it before Ray starts);
* the objective (``AGENTGRPO_OBJECTIVE``, ``settings.read_objective``) out of range or
  contradicting itself (``ObjectiveSettings.check``: e.g. an aggregation that divides by the
  length again), asking for what veRL cannot do (per-turn PRM credit), or disagreeing with
  veRL's own copies of its values: ``algorithm.adv_estimator`` (must be
  ``agentgrpo_<its estimator>``), ``actor.use_kl_loss`` / ``kl_loss_coef`` /
  ``kl_loss_type`` and ``actor.entropy_coeff``;
* an objective forwarded to the Ray workers that differs from the one this process exported;
* with λ > 0 (the objective's ``llds_coef``): bypass mode (old log-probs from vLLM, another
  numeric path: LLDS would penalise that mismatch and never be 0 on unchanged weights);
  and anything that keeps the estimator from carrying each mini-batch's preserve count to
  the loss exactly: an estimator that is not ``agentgrpo_*``, ``actor.shuffle=true``, a
  non-FSDP actor, or ``algorithm.llds_mini_batch_size`` / ``llds_rollout_n`` /
  ``llds_dp_size`` that differ from the actor's mini-batch, ``rollout.n`` and
  data-parallel size.

``launch_problems(config)`` lists each of these as a message naming the setting and the
fix; the dry run (``dry_run``) and every launch script refuse a config with any. Also
here: ``effective_loss_mode`` / ``trainer_name`` (what the dry run prints). The rules read
a composed config (DictConfig or dict) and call nothing of veRL's.
"""

from __future__ import annotations

from typing import Any

from agentgrpo.algos import ObjectiveSettings
from agentgrpo.algos import updates_per_rollout as count_updates
from agentgrpo.integrations.host_settings import objective_problems
from agentgrpo.integrations.verl.estimators import VERL_PREFIX
from agentgrpo.integrations.verl.losses import HOST_LOSS_AGG
from agentgrpo.integrations.verl.settings import OBJECTIVE_ENV, parse_objective, read_objective

OUR_LOSS = "agentgrpo_llds"
BYPASS_KEY = "algorithm.rollout_correction.bypass_mode"
USE_V1_KEY = "trainer.use_v1"
WORKER_ENV = "ray_kwargs.ray_init.runtime_env.env_vars"


def select(config: Any, key: str, default: Any = None) -> Any:
    """``config[a][b]...`` for the dotted ``key``; ``default`` when a level is missing or None."""
    node = config
    for part in key.split("."):
        if node is None:
            return default
        try:
            node = node.get(part, None) if hasattr(node, "get") else getattr(node, part, None)
        except (AttributeError, KeyError, TypeError):
            return default
    return default if node is None else node


def uses_v1(config: Any) -> bool:
    """The V1 trainer (veRL ≥ 0.9 with ``trainer.use_v1``) rather than the legacy one."""
    return bool(select(config, USE_V1_KEY, False))


def trainer_name(config: Any) -> str:
    """``v1 (<trainer_mode>)`` or ``legacy``, as ``verl.trainer.main_ppo`` will choose."""
    if uses_v1(config):
        return f"v1 ({select(config, 'trainer.v1.trainer_mode', 'sync')})"
    return "legacy"


def bypass_mode(config: Any) -> bool:
    return bool(select(config, BYPASS_KEY, False))


def configured_loss_mode(config: Any) -> str:
    return str(select(config, "actor_rollout_ref.actor.policy_loss.loss_mode", "vanilla"))


def effective_loss_mode(config: Any) -> tuple[str, str | None]:
    """``(loss veRL will call, the setting that replaced the configured one or None)``."""
    configured = configured_loss_mode(config)
    if bypass_mode(config) and not uses_v1(config):
        return "bypass_mode", f"{BYPASS_KEY}=true with the legacy trainer ({USE_V1_KEY}=false or absent)"
    distill = select(config, "distillation")
    if select(distill, "enabled", False) and not select(distill, "distillation_loss.use_task_rewards", True):
        return "distillation", "distillation.enabled=true with distillation.distillation_loss.use_task_rewards=false"
    return configured, None


def updates_per_rollout(config: Any) -> int:
    """Optimizer steps per rollout batch (veRL counts the batch and its mini-batches in prompts)."""
    batch = int(select(config, "data.train_batch_size", 1))
    return count_updates(batch, int(select(config, "actor_rollout_ref.actor.ppo_mini_batch_size", batch)),
                         int(select(config, "actor_rollout_ref.actor.ppo_epochs", 1)))


def worker_objective(config: Any) -> ObjectiveSettings | None:
    """The objective the launch hands every Ray worker (``ray_kwargs.ray_init.runtime_env.env_vars``,
    where ``examples/verl/common.sh`` forwards ``AGENTGRPO_OBJECTIVE``); None when not forwarded."""
    value = select(config, f"{WORKER_ENV}.{OBJECTIVE_ENV}")
    return None if value is None else parse_objective(str(value))


def copy_mismatches(config: Any, objective: ObjectiveSettings) -> list[str]:
    """veRL's own copies of the objective's values that disagree with it (module docstring)."""
    actor = "actor_rollout_ref.actor"
    kl_on = objective.kl_coef > 0
    copies = {
        "algorithm.adv_estimator": (VERL_PREFIX + objective.adv_estimator, "adv_estimator"),
        f"{actor}.use_kl_loss": (kl_on, "kl_coef"),
        f"{actor}.entropy_coeff": (objective.entropy_coef, "entropy_coef"),
    }
    if kl_on:
        copies.update({f"{actor}.kl_loss_coef": (objective.kl_coef, "kl_coef"),
                       f"{actor}.kl_loss_type": (objective.kl_kind, "kl_kind")})
    problems = []
    for key, (expected, field) in copies.items():
        got = select(config, key)
        if got != expected and not (key.endswith("adv_estimator") and not str(got).startswith(VERL_PREFIX)):
            problems.append(f"{key}={got} disagrees with the objective's algo.{field}={getattr(objective, field)} "
                            f"(AGENTGRPO_OBJECTIVE): set algo.{field} and let `agentgrpo hosts verl` write {key}")
    return problems


def actor_dp_size(config: Any) -> int:
    """Data-parallel ranks of an FSDP actor: GPUs (per node × nodes) over Ulysses sequence parallelism."""
    gpus = int(select(config, "trainer.n_gpus_per_node", 1)) * int(select(config, "trainer.nnodes", 1))
    return gpus // max(1, int(select(config, "actor_rollout_ref.actor.ulysses_sequence_parallel_size", 1)))


def llds_count_problems(config: Any) -> list[str]:
    """What keeps the estimator from carrying each mini-batch's exact LLDS count to the loss."""
    estimator = str(select(config, "algorithm.adv_estimator", ""))
    if not estimator.startswith(VERL_PREFIX):
        return [f"algorithm.adv_estimator={estimator} does not carry the LLDS preserve counts: use an "
                f"{VERL_PREFIX}* estimator with algo.llds_coef > 0"]
    problems = []
    if select(config, "actor_rollout_ref.actor.shuffle", False):
        problems.append("actor_rollout_ref.actor.shuffle=true reorders the mini-batches the LLDS counts were "
                        "made for: set it to false")
    strategy = str(select(config, "actor_rollout_ref.actor.strategy", "fsdp"))
    if strategy not in ("fsdp", "fsdp2"):
        problems.append(f"actor_rollout_ref.actor.strategy={strategy}: exact LLDS counts are implemented "
                        "for FSDP actors only")
    expected = {"llds_mini_batch_size": select(config, "actor_rollout_ref.actor.ppo_mini_batch_size"),
                "llds_rollout_n": select(config, "actor_rollout_ref.rollout.n"),
                "llds_dp_size": actor_dp_size(config)}
    for key, value in expected.items():
        got = select(config, f"algorithm.{key}")
        if got is None or value is None or int(got) != int(value):
            problems.append(f"algorithm.{key}={got} must be {value} (the actor's) for exact LLDS counts")
    return problems


def launch_problems(config: Any) -> list[str]:
    """Every setting that would replace or silently disable agentgrpo's loss or estimator."""
    problems = []
    configured = configured_loss_mode(config)
    effective, replaced_by = effective_loss_mode(config)
    if configured == OUR_LOSS and replaced_by is not None:
        fix = (f"set {BYPASS_KEY}=false (old log-probs recomputed) or {USE_V1_KEY}=true (veRL >= 0.9)"
               if effective == "bypass_mode" else "set distillation.enabled=false")
        problems.append(f"{replaced_by} replaces actor_rollout_ref.actor.policy_loss.loss_mode={OUR_LOSS} "
                        f"by veRL's {effective!r} (no LLDS, not agentgrpo's objective): {fix}")
    if configured == OUR_LOSS:
        agg = select(config, "actor_rollout_ref.actor.loss_agg_mode", HOST_LOSS_AGG)
        if agg != HOST_LOSS_AGG:
            problems.append(f"actor_rollout_ref.actor.loss_agg_mode={agg}: with loss_mode={OUR_LOSS} it must be "
                            f"{HOST_LOSS_AGG} (veRL reduces β·KL with it); set the policy-gradient aggregation "
                            "with algo.loss_agg")
        objective = read_objective()
        try:
            objective.check(updates=updates_per_rollout(config), key_format="algo.{}",
                            more_updates="set actor_rollout_ref.actor.ppo_mini_batch_size to a proper divisor of "
                            "data.train_batch_size, or actor_rollout_ref.actor.ppo_epochs >= 2")
        except ValueError as error:
            problems.append(str(error))
        problems.extend(objective_problems(objective, "verl"))
        problems.extend(copy_mismatches(config, objective))
        forwarded = worker_objective(config)
        if forwarded is not None and forwarded != objective:
            problems.append(f"{WORKER_ENV}.{OBJECTIVE_ENV} differs from the {OBJECTIVE_ENV} of this process: the "
                            "Ray workers' loss would train another objective than the driver's estimator "
                            "computes advantages for; forward the exported value unchanged")
        if objective.llds_coef > 0 and bypass_mode(config):
            problems.append(f"algo.llds_coef={objective.llds_coef} with {BYPASS_KEY}=true: old log-probs from the "
                            "rollout engine are another numeric path, so LLDS would penalise that mismatch "
                            f"(never 0 on unchanged weights); set {BYPASS_KEY}=false")
        if objective.llds_coef > 0:
            problems.extend(llds_count_problems(config))
    if bypass_mode(config) and not select(config, "actor_rollout_ref.rollout.calculate_log_probs", False):
        problems.append(f"{BYPASS_KEY}=true takes the old log-probs from the rollout: set "
                        "actor_rollout_ref.rollout.calculate_log_probs=true")
    return problems


def is_ours(name: str) -> bool:
    """A loss or estimator name this plugin registers."""
    return name == OUR_LOSS or name.startswith(VERL_PREFIX)
