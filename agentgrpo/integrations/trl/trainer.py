"""``AgentGRPOTrainer``: TRL's ``GRPOTrainer`` with agentgrpo's advantages and objective.

What changes against TRL 1.16 (everything else — generation, tools, reward functions,
vLLM, logging — is TRL's):

The objective is ``AgentGRPOConfig.objective``, an ``agentgrpo.algos.ObjectiveSettings``
taken whole (the native trainer's ``algo`` section; ``agentgrpo hosts trl`` prints it);
TRL's own copies of its values (``epsilon``, ``epsilon_high``, ``beta``,
``importance_sampling_level``, ``scale_rewards``) are written from it.

* advantages: the rewards TRL computed (summed over reward functions with
  ``reward_weights``) go through the registry estimator the objective names
  (``agentgrpo.algos.get_advantage_estimator``: ``grpo`` = A/L, ``lata`` = A/√L,
  ``turn_discount``, ``turn_discount_lata``, ``dr_grpo``) with its knobs, giving per-token
  advantages of shape ``(B, T)``, which TRL's buffers and ``_compute_loss`` accept. Groups
  are TRL's blocks of ``num_generations``;
* loss (``_compute_loss``): ``agentgrpo.algos.grpo_objective`` with the objective's
  settings — PPO-clip (token or sequence ratio) reduced by ``loss_agg``, plus β·KL against
  TRL's reference log-probs and λ·LLDS as token means over the accumulation window (the
  same definitions as the native trainer and the veRL plugin). Turns (LLDS actions,
  Turn-Discount by turn) are the runs of ``completion_mask · tool_mask``.

LLDS compares the current log-probs with those of the policy that sampled the batch, so
it needs more than one optimizer step per generation batch (``steps_per_generation`` a
multiple >= 2 of ``gradient_accumulation_steps``, or ``num_iterations`` > 1), where TRL
keeps ``old_per_token_logps``; with one, LLDS would be exactly 0 and the config is refused
(``ObjectiveSettings.check``, the rule every trainer applies).

KL and LLDS are token means over each optimizer step's mini-batch, as in the native
trainer: once TRL has shuffled and split a generation batch, the exact token and
preserve-set counts of every accumulation window (all processes) are attached to its
micro-batches. So ``steps_per_generation`` must be a multiple of
``gradient_accumulation_steps`` when β or λ is non-zero (a window may not span two
generation batches).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch
from trl import GRPOConfig, GRPOTrainer

from agentgrpo.algos import (
    ObjectiveSettings,
    get_advantage_estimator,
    grpo_objective,
    preserve_token_count,
    updates_per_rollout,
)
from agentgrpo.integrations.host_settings import objective_problems

_MULTIMODAL_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)


_TRL_COPIES = {
    "epsilon": "clip_low",
    "epsilon_high": "clip_high",
    "beta": "kl_coef",
    "importance_sampling_level": "importance",
    "scale_rewards": "norm_by_std",
}
"""TRL's own fields that hold an objective setting -> the ``ObjectiveSettings`` field written into them."""
_TRL_DEFAULTS = {f.name: f.default for f in fields(GRPOConfig) if f.name in _TRL_COPIES}


@dataclass
class AgentGRPOConfig(GRPOConfig):
    """``GRPOConfig`` plus agentgrpo's objective, taken whole as ``objective``.

    ``objective`` is an ``agentgrpo.algos.ObjectiveSettings``, its fields as a dict, or that
    dict as JSON text (``--objective '{"llds_coef": 0.2}'`` on the command line); None is
    its defaults. It decides the advantages and the loss (``loss_agg`` replaces TRL's
    ``loss_type``), and is written into TRL's own copies of its settings (``epsilon``,
    ``epsilon_high``, ``beta``, ``importance_sampling_level``, ``scale_rewards``); giving
    one of those a value other than TRL's default and the objective's is refused.
    """

    objective: dict | str | None = field(
        default=None,
        metadata={
            "help": "agentgrpo's objective (agentgrpo.algos.ObjectiveSettings fields as a dict or JSON "
            "text; unset fields keep their defaults): estimator, clip, aggregation, KL, LLDS."
        },
    )

    def __post_init__(self) -> None:
        settings = self._objective_settings()
        self.objective = asdict(settings)
        self._write_trl_copies(settings)
        super().__post_init__()
        self._check_objective(settings)
        self._check_unsupported()

    @property
    def objective_settings(self) -> ObjectiveSettings:
        """``objective`` as the settings object every agentgrpo trainer takes."""
        return ObjectiveSettings(**self.objective)

    def _objective_settings(self) -> ObjectiveSettings:
        value = self.objective
        if isinstance(value, ObjectiveSettings):
            return value
        data = json.loads(value) if isinstance(value, str) else dict(value or {})
        known = {f.name for f in fields(ObjectiveSettings)}
        if set(data) - known:
            raise ValueError(f"objective: unknown keys {sorted(set(data) - known)}; valid keys: {sorted(known)}")
        return ObjectiveSettings(**data)

    def _write_trl_copies(self, settings: ObjectiveSettings) -> None:
        for name, source in _TRL_COPIES.items():
            value = getattr(settings, source)
            if name == "scale_rewards":
                value = "group" if value else "none"
            given = getattr(self, name)
            if name == "scale_rewards":  # TRL's bool spelling
                given = {True: "group", False: "none"}.get(given, given)
            if given not in (_TRL_DEFAULTS[name], value):
                raise ValueError(f"{name}={given!r} contradicts objective {source}={getattr(settings, source)!r}: "
                                 f"set {source} in the objective (TRL's {name} is written from it)")
            setattr(self, name, value)

    def _check_objective(self, settings: ObjectiveSettings) -> None:
        settings.check(
            updates=updates_per_rollout(self.steps_per_generation, self.gradient_accumulation_steps,
                                        self.num_iterations),
            key_format="objective.{}",
            more_updates="set steps_per_generation to a multiple >= 2 of gradient_accumulation_steps, or "
            "num_iterations >= 2, so TRL keeps the sampling policy's old_per_token_logps")
        problems = objective_problems(settings, "trl")
        if problems:
            raise ValueError("; ".join(problems))
        if (settings.llds_coef or self.beta) and (
            self.steps_per_generation % self.gradient_accumulation_steps
        ):
            raise ValueError(
                f"steps_per_generation={self.steps_per_generation} is not a multiple of "
                f"gradient_accumulation_steps={self.gradient_accumulation_steps}: an optimizer "
                "step would span two generation batches, and KL/LLDS need its exact token counts"
            )

    def _check_unsupported(self) -> None:
        """TRL options our loss does not implement: refuse them rather than ignore them."""
        if self.scale_rewards not in ("group", "none"):
            raise ValueError(
                f"scale_rewards={self.scale_rewards!r} is not supported: set 'group' (divide by "
                "the group std, GRPO) or 'none' (Dr. GRPO)"
            )
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                "set multi_objective_aggregation='sum_then_normalize': agentgrpo normalises the "
                "summed reward within each group"
            )
        if self.loss_type in ("cispo", "sapo", "vespo", "luspo"):
            raise ValueError(
                f"loss_type={self.loss_type!r} is not a PPO-clip loss; AgentGRPOTrainer always "
                "uses PPO-clip and reduces it with loss_agg"
            )
        unsupported = {
            "delta": self.delta is not None,
            "off_policy_mask_threshold": self.off_policy_mask_threshold is not None,
            "top_entropy_quantile": self.top_entropy_quantile < 1.0,
            "entropy_coef": self.entropy_coef != 0.0 or self.use_adaptive_entropy,
        }
        for name, enabled in unsupported.items():
            if enabled:
                raise ValueError(
                    f"{name} is not supported by AgentGRPOTrainer: leave it at TRL's default"
                )


class AgentGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose advantages and loss come from ``agentgrpo.algos`` (see the module
    docstring). Takes TRL's arguments; ``args`` must be an ``AgentGRPOConfig``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(self.args, AgentGRPOConfig):
            raise TypeError("AgentGRPOTrainer needs args=AgentGRPOConfig(...)")
        self._rewards_per_func: torch.Tensor | None = None
        self._counted_buffer: list[dict[str, Any]] | None = None

    # ---- advantages -------------------------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        """TRL's rewards ``[B_global, F]``, kept for :meth:`_token_advantages`."""
        self._rewards_per_func = super()._calculate_rewards(
            inputs, prompts, completions, completion_ids_list
        )
        return self._rewards_per_func

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        output["advantages"] = self._token_advantages(output)
        return output

    @staticmethod
    def loss_mask(inputs: dict[str, Any]) -> torch.Tensor:
        """``completion_mask · tool_mask``: 1 on tokens the policy sampled, ``(B, T)``."""
        mask = inputs["completion_mask"]
        return mask * inputs["tool_mask"] if "tool_mask" in inputs else mask

    def _token_advantages(self, output: dict[str, Any]) -> torch.Tensor:
        """``(B_local, T)`` token advantages of this process's rows of the generation batch.

        Group statistics need every process's rewards (TRL gathers them); the token
        factors need only this process's masks, so the estimator sees the global rewards
        with a mask that is zero outside this process's rows.
        """
        rewards_per_func = self._rewards_per_func
        if torch.isnan(rewards_per_func).all(dim=1).any():
            raise ValueError(
                "every reward function returned None for some completion; agentgrpo's "
                "group normalisation needs a reward for each completion"
            )
        weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
        # [B_global]: the reward functions summed with TRL's weights, as TRL does
        rewards = (rewards_per_func * weights).nansum(dim=1)
        mode = "train" if self.model.training else "eval"
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        group_ids = torch.arange(rewards.numel(), device=rewards.device) // group_size
        mask = self.loss_mask(output)
        rows = mask.shape[0]
        start = self.accelerator.process_index * rows
        global_mask = mask.new_zeros((rewards.numel(), mask.shape[1]))
        global_mask[start : start + rows] = mask
        settings = self.args.objective_settings
        advantages = get_advantage_estimator(settings.adv_estimator)(
            rewards, group_ids, global_mask, **settings.estimator_kwargs()
        )
        for name, value in advantages.metrics.items():
            self._metrics[mode][name].append(float(value))
        token_adv = advantages.token[start : start + rows].to(mask.device)
        # the LLDS denominator over the whole generation batch, carried like num_items_in_batch
        output["num_preserve_tokens"] = self.accelerator.gather(
            preserve_token_count(token_adv, mask)
        ).sum()
        return token_adv

    def _prepare_inputs(self, generation_batch):
        inputs = super()._prepare_inputs(generation_batch)
        if self.model.training and self._buffered_inputs is not self._counted_buffer:
            self.count_windows(self._buffered_inputs)
            self._counted_buffer = self._buffered_inputs
        return inputs

    def count_windows(self, micro_batches: list[dict[str, Any]]) -> None:
        """Attach to each micro-batch the token and preserve-set counts of its optimizer step
        (``gradient_accumulation_steps`` consecutive micro-batches, summed over processes):
        the exact denominators of KL and LLDS."""
        steps = self.args.gradient_accumulation_steps
        for start in range(0, len(micro_batches), steps):
            window = micro_batches[start : start + steps]
            local = torch.zeros(2, device=self.accelerator.device)
            for batch in window:
                mask = self.loss_mask(batch)
                local[0] += mask.sum()
                local[1] += preserve_token_count(batch["advantages"], mask)
            total = self.accelerator.gather(local.unsqueeze(0)).sum(dim=0)
            for batch in window:
                batch["window_num_tokens"], batch["window_num_preserve_tokens"] = total[0], total[1]

    # ---- loss -----------------------------------------------------------------------------
    def loss_denominators(self, inputs: dict[str, Any], mask: torch.Tensor) -> dict[str, Any]:
        """``grpo_objective`` denominators for one micro-batch, so the optimizer step sees the
        mean over its whole accumulation window (TRL turns Trainer's own loss scaling off).

        Sequences: this micro-batch's rows × accumulation steps (TRL's ``grpo`` scaling);
        tokens and preserve-set tokens: the window's exact counts (``count_windows``) per
        process, as DDP averages the processes' gradients; horizon: ``max_completion_length``.
        Outside training (or for inputs not prepared by ``_prepare_inputs``) the generation
        batch's counts, scaled to one window as TRL's ``dapo`` normaliser does.
        """
        train = self.model.training
        accumulation = self.current_gradient_accumulation_steps if train else 1
        processes = self.accelerator.num_processes
        if train and "window_num_tokens" in inputs:
            tokens, preserve = inputs["window_num_tokens"], inputs["window_num_preserve_tokens"]
            return {
                "num_tokens": tokens.clamp(min=1.0) / processes,
                "num_preserve_tokens": preserve / processes,
                "num_seqs": mask.shape[0] * accumulation,
                "horizon": self.max_completion_length,
            }
        window = processes * (self.args.steps_per_generation / accumulation if train else 1)
        preserve = inputs.get("num_preserve_tokens")
        return {
            "num_tokens": inputs["num_items_in_batch"].clamp(min=1.0) / window,
            "num_preserve_tokens": None if preserve is None else preserve / window,
            "num_seqs": mask.shape[0] * accumulation,
            "horizon": self.max_completion_length,
        }

    def _per_token_logps(self, model, inputs: dict[str, Any]) -> tuple[torch.Tensor, Any, Any]:
        input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        extra = {key: inputs.get(key) for key in _MULTIMODAL_KEYS}
        return self._get_per_token_logps_and_entropies(
            model,
            input_ids,
            attention_mask,
            inputs["completion_ids"].size(1),
            compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled,
            **extra,
        )

    def _compute_loss(self, model, inputs):
        logps, entropies, aux_loss = self._per_token_logps(model, inputs)  # (B, T)
        loss, metrics = self.objective(logps, inputs, entropies)
        if self.aux_loss_enabled:  # MoE load balancing, scaled for accumulation as TRL does
            accumulation = self.current_gradient_accumulation_steps if self.model.training else 1
            loss = loss + self.router_aux_loss_coef * aux_loss / accumulation
        self._log_loss_metrics(metrics)
        return loss

    def objective(
        self, logps: torch.Tensor, inputs: dict[str, Any], entropies: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """``grpo_objective`` on one micro-batch of TRL's inputs (``logps``: ``(B, T)``;
        ``entropies`` are only logged)."""
        mask = self.loss_mask(inputs)
        advantages = inputs["advantages"]
        if advantages.dim() == 1:  # a batch scored by plain TRL code: broadcast A to the tokens
            advantages = advantages.unsqueeze(1).expand_as(logps)
        old = inputs.get("old_per_token_logps")
        old = logps.detach() if old is None else old
        is_weights = inputs.get("importance_sampling_ratio")
        if is_weights is not None:
            is_weights = is_weights.expand_as(logps)
        return grpo_objective(
            logps,
            old,
            advantages,
            mask,
            ref_logp=inputs.get("ref_per_token_logps") if self.beta != 0.0 else None,
            entropy=None if entropies is None else entropies.detach(),
            rollout_is_weights=is_weights,
            **self.args.objective_settings.loss_kwargs(),
            **self.loss_denominators(inputs, mask),
        )

    def _log_loss_metrics(self, metrics: dict[str, float]) -> None:
        """Log the objective's metrics. ``loss/*`` values are a micro-batch's share of the
        accumulation window; TRL averages what is logged over the window's micro-batches,
        so each is scaled by the accumulation steps to log the window's value."""
        mode = "train" if self.model.training else "eval"
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1
        for name, value in metrics.items():
            scale = accumulation if name.startswith("loss/") else 1
            self._metrics[mode][name].append(value * scale)
