"""The names of the per-step metrics a GRPO run writes to ``metrics.jsonl`` (one vocabulary).

The trainer and its phases write these names; ``agentgrpo diagnose``, the report's plots and
the jobs read them back, so every side spells a metric through the same constant here. This
module imports nothing: any layer (train, eval, diagnose, report, jobs) may import it.

Names are ``prefix/name`` (STYLE rule 7): ``reward/`` (rewards of the sampled episodes),
``rollout/`` (lengths, endings, dynamic sampling), ``prm/`` (PRM-Lite rules fired),
``sampler/`` (the task sampler), ``algo/`` (advantages, PPO ratio and clipping, LLDS / LLD,
gradient, learning rate), ``loss/`` (the objective's terms), ``perf/`` (seconds per phase,
throughput) and ``val/`` (validation). The LLDS regulariser's and the LLD rate's metrics are
all ``algo/llds_*`` and ``algo/lld_*`` (``loss/llds`` for the term itself).

``agentgrpo.algos`` returns some of these names itself (``grpo_objective``'s
``OBJECTIVE_METRICS``, the advantage estimators' ``algo/…``): it imports nothing from the
package, so it spells them on its own, and a test checks that they are all listed here.
"""
from __future__ import annotations

# ---- reward/: rewards of the episodes sampled in a step (agentgrpo.train.rollout_metrics)
REWARD_OUTCOME_MEAN = "reward/outcome_mean"
REWARD_PROCESS_MEAN = "reward/process_mean"
REWARD_TOTAL_MEAN = "reward/total_mean"
REWARD_TOTAL_STD = "reward/total_std"
REWARD_OUTCOME_SATURATED_GROUP_FRAC = "reward/outcome_saturated_group_frac"
"""Share of groups whose outcomes all agree (the process score ignored, unlike ``ALGO_SATURATED_GROUP_FRAC``)."""
REWARD_NON_FINITE = "reward/non_finite"
"""Episodes left out because their reward was NaN or ±inf (``drop_unusable``)."""

# ---- rollout/: the sampled episodes and how the step's groups were gathered
ROLLOUT_RESPONSE_TOKENS_MEAN = "rollout/response_tokens_mean"
ROLLOUT_SEQUENCE_TOKENS_MEAN = "rollout/sequence_tokens_mean"
ROLLOUT_TURNS_MEAN = "rollout/turns_mean"
ROLLOUT_TOKENS_PER_TURN_P50 = "rollout/tokens_per_turn_p50"
ROLLOUT_TOKENS_PER_TURN_MEAN = "rollout/tokens_per_turn_mean"
ROLLOUT_MALFORMED_TURN_RATE = "rollout/malformed_turn_rate"
ROLLOUT_ERROR_RATE = "rollout/error_rate"
ROLLOUT_INVALID_RATE = "rollout/invalid_rate"
ROLLOUT_TOOL_CALLS_MEAN = "rollout/tool_calls_mean"
ROLLOUT_WRITE_EPISODE_FRAC = "rollout/write_episode_frac"
"""Share of episodes with at least one well-formed call to a write tool (the domain's ``write_tools``)."""
ROLLOUT_EXECUTED_WRITE_EPISODE_FRAC = "rollout/executed_write_episode_frac"
"""Share of episodes with at least one write call that did not fail (it changed the state)."""
ROLLOUT_SUCCESS_BUFFER = "rollout/success_buffer"
"""Successful write episodes the self-imitation term can replay after the step (``trainer.success_coef``)."""
ROLLOUT_ABORTED = "rollout/aborted"
ROLLOUT_SKIPPED_GROUPS = "rollout/skipped_groups"
ROLLOUT_GENERATION_ROUNDS = "rollout/generation_rounds"
ROLLOUT_SHARED_ROUNDS = "rollout/shared_rounds"
"""Generation rounds read from ``trainer.shared_rollouts_dir`` instead of sampled."""
ROLLOUT_FILTERED_GROUPS = "rollout/filtered_groups"
ROLLOUT_INFORMATIVE_GROUPS = "rollout/informative_groups"
ROLLOUT_INFORMATIVE_GROUP_FRAC = "rollout/informative_group_frac"
ROLLOUT_INFORMATIVE_WRITE_GROUP_FRAC = "rollout/write_informative_group_frac"
"""Informative share among the groups of write tasks (a gold action calls a write tool)."""
ROLLOUT_INFORMATIVE_NO_WRITE_GROUP_FRAC = "rollout/no_write_informative_group_frac"
"""Informative share among the groups of the other tasks (refusals, information, transfers)."""
ROLLOUT_END_PREFIX = "rollout/end_"
"""``rollout/end_<termination>``: share of episodes that ended that way (``rollout_end``)."""
PRM_PREFIX = "prm/"
"""``prm/<rule>_per_traj``: PRM-Lite rule firings per trajectory (``prm_rule``)."""

# ---- sampler/: the task sampler (agentgrpo.train.task_sampler)
SAMPLER_POOL_TASKS = "sampler/pool_tasks"
SAMPLER_UNTRIED_FRAC = "sampler/untried_frac"
SAMPLER_FRONTIER_FRAC = "sampler/frontier_frac"
SAMPLER_SUCCESS_MEAN = "sampler/success_mean"

# ---- algo/: advantages (the estimators of agentgrpo.algos.registry)
ALGO_ADV_MEAN = "algo/adv_mean"
ALGO_ADV_STD = "algo/adv_std"
ALGO_ADV_ABS_MAX = "algo/adv_abs_max"
ALGO_TOKEN_ADV_MEAN = "algo/token_adv_mean"
ALGO_TOKEN_ADV_ABS_MAX = "algo/token_adv_abs_max"
ALGO_GROUPS = "algo/groups"
ALGO_GROUPS_SINGLETON = "algo/groups_singleton"
ALGO_GROUPS_ZERO_SPREAD = "algo/groups_zero_spread"
ALGO_GROUPS_ALL_ZERO = "algo/groups_all_zero"
ALGO_GROUPS_ALL_ONE = "algo/groups_all_one"
ALGO_SATURATED_GROUP_FRAC = "algo/saturated_group_frac"
ALGO_ZERO_ADV_GROUP_FRAC = "algo/zero_adv_group_frac"

# ---- algo/: the update (agentgrpo.algos.grpo_objective and the trainer's optimizer step)
ALGO_PG_CLIPFRAC = "algo/pg_clipfrac"
ALGO_PG_CLIPFRAC_LOWER = "algo/pg_clipfrac_lower"
ALGO_PG_CLIPFRAC_UPPER = "algo/pg_clipfrac_upper"
ALGO_PPO_KL = "algo/ppo_kl"
ALGO_RATIO_MEAN = "algo/ratio_mean"
ALGO_RATIO_MAX = "algo/ratio_max"
ALGO_GRAD_NORM = "algo/grad_norm"
"""Pre-clip gradient norm, averaged over the step's optimizer steps."""
ALGO_GRAD_NORM_MAX = "algo/grad_norm_max"
ALGO_SKIPPED_STEP_FRAC = "algo/skipped_step_frac"
"""Share of the step's optimizer steps skipped (zero gradient; 1 when nothing was learned from)."""
ALGO_LR = "algo/lr"
ALGO_PRESERVE_FIRST_ORDER = "algo/preserve_first_order"
"""``trainer.preserve_writes``: the first-order change of the preserve set's log-likelihood by the
optimizer's step as it came (⟨Δθ, ∇ℓ⟩, before any projection); below 0 the step was projected."""
ALGO_PRESERVE_PROJECTED_FRAC = "algo/preserve_projected_frac"
"""``trainer.preserve_writes``: share of the step's updates whose move was projected."""

# ---- algo/: LLDS and the LLD rate
ALGO_LLDS_GATED_ACTION_FRAC = "algo/llds_gated_action_frac"
ALGO_LLDS_PENALIZED_TOKEN_FRAC = "algo/llds_penalized_token_frac"
ALGO_LLDS_PRESERVE_FRAC = "algo/llds_preserve_frac"
ALGO_LLD_ACTION_RATE = "algo/lld_action_rate"
"""LLD rate within the updates: preserve-set actions whose log-likelihood fell, mini-batch by mini-batch."""
ALGO_LLD_RATE = "algo/lld_rate"
"""LLD rate after the step's updates (``trainer.lld_diagnostic``: one extra forward pass)."""
ALGO_LOGP_CHANGE_ADV_NONNEG = "algo/logp_change_adv_nonneg"
"""Mean per-token log-prob change over the step of the A ≥ 0 rows (the preserve set)."""
ALGO_LOGP_CHANGE_ADV_NEG = "algo/logp_change_adv_neg"

# ---- loss/: the terms of L = L_pg + β·KL + λ·L_LLDS − c_H·H
LOSS_TOTAL = "loss/total"
LOSS_PG = "loss/pg"
LOSS_KL = "loss/kl"
LOSS_LLDS = "loss/llds"
LOSS_ENTROPY = "loss/entropy"
LOSS_DEMO_NLL = "loss/demo_nll"
"""Token-mean NLL of the demonstrations an update replays (``trainer.demo_coef``; unscaled, not in
``loss/total``)."""
LOSS_SUCCESS_NLL = "loss/success_nll"
LOSS_PRESERVE = "loss/preserve"
"""``trainer.preserve_writes=hinge``: the LLDS term on the kept successful write episodes (unscaled)."""
"""Token-mean NLL of the policy's own earlier successful write episodes an update replays
(``trainer.success_coef``; unscaled, not in ``loss/total``)."""

# ---- perf/: seconds per phase of a step, and throughput
PERF_ROLLOUT_S = "perf/rollout_s"
"""Task draw and rollouts (every generation round)."""
PERF_SCORE_S = "perf/score_s"
"""Rewards, leaving out unusable episodes and groups, and advantages."""
PERF_OLD_LOGPROB_S = "perf/old_logprob_s"
"""The update plan, old (behaviour) and reference log-probs."""
PERF_UPDATE_S = "perf/update_s"
PERF_LLD_S = "perf/lld_s"
PERF_STEP_S = "perf/step_s"
"""The sum of the step's phases."""
PERF_ENGINE_TOKENS_PER_S = "perf/engine_tokens_per_s"

# ---- val/: validation (trainer.val_every)
VAL_PASS1 = "val/pass1"
VAL_EPISODES = "val/episodes"


def rollout_end(termination: str) -> str:
    """``rollout/end_<termination>``: the share of a step's episodes that ended that way."""
    return f"{ROLLOUT_END_PREFIX}{termination}"


def prm_rule(rule: str) -> str:
    """``prm/<rule>_per_traj``: how often a PRM-Lite rule fired per trajectory."""
    return f"{PRM_PREFIX}{rule}_per_traj"


STEP_METRICS: frozenset[str] = frozenset(
    value for key, value in dict(globals()).items() if key.isupper() and isinstance(value, str) and "/" in value
    and not value.endswith(("/", "_"))
)
"""Every fixed name above (the ``rollout/end_…`` and ``prm/…`` families are open-ended)."""


def is_step_metric(name: str) -> bool:
    """Whether ``name`` is one of this vocabulary's names (fixed, or of an open-ended family)."""
    return name in STEP_METRICS or (name.startswith(ROLLOUT_END_PREFIX) and len(name) > len(ROLLOUT_END_PREFIX)) or (
        name.startswith(PRM_PREFIX) and name.endswith("_per_traj"))
