"""The GRPO trainer for multi-turn tool agents (every variant of DESIGN.md §1).

``GRPOTrainer.train`` loops over the steps: step → validate → log → checkpoint. One step
(``GRPOTrainer.step``) reads top to bottom: the step's scored groups (``GroupSampler.sample``
in ``agentgrpo.train.groups``: tasks → rollouts → outcome + PRM-Lite → unusable episodes and,
with ``trainer.dynamic_sampling``, groups without signal left out) → advantages and token
weights (a named estimator from ``agentgrpo.algos``) → old/reference log-probs →
``ppo_epochs`` × mini-batches of updates on ``agentgrpo.algos.grpo_objective``
(``L_pg + β·KL + λ·L_LLDS − c_H·H``, plus ``trainer.demo_coef`` × a few oracle
demonstrations' NLL and ``trainer.success_coef`` × a few of the policy's own earlier successful
write episodes' NLL, ``agentgrpo.train.demo_replay``) → LLD diagnostics. The variant is entirely in the
config; nothing here branches on it. The metrics' names are ``agentgrpo.metric_names``.

The step's partition into mini- and micro-batches is planned once (``plan_updates``): the
old log-probs, every epoch's updates and the after-update LLD pass run on the same
micro-batches, in the same mode, with dropout off (``agentgrpo.train.step_plan``), so on
unchanged weights new == old bit for bit — LLDS is exactly 0 on the first mini-batch and
the LLD rate is 0 when nothing was learned. The same identity lets the first mini-batch take
its old log-probs from its own update forward, and the first step take the reference's from
the policy's, instead of passes of their own (``share_forwards``).

Everything random is derived from ``(seed, step)`` and the generation round (task order,
user simulators, sampling, mini-batch shuffles); the frontier sampler's statistics are
saved in each checkpoint, so a run resumed from a checkpoint repeats exactly
what the uninterrupted run would have done.
"""
from __future__ import annotations

import math
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from agentgrpo import metric_names as metric
from agentgrpo.agent.masking import SFTExample
from agentgrpo.agent.types import Trajectory
from agentgrpo.algos import get_advantage_estimator, grpo_objective, llds_loss, preserve_token_count
from agentgrpo.config import ConfigError, to_dict, to_yaml
from agentgrpo.envs.registry import write_tools
from agentgrpo.policy.device import model_device
from agentgrpo.policy.forward import PolicyForward, TokenScores
from agentgrpo.policy.hf import load_for_training, load_policy, read_agent_config, resolve_view, save_policy
from agentgrpo.progress import progress_bar
from agentgrpo.tracking import make_tracker
from agentgrpo.train.batch import RolloutBatch, collate
from agentgrpo.train.checkpoint import load_trainer_state, restore_training_state, save_checkpoint
from agentgrpo.train.demo_replay import (
    DEFAULT_DEMONSTRATED_SPLITS,
    Anchored,
    DemoReplay,
    PreserveSet,
    SuccessReplay,
    demo_write_tools,
)
from agentgrpo.train.groups import GroupSampler
from agentgrpo.train.grpo_config import GRPOConfig
from agentgrpo.train.optim import make_optimizer, make_scheduler
from agentgrpo.train.resume import resume_checkpoint
from agentgrpo.train.rollout_metrics import rollout_metrics
from agentgrpo.train.sft import collate_examples, nll_backward
from agentgrpo.train.step_plan import UpdatePlan, disable_dropout, logprob_change, plan_updates
from agentgrpo.train.task_sampler import TaskRefill, derive_seed


class GRPOTrainer:
    """Holds the policy (and the frozen reference), the optimizer and the step's data side
    (``groups``: environment, task sampler, rollout engine, PRM-Lite); ``step()`` runs one
    training step, ``train()`` the loop over them (with validation, logging and checkpoints)."""

    share_forwards: bool = True
    """Skip the passes whose values another forward already gives: the first mini-batch's old
    log-probs are its update forward's (``learn``), and before the policy's first step its
    log-probs are the reference's (``compute_old_logprobs``). False runs every pass, the
    baseline the saving is measured against."""

    def __init__(self, config: GRPOConfig, resume: bool = False, force: bool = False,
                 task_refill: TaskRefill | None = None):
        """``task_refill(step)``: fresh training tasks for the frontier sampler's pool (a domain that
        generates tasks; a pure function of the step). Without it the pool is the training split."""
        self.config = cfg = config
        cfg.env = resolve_view(cfg.env, cfg.policy.init)  # the SFT checkpoint's view
        self.run_dir = Path(cfg.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        t = cfg.trainer
        checkpoint = resume_checkpoint(self.run_dir, cfg, force=force) if resume else None
        self.model, self.tokenizer = load_for_training(cfg.policy, checkpoint / "model" if checkpoint else None)
        disable_dropout(self.model)
        self.device = model_device(self.model)
        self.reference = self._load_reference(getattr(torch, cfg.policy.dtype))
        self.agent_config = read_agent_config(cfg.policy.init)
        self.groups = GroupSampler(cfg, self.model, self.tokenizer, self.agent_config["prompt_style"], task_refill)
        self.demo_replay = self._demo_replay() if t.demo_coef > 0 else None
        self.success_replay = (SuccessReplay(t.success_buffer, t.success_batch_size, cfg.seed, self.groups.write_tools)
                               if t.success_coef > 0 else None)
        self.preserve_set = (PreserveSet(t.success_buffer, t.success_batch_size, cfg.seed, self.groups.write_tools)
                             if t.preserve_writes != "off" else None)
        self.forward = PolicyForward(self.model, compile=t.compile, autocast=cfg.policy.autocast_devices)
        self.reference_forward = (PolicyForward(self.reference, autocast=cfg.policy.autocast_devices)
                                  if self.reference is not None else None)
        self.estimator = get_advantage_estimator(cfg.algo.adv_estimator)
        updates_per_step = t.ppo_epochs * (t.tasks_per_step * t.group_size // t.mini_batch_size)
        self.optimizer = make_optimizer(self.model, t.lr, t.weight_decay, t.betas)
        self.scheduler = make_scheduler(self.optimizer, t.steps * updates_per_step, t.warmup_steps, t.lr_schedule)
        self.start_step = 0
        self._policy_is_init = True
        """No optimizer step yet in this run: the policy is ``policy.init``, so its log-probs serve
        as the reference's and its rollouts are any other such run's (``shared_rollouts``)."""
        self.last_batch: RolloutBatch | None = None
        """The batch the latest ``step()`` trained on (None if it learned from nothing): its tokens
        and plan are what a benchmark measures the update against."""
        if checkpoint is not None:
            restore_training_state(checkpoint, self.optimizer, self.scheduler)
            state = load_trainer_state(checkpoint)
            self.start_step = state["step"]
            self._policy_is_init = False
            self.groups.load_state_dict(state.get("task_sampler", {"kind": "uniform"}), self.start_step)
            if self.success_replay is not None:
                self.success_replay.load_state_dict(state.get("success_replay", {}))
            if self.preserve_set is not None:
                self.preserve_set.load_state_dict(state.get("preserve_set", {}))
        else:
            (self.run_dir / "config.yaml").write_text(to_yaml(cfg))
        self.tracker = make_tracker(self.run_dir, cfg.logging.trackers, run_name=f"{cfg.experiment}-seed{cfg.seed}",
                                    group=cfg.experiment, project=cfg.logging.project, config=to_dict(cfg),
                                    resume_from_step=self.start_step if resume else None)

    def _load_reference(self, dtype: torch.dtype) -> torch.nn.Module | None:
        """The frozen initial policy for the KL term (skipped when β_kl = 0)."""
        if self.config.algo.kl_coef == 0:
            return None
        reference, _ = load_policy(self.config.policy.init, dtype=dtype, device=self.device)  # LoRA: merged
        reference.requires_grad_(False)
        return reference.eval()

    def _demo_replay(self) -> DemoReplay:
        """``trainer.demo_coef``'s demonstrations: the oracle's, of the training worlds' tasks of
        ``trainer.demo_splits`` (by default the splits SFT demonstrated; or their write tasks), in
        the policy's view, no longer than an episode may grow."""
        cfg, t = self.config, self.config.trainer
        for key in ("oracle_arithmetic", "oracle_goal"):
            taught, given = self.agent_config.get(key), getattr(cfg.env, key)  # None: recorded by no SFT of then
            if taught is not None and taught != given:
                raise ConfigError(f"env.{key}={given} is invalid with trainer.demo_coef > 0: the policy "
                                  f"{cfg.policy.init} learnt from the demonstrations of the oracle with "
                                  f"env.{key}={taught}; set env.{key}={taught} so the demonstration term "
                                  f"replays what SFT taught")
        splits = t.demo_splits or self.agent_config.get("demonstrated_splits", DEFAULT_DEMONSTRATED_SPLITS)
        return DemoReplay.collect(self.groups.worlds, cfg.env, splits, self.groups.chat,
                                  only_write=demo_write_tools(t.demo_tasks, self.groups.write_tools),
                                  batch_size=t.demo_batch_size, max_length=cfg.rollout.max_total_tokens,
                                  seed=cfg.seed)

    # ---------------------------------------------------------------------------- loop
    def train(self) -> Path:
        """Run the remaining steps; returns the final checkpoint's model directory."""
        cfg, t = self.config, self.config.trainer
        if t.val_every and self.start_step == 0:  # where the curve starts: the initial policy
            self.tracker.log(self.groups.validate(0), 0)
        with progress_bar(t.steps, f"grpo[{cfg.experiment}]", cfg.logging.progress, self.start_step) as bar:
            for step in range(self.start_step, t.steps):
                metrics = self.step(step)
                if t.val_every and (step + 1) % t.val_every == 0:
                    metrics.update(self.groups.validate(step + 1))
                self.tracker.log(metrics, step + 1)
                bar.update(1, reward=f"{metrics.get(metric.REWARD_OUTCOME_MEAN, math.nan):.2f}",
                           sat=f"{metrics.get(metric.REWARD_OUTCOME_SATURATED_GROUP_FRAC, 0):.2f}",
                           informative=f"{metrics[metric.ROLLOUT_INFORMATIVE_GROUPS]:.0f}")
                if t.save_every and (step + 1) % t.save_every == 0 and step + 1 < t.steps:
                    self.save(step + 1)
        self.save(t.steps)
        self.tracker.close()
        final = save_policy(self.model, self.tokenizer, self.run_dir / "final", self.agent_config)
        return final

    def step(self, step: int) -> dict[str, float]:
        """One whole training step (``step`` counts from 0): sample groups (rollouts, rewards,
        ``drop_unusable``, dynamic sampling) → advantages → old log-probs → updates → LLD
        diagnostics. Returns the step's metrics, ``perf/`` seconds per phase included; what
        the step trained on is kept in ``last_batch``. Validation, logging and checkpoints
        are ``train()``'s."""
        timings = {metric.PERF_ROLLOUT_S: 0.0, metric.PERF_SCORE_S: 0.0}
        groups = self.groups.sample(step, timings, policy_is_init=self._policy_is_init)
        metrics = {**rollout_metrics(groups.sampled, write_tools(self.config.env)), **groups.metrics}
        self.last_batch = None
        if self.preserve_set is not None:  # before the updates: this step's correct writes are kept too
            hinge = self.config.trainer.preserve_writes == "hinge"
            self.preserve_set.add(groups.sampled, self._example_logprobs if hinge else None)
        if groups.kept:
            metrics.update(self.learn(groups.kept, step, timings))
        else:  # dynamic sampling found no informative group: nothing to learn from
            warnings.warn(f"step {step + 1}: no informative group in {self.config.trainer.max_generation_rounds} "
                          "generation rounds: no update", stacklevel=2)
            metrics[metric.ALGO_SKIPPED_STEP_FRAC] = 1.0
        if self.success_replay is not None:  # after the updates: the term replays earlier steps' successes
            self.success_replay.add(groups.sampled)
            metrics[metric.ROLLOUT_SUCCESS_BUFFER] = float(len(self.success_replay.buffer))
        metrics.update(timings)
        metrics[metric.PERF_STEP_S] = sum(timings.values())
        metrics[metric.PERF_ENGINE_TOKENS_PER_S] = self.groups.engine.last_stats.tokens_per_second
        return metrics

    # -------------------------------------------------------------------------- phases
    def learn(self, trajectories: list[Trajectory], step: int, timings: dict[str, float]) -> dict[str, float]:
        """Advantages → plan → old/reference log-probs → updates (→ LLD diagnostics) on one batch
        (kept in ``last_batch``)."""
        clock = time.perf_counter()
        batch, adv_metrics = self.compute_advantages(trajectories)
        self.last_batch = batch
        timings[metric.PERF_SCORE_S] += time.perf_counter() - clock

        clock = time.perf_counter()
        plan = self.plan_updates(batch, step)
        # the first mini-batch's old log-probs come from its own update forward (same weights,
        # same micro-batches: the same values) instead of a pass of their own
        deferred = plan.mini_batches[0] if self.share_forwards and self._recomputes_old else []
        self.compute_old_logprobs(batch, plan, deferred=deferred)
        timings[metric.PERF_OLD_LOGPROB_S] = time.perf_counter() - clock

        clock = time.perf_counter()
        metrics = {**adv_metrics, **self.update(batch, plan, fill_first=bool(deferred), step=step)}
        timings[metric.PERF_UPDATE_S] = time.perf_counter() - clock
        if self.config.trainer.lld_diagnostic:
            clock = time.perf_counter()
            metrics.update(self.lld_diagnostics(batch, plan))
            timings[metric.PERF_LLD_S] = time.perf_counter() - clock
        return metrics

    def compute_advantages(self, trajectories: list[Trajectory]) -> tuple[RolloutBatch, dict[str, float]]:
        algo = self.config.algo
        batch = collate(trajectories, self.groups.chat.pad_token_id, self.groups.engine.grammar).to(self.device)
        advantages = self.estimator(
            batch.scores, batch.group_ids, batch.response_mask,
            turn_credit=batch.turn_scores, turn_credit_mask=batch.turn_mask, **algo.estimator_kwargs(),
        )
        sign = algo.advantage_sign  # -1 only in the sanity check's negated control
        batch.advantages, batch.seq_advantages = sign * advantages.token, sign * advantages.sequence
        return batch, advantages.metrics

    def plan_updates(self, batch: RolloutBatch, step: int) -> UpdatePlan:
        """The step's mini- and micro-batches, shuffled by ``(seed, step)`` (``plan_updates``; the
        denominators are the mini-batch's, so the micro-batching does not change the gradient)."""
        t = self.config.trainer
        return plan_updates(batch.attention_mask.sum(dim=1), seed=derive_seed("shuffle", self.config.seed, step),
                            mini_batch_size=t.mini_batch_size, micro_batch_size=t.micro_batch_size)

    @torch.no_grad()
    def compute_old_logprobs(self, batch: RolloutBatch, plan: UpdatePlan,
                             deferred: list[list[int]] | None = None) -> None:
        """Behaviour-policy (and reference) log-probs: recomputed on the plan's micro-batches
        (those of the first update, so LLDS is exactly 0 there), or the sampler's (bypass).

        ``deferred`` micro-batches (recompute only) are left at 0 here: ``update(fill_first=True)``
        fills them from the first mini-batch's forward. While the policy still has the
        reference's weights (no optimizer step yet in this run, recompute mode), the reference
        log-probs are the policy's: the same weights on the same micro-batches give the same
        values (bit for bit without autocast), so the reference pass is skipped.
        """
        deferred = deferred or []
        if deferred and not self._recomputes_old:
            raise ValueError("deferred old log-probs need trainer.old_logprobs=recompute")
        now = [micro for micro in plan.micro_batches if micro not in deferred]
        with self.training_mode():
            if self._recomputes_old:
                batch.old_logprobs = self._batch_logprobs(self.forward, batch, now)
            else:
                batch.old_logprobs = batch.rollout_logprobs * batch.response_mask
        if self.reference_forward is None:
            return
        if self._ref_from_policy:
            batch.ref_logprobs = batch.old_logprobs.clone()
        else:
            batch.ref_logprobs = self._batch_logprobs(self.reference_forward, batch, plan.micro_batches)

    def update(self, batch: RolloutBatch, plan: UpdatePlan, fill_first: bool = False,
               step: int = 0) -> dict[str, float]:
        """``ppo_epochs`` passes over the planned mini-batches, one optimizer step each; returns
        loss metrics averaged over them (``algo/grad_norm_max``: the largest pre-clip norm).
        ``fill_first``: the first mini-batch's old log-probs were deferred
        (``compute_old_logprobs``); its forward, before any step, supplies them. ``step`` seeds
        which demonstrations each update replays (``trainer.demo_coef``)."""
        sums: dict[str, float] = {}
        grad_norms = []
        for epoch in range(self.config.trainer.ppo_epochs):
            for index, micro_batches in enumerate(plan.mini_batches):
                first = fill_first and epoch == 0 and index == 0
                number = epoch * len(plan.mini_batches) + index
                demos = self.demo_replay.draw(step, number) if self.demo_replay is not None else None
                successes = self.success_replay.draw(step, number) if self.success_replay is not None else None
                preserve = self.preserve_set.draw(step, number) if self.preserve_set is not None else None
                update = self._mini_batch_update(batch, micro_batches, fill_old=first, demos=demos,
                                                 successes=successes, preserve=preserve)
                grad_norms.append(update[metric.ALGO_GRAD_NORM])
                for key, value in update.items():
                    sums[key] = sums.get(key, 0.0) + value
        metrics = {key: value / max(len(grad_norms), 1) for key, value in sums.items()}
        metrics[metric.ALGO_GRAD_NORM_MAX] = max(grad_norms, default=0.0)
        return metrics

    def _mini_batch_update(self, batch: RolloutBatch, micro_batches: list[list[int]],
                           fill_old: bool = False, demos: list[SFTExample] | None = None,
                           successes: list[SFTExample] | None = None,
                           preserve: list[Anchored] | None = None) -> dict[str, float]:
        """One optimizer step on ``grpo_objective``, accumulated over the mini-batch's micro-batches.
        ``fill_old``: the weights are still the behaviour policy's, so each micro-batch's own
        log-probs are its old ones (and the reference's, see ``compute_old_logprobs``). ``demos``:
        the demonstrations whose token-mean NLL, × ``trainer.demo_coef``, joins this step's gradient;
        ``successes``: the policy's own earlier successful write episodes, × ``trainer.success_coef``;
        ``preserve``: the successful write episodes whose likelihood the step may not lower
        (``trainer.preserve_writes``: ``_preserving_step`` or ``_preserve_hinge_backward``)."""
        t = self.config.trainer
        rows = [row for micro in micro_batches for row in micro]
        counts = mini_batch_counts(batch, rows)
        metrics: dict[str, float] = {}
        self.optimizer.zero_grad(set_to_none=True)
        with self.training_mode():
            for micro_rows in micro_batches:
                micro = batch.select(micro_rows)
                scores = self.score_tokens(micro)
                if fill_old:
                    micro = self._fill_old_logprobs(batch, micro_rows, scores.logprobs.detach())
                loss, parts = self.objective(scores, micro, counts)
                loss.backward()
                share = len(micro_rows) / len(rows)
                for key, value in parts.items():  # loss/* add up over micro-batches; algo/* are row shares
                    metrics[key] = metrics.get(key, 0.0) + (value if key.startswith("loss/") else share * value)
            if demos:
                metrics[metric.LOSS_DEMO_NLL], _ = nll_backward(self.forward, demos, t.micro_batch_size,
                                                                self.groups.chat.pad_token_id, scale=t.demo_coef)
            if successes:
                metrics[metric.LOSS_SUCCESS_NLL], _ = nll_backward(self.forward, successes, t.micro_batch_size,
                                                                   self.groups.chat.pad_token_id,
                                                                   scale=t.success_coef)
            if preserve and t.preserve_writes == "hinge":
                metrics[metric.LOSS_PRESERVE] = self._preserve_hinge_backward(preserve)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.max_grad_norm))
        skip = t.skip_zero_grad_steps and grad_norm == 0.0
        metrics[metric.ALGO_GRAD_NORM], metrics[metric.ALGO_SKIPPED_STEP_FRAC] = grad_norm, float(skip)
        if not skip:
            if preserve and t.preserve_writes == "project":
                metrics.update(self._preserving_step([kept.example for kept in preserve]))
            else:
                self.optimizer.step()
            self.scheduler.step()
            self._policy_is_init = False
        metrics[metric.ALGO_LR] = self.scheduler.get_last_lr()[0]
        return metrics

    def score_tokens(self, micro: RolloutBatch) -> TokenScores:
        """The policy's log-probs (and entropies) of ``micro``'s response tokens, as the update scores
        them: at the sampling temperature, under the sampler's token masks."""
        return self.forward.token_logprobs(micro.input_ids, micro.attention_mask, micro.response_mask,
                                           temperature=self._temperature, with_entropy=True,
                                           entropy_grad=self.config.algo.entropy_coef > 0,
                                           token_masks=micro.token_masks)

    def objective(self, scores: TokenScores, micro: RolloutBatch,
                  counts: dict[str, torch.Tensor | int]) -> tuple[torch.Tensor, dict[str, float]]:
        """``grpo_objective`` of one micro-batch (old, reference log-probs and advantages filled), with
        its mini-batch's denominators ``counts`` (``mini_batch_counts``)."""
        return grpo_objective(scores.logprobs, micro.old_logprobs, micro.advantages, micro.response_mask,
                              seq_adv=micro.seq_advantages, ref_logp=micro.ref_logprobs, entropy=scores.entropy,
                              **self.config.algo.loss_kwargs(), **counts)

    def _preserving_step(self, preserve: list[SFTExample]) -> dict[str, float]:
        """The optimizer's step on the gradients in ``.grad``, projected so that it does not lower, to
        first order, the log-likelihood ℓ of ``preserve`` (token-mean over their sampled tokens): a
        move Δθ with ⟨Δθ, ∇ℓ⟩ < 0 becomes Δθ − (⟨Δθ, ∇ℓ⟩ / ‖∇ℓ‖²) ∇ℓ. The optimizer's moments are
        those of the unprojected gradient."""
        t = self.config.trainer
        params = [p for p in self.model.parameters() if p.requires_grad]
        grads = [p.grad for p in params]
        for param in params:
            param.grad = None
        with self.training_mode():
            nll_backward(self.forward, preserve, t.micro_batch_size, self.groups.chat.pad_token_id)
        ascent = [-p.grad if p.grad is not None else torch.zeros_like(p) for p in params]  # ∇ℓ = −∇NLL
        for param, grad in zip(params, grads):
            param.grad = grad
        before = [p.detach().clone() for p in params]
        self.optimizer.step()
        with torch.no_grad():
            first_order = sum(((p - b) * a).sum() for p, b, a in zip(params, before, ascent))
            norm2 = sum((a * a).sum() for a in ascent)
            projected = bool(first_order < 0 and norm2 > 0)
            if projected:
                coef = first_order / norm2
                for param, a in zip(params, ascent):
                    param.sub_(coef * a)
        return {metric.ALGO_PRESERVE_FIRST_ORDER: float(first_order),
                metric.ALGO_PRESERVE_PROJECTED_FRAC: float(projected)}

    def _preserve_hinge_backward(self, preserve: list[Anchored]) -> float:
        """Backpropagate ``trainer.preserve_coef`` × LLDS on ``preserve``, each episode anchored at its
        log-probs when kept (``_example_logprobs``: temperature 1, no masks): the drops below the anchor
        of the tokens of its actions that fell, aggregated as the policy loss over the set. Returns the
        term (unscaled)."""
        algo, t = self.config.algo, self.config.trainer
        examples = [kept.example for kept in preserve]
        total_tokens = sum(sum(w > 0 for w in e.label_weights()) for e in examples)
        term = 0.0
        for start, label_mask, logp in self._example_scores(examples):
            part = preserve[start:start + len(label_mask)]
            anchor = torch.zeros_like(logp)
            for row, kept in enumerate(part):
                anchor[row, :len(kept.anchor)] = torch.tensor(kept.anchor)
            mask = (label_mask > 0).to(logp.dtype).to(logp.device)
            loss, _ = llds_loss(logp, anchor, torch.ones(len(part), device=logp.device), mask,
                                gate=algo.llds_gate, agg=algo.loss_agg, num_tokens=total_tokens,
                                num_seqs=len(preserve), horizon=mask.shape[-1])
            (t.preserve_coef * loss).backward()
            term += float(loss.detach())
        return term

    @torch.no_grad()
    def _example_logprobs(self, examples: list[SFTExample]) -> list[list[float]]:
        """Each example's per-token log-probs under the current weights (temperature 1, no masks; 0 off
        its labels), as ``_preserve_hinge_backward`` scores them: the anchors of ``preserve_writes=hinge``."""
        out = []
        with self.training_mode():
            for start, _, logp in self._example_scores(examples):
                logp = logp.float().cpu()
                part = examples[start:start + len(logp)]
                out += [logp[row, :len(example.input_ids)].tolist() for row, example in enumerate(part)]
        return out

    def _example_scores(self, examples: list[SFTExample]) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
        """``(start, label_mask, log-probs)`` per micro-batch of ``examples``: the labelled tokens'
        log-probs at temperature 1 without masks, as SFT and the replay terms score them."""
        size = self.config.trainer.micro_batch_size
        for start in range(0, len(examples), size):
            input_ids, attention_mask, label_mask = collate_examples(examples[start:start + size],
                                                                     self.groups.chat.pad_token_id)
            yield start, label_mask, self.forward.token_logprobs(input_ids, attention_mask, label_mask).logprobs

    @torch.no_grad()
    def lld_diagnostics(self, batch: RolloutBatch, plan: UpdatePlan) -> dict[str, float]:
        """After the step's updates, one forward pass on the plan's micro-batches: ``algo/lld_rate``
        (share of preserve-set actions whose log-likelihood fell: ``llds_loss``'s action rate,
        over the whole step) and the mean per-token log-prob change of A ≥ 0 and A < 0 rows
        (``logprob_change``). Exactly 0 when the weights did not move."""
        with self.training_mode():
            new = self._batch_logprobs(self.forward, batch, plan.micro_batches)
        _, metrics = llds_loss(new, batch.old_logprobs, batch.seq_advantages, batch.response_mask)
        return {metric.ALGO_LLD_RATE: float(metrics["lld/action_rate"]),
                **logprob_change(new, batch.old_logprobs, batch.seq_advantages, batch.response_mask)}

    def save(self, step: int) -> Path:
        state = {"config": to_dict(self.config), "experiment": self.config.experiment,
                 "task_sampler": self.groups.state_dict()}
        if self.success_replay is not None:
            state["success_replay"] = self.success_replay.state_dict()
        if self.preserve_set is not None:
            state["preserve_set"] = self.preserve_set.state_dict()
        return save_checkpoint(self.run_dir, step, self.model, self.tokenizer, self.optimizer, self.scheduler,
                               state, keep_last=self.config.trainer.keep_last, agent_config=self.agent_config)

    # ------------------------------------------------------------------------- helpers
    @property
    def _recomputes_old(self) -> bool:
        return self.config.trainer.old_logprobs == "recompute"

    @property
    def _ref_from_policy(self) -> bool:
        """The reference log-probs are the recomputed old ones (the policy has not moved yet).
        Only where the two forwards compute alike: a checkpointed policy does not share the
        prompt prefix in training mode and a LoRA policy adds unmerged adapters, so there the
        values would agree only up to rounding and the reference keeps its own pass."""
        policy = self.config.policy
        return (self.reference_forward is not None and self._policy_is_init and self.share_forwards
                and self._recomputes_old and not policy.gradient_checkpointing and policy.lora.rank == 0)

    def _fill_old_logprobs(self, batch: RolloutBatch, rows: list[int], logprobs: torch.Tensor) -> RolloutBatch:
        """Write a micro-batch's deferred old (and, at the reference's weights, reference)
        log-probs into ``batch``; returns the micro-batch with them."""
        batch.old_logprobs[rows, : logprobs.shape[1]] = logprobs
        if self._ref_from_policy:
            batch.ref_logprobs[rows, : logprobs.shape[1]] = logprobs
        return batch.select(rows)

    @property
    def _temperature(self) -> float:
        temperature = self.config.rollout.temperature
        return temperature if temperature > 0 else 1.0

    @contextmanager
    def training_mode(self) -> Iterator[None]:
        """Training mode for the old log-probs, the update and the LLD pass alike: with dropout
        off the mode only switches gradient checkpointing, which changes no value, but it also
        decides whether the forward shares the prompt prefix, so all three must agree."""
        was_training = self.model.training
        self.model.train()
        try:
            yield
        finally:
            self.model.train(was_training)

    def _batch_logprobs(self, forward: PolicyForward, batch: RolloutBatch,
                        micro_batches: list[list[int]]) -> torch.Tensor:
        """(B, T) log-probs of the response tokens, one forward pass per micro-batch."""
        out = torch.zeros_like(batch.response_mask)
        for rows in micro_batches:
            part = batch.select(rows)
            logp = forward.token_logprobs(part.input_ids, part.attention_mask, part.response_mask,
                                          temperature=self._temperature, token_masks=part.token_masks).logprobs
            out[rows, : logp.shape[1]] = logp
        return out


def mini_batch_counts(batch: RolloutBatch, rows: list[int]) -> dict[str, torch.Tensor | int]:
    """The denominators of a mini-batch's loss (``grpo_objective``'s ``num_tokens``, ``num_seqs``,
    ``num_preserve_tokens``, ``horizon``): its micro-batches' losses, each divided by them, add up
    to the mini-batch's loss and gradient. The horizon of seq-mean-token-sum-norm is the
    mini-batch's response width, not each micro-batch's."""
    mask = batch.response_mask[rows]
    active_columns = mask.bool().any(dim=0).nonzero()
    return {"num_tokens": mask.sum(), "num_seqs": len(rows),
            "num_preserve_tokens": preserve_token_count(batch.seq_advantages[rows], mask),
            "horizon": int(active_columns.max()) + 1 if active_columns.numel() else mask.shape[-1]}


def train_grpo(config: GRPOConfig, resume: bool = False, force: bool = False) -> Path:
    """Run GRPO with ``config``; returns the final model directory.

    ``resume`` continues from the run's latest checkpoint, refusing a config that differs
    from the checkpoint's outside ``RESUME_MAY_CHANGE`` unless ``force``.
    """
    return GRPOTrainer(config, resume=resume, force=force).train()
