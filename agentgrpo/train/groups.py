"""GRPO's data side: the groups a step trains on, and the validation pass^1.

``GroupSampler`` owns what the rollouts depend on — the environment and its training
worlds, the task sampler (``trainer.task_sampler``), the rollout engine, PRM-Lite and the
shared rollout store — and runs one step's generation rounds: draw tasks → roll out a group
of G episodes per task → score them (outcome, plus PRM-Lite when ``reward.process_coef > 0``)
→ leave out episodes without a usable reward (``drop_unusable``) → with
``trainer.dynamic_sampling``, leave out groups without signal and draw new tasks in their
place. The trainer (``agentgrpo.train.grpo``) learns from what it returns.

Every random choice is derived from ``(seed, step)`` and the generation round; the task
sampler's state is what a checkpoint keeps of this side (``state_dict``).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import statistics
import time
import warnings
from dataclasses import dataclass
from typing import Any

import torch

import agentgrpo
from agentgrpo import metric_names as metric
from agentgrpo.agent.chat import ChatFormat
from agentgrpo.agent.types import Trajectory
from agentgrpo.config import ConfigError, to_dict
from agentgrpo.envs.registry import (
    VALIDATION_SPLIT,
    EnvBundle,
    build_env,
    build_heldout,
    build_training_worlds,
    make_env,
    write_tools,
)
from agentgrpo.envs.types import Task
from agentgrpo.openai_client import llm_user_client
from agentgrpo.policy.device import autocast, model_device
from agentgrpo.rewards.prm_lite import PRMLite
from agentgrpo.rollout.engine import EpisodeSpec, RolloutEngine, copy_kinds
from agentgrpo.train.batch import Dropped, drop_unusable
from agentgrpo.train.group_filter import groups_in_order, is_informative, outcomes_by_task
from agentgrpo.train.grpo_config import GRPOConfig
from agentgrpo.train.shared_rollouts import SharedRollouts, digest_files
from agentgrpo.train.task_sampler import Strata, TaskRefill, derive_seed, is_write_task, make_task_sampler


@dataclass
class SampledGroups:
    """One step's groups, scored."""

    kept: list[Trajectory]
    """The episodes to train on (with dynamic sampling: the informative groups kept)."""
    sampled: list[Trajectory]
    """Every usable episode rolled out, for the rollout metrics."""
    metrics: dict[str, float]
    """The ``rollout/`` metrics of the sampling, of ``drop_unusable`` and the task sampler's."""


class GroupSampler:
    """Samples a step's scored groups from the environment with the policy ``model`` (``sample``),
    and plays the validation tasks (``validate``)."""

    def __init__(self, config: GRPOConfig, model: torch.nn.Module, tokenizer: Any, prompt_style: str,
                 task_refill: TaskRefill | None = None):
        """``task_refill(step)``: fresh training tasks for the frontier sampler's pool (a domain that
        generates tasks; a pure function of the step). Without it the pool is the training split."""
        self.config = cfg = config
        t = cfg.trainer
        self.model, self.device = model, model_device(model)
        self.bundle: EnvBundle = build_env(cfg.env)
        self.user_client = llm_user_client(cfg.env.user)  # None for the scripted user
        # env.train_worlds > 1: fresh tasks of the training families from more worlds, each
        # episode run in its task's own world (validation and test tasks stay world 0's)
        self.worlds = build_training_worlds(cfg.env, training=self.bundle)
        self.train_tasks = [task for world in self.worlds for task in world.tasks(t.task_splits)]
        self.world_of = {task.task_id: world for world in self.worlds for task in world.tasks(t.task_splits)}
        self.write_tools = write_tools(cfg.env) or frozenset()
        if t.write_task_share is not None and not self.write_tools:
            raise ConfigError(f"trainer.write_task_share={t.write_task_share}: domain {cfg.env.domain!r} declares "
                              "no write_tools, so no task is known to need a write; leave it null")
        strata = None if t.write_task_share is None else Strata(t.write_task_share, self.write_tools)
        self.task_sampler = make_task_sampler(t.task_sampler, self.train_tasks, t.tasks_per_step, cfg.seed,
                                              floor=t.frontier_floor, ema=t.frontier_ema, refill=task_refill,
                                              strata=strata, frontier_by=t.frontier_by)
        self.chat = ChatFormat(tokenizer, self.bundle.domain.tool_schemas(), self.bundle.domain.policy,
                               prompt_style=prompt_style)
        self.engine = RolloutEngine(model, self.chat, cfg.rollout, copy_kinds(cfg.rollout, cfg.env))
        self.shared_rollouts = self._shared_rollouts()
        self.prm = PRMLite.from_yaml(cfg.reward.prm_weights) if cfg.reward.prm_weights else PRMLite()

    def _shared_rollouts(self) -> SharedRollouts | None:
        """``trainer.shared_rollouts_dir``, keyed by everything this run's rollouts depend on."""
        cfg = self.config
        if cfg.trainer.shared_rollouts_dir is None:
            return None
        if self.user_client is not None:
            warnings.warn("trainer.shared_rollouts_dir is ignored with an LLM user: its replies are not "
                          "reproducible, so no two runs sample alike", stacklevel=2)
            return None
        return SharedRollouts(cfg.trainer.shared_rollouts_dir, {
            "agentgrpo": agentgrpo.__version__, "torch": torch.__version__, "threads": torch.get_num_threads(),
            "policy": to_dict(cfg.policy), "policy_files": digest_files(cfg.policy.init),
            "env": to_dict(cfg.env), "rollout": to_dict(cfg.rollout), "seed": cfg.seed,
            "group_size": cfg.trainer.group_size, "tasks_per_step": cfg.trainer.tasks_per_step,
        })

    # ------------------------------------------------------------------------ sampling
    def sample(self, step: int, timings: dict[str, float], *, policy_is_init: bool) -> SampledGroups:
        """Generation rounds of rollouts → score → leave out unusable episodes (``drop_unusable``);
        with ``trainer.dynamic_sampling``, groups whose rewards (``informative_by``) all agree are
        left out and more tasks are drawn until ``tasks_per_step`` informative groups are kept or
        ``max_generation_rounds`` were rolled out. Every group's outcomes go to the task sampler.

        ``timings``: the rounds' seconds are added to its ``perf/rollout_s`` and ``perf/score_s``.
        ``policy_is_init``: the policy is still ``policy.init``, so the shared rollouts apply.
        """
        t = self.config.trainer
        rounds = t.max_generation_rounds if t.dynamic_sampling else 1
        kept: list[Trajectory] = []
        sampled: list[Trajectory] = []
        dropped, drawn = Dropped(), set()
        kept_groups = filtered = informative = sampled_groups = generation_round = shared_rounds = 0
        by_kind = {True: [0, 0], False: [0, 0]}  # write task? -> [groups, informative]
        for generation_round in range(rounds):
            clock = time.perf_counter()
            tasks = self.task_sampler.draw(step, generation_round, exclude=drawn)
            drawn.update(task.task_id for task in tasks)
            trajectories, shared = self._rollouts(step, generation_round, tasks, policy_is_init)
            shared_rounds += shared
            timings[metric.PERF_ROLLOUT_S] += time.perf_counter() - clock
            clock = time.perf_counter()
            self.score(trajectories)
            usable, round_dropped = drop_unusable(trajectories)
            for f in dataclasses.fields(Dropped):
                setattr(dropped, f.name, getattr(dropped, f.name) + getattr(round_dropped, f.name))
            sampled.extend(usable)
            groups = groups_in_order(usable)
            self.task_sampler.observe(outcomes_by_task(groups))
            task_by_id = {task.task_id: task for task in tasks}
            for group in groups.values():
                sampled_groups += 1
                signal = is_informative(group, t.informative_by)
                informative += signal
                counts = by_kind[is_write_task(task_by_id[group[0].task_id], self.write_tools)]
                counts[0] += 1
                counts[1] += signal
                if not t.dynamic_sampling:
                    continue
                if not signal:
                    filtered += 1
                elif kept_groups < t.tasks_per_step:  # extra informative groups of the last round: unused
                    kept.extend(group)
                    kept_groups += 1
            timings[metric.PERF_SCORE_S] += time.perf_counter() - clock
            if not t.dynamic_sampling:
                kept, kept_groups = usable, len(groups)
            if kept_groups >= t.tasks_per_step:
                break
        metrics = {**dropped.metrics(), **self.task_sampler.metrics(),
                   metric.ROLLOUT_GENERATION_ROUNDS: float(generation_round + 1),
                   metric.ROLLOUT_SHARED_ROUNDS: float(shared_rounds),
                   metric.ROLLOUT_FILTERED_GROUPS: float(filtered),
                   metric.ROLLOUT_INFORMATIVE_GROUPS: float(informative if not t.dynamic_sampling else kept_groups),
                   metric.ROLLOUT_INFORMATIVE_GROUP_FRAC: informative / max(sampled_groups, 1)}
        for write, name in ((True, metric.ROLLOUT_INFORMATIVE_WRITE_GROUP_FRAC),
                            (False, metric.ROLLOUT_INFORMATIVE_NO_WRITE_GROUP_FRAC)):
            if by_kind[write][0]:  # a step that drew no task of a kind logs nothing for it, not a false 0
                metrics[name] = by_kind[write][1] / by_kind[write][0]
        return SampledGroups(kept, sampled, metrics)

    def _rollouts(self, step: int, generation_round: int, tasks: list[Task],
                  policy_is_init: bool) -> tuple[list[Trajectory], bool]:
        """``collect_rollouts``, or the same episodes another run stored (``shared_rollouts``)
        while the policy is still ``policy.init``; and whether they were read."""
        if self.shared_rollouts is None or not policy_is_init:
            return self.collect_rollouts(step, generation_round, tasks), False
        return self.shared_rollouts.get_or_sample(lambda: self.collect_rollouts(step, generation_round, tasks),
                                                  step=step, generation_round=generation_round,
                                                  tasks=[task.task_id for task in tasks])

    def collect_rollouts(self, step: int, generation_round: int = 0, tasks: list | None = None) -> list[Trajectory]:
        """G episodes for each task (by default the sampler's for the step's first round), all
        rolled out together. Round r's groups are numbered after the earlier rounds' and its
        sampling is seeded by (seed, step, r): round 0 is what a run without dynamic sampling samples."""
        cfg = self.config
        if tasks is None:
            tasks = self.task_sampler.draw(step, generation_round)
        first_index = generation_round * cfg.trainer.tasks_per_step
        specs = []
        for task_index, task in enumerate(tasks, start=first_index):
            group_id = f"{step}:{task_index}:{task.task_id}"
            for sample in range(cfg.trainer.group_size):
                user_seed = derive_seed("user", cfg.seed, step, task_index, sample)
                env = make_env(self.world_of.get(task.task_id, self.bundle), task, cfg.env, user_seed=user_seed,
                               max_steps=cfg.rollout.max_turns, user_client=self.user_client,
                               abort_on_endpoint_error=True)
                specs.append(EpisodeSpec(env, task.task_id, group_id, sample))
        seed_parts = ("rollout", cfg.seed, step) + ((generation_round,) if generation_round else ())
        with autocast(self.device, cfg.policy.autocast_devices):
            return self.engine.run(specs, seed=derive_seed(*seed_parts))

    def score(self, trajectories: list[Trajectory]) -> None:
        """Reward = outcome + process_coef · PRM-Lite process score; per-turn scores kept.

        A non-finite outcome or process score (or an aborted episode's NaN) gives a NaN
        reward (not an error): the episode is then dropped from the batch and counted
        (``drop_unusable``).
        """
        coef = self.config.reward.process_coef
        for traj in trajectories:
            result = self.prm.score_trajectory(traj)
            traj.process_score = result.process_score
            traj.turn_process_scores = list(result.step_scores)
            finite = math.isfinite(traj.outcome_reward) and math.isfinite(result.process_score)
            traj.info["total_reward"] = result.reward(traj.outcome_reward, coef=coef) if finite else math.nan
            traj.info["prm_fired"] = result.rule_counts()

    # ---------------------------------------------------------------------- validation
    def validate(self, steps_done: int) -> dict[str, float]:
        """pass^1 on the validation tasks (training families, never trained on): what checkpoints
        are chosen by. The same tasks and user seeds at every call, so the values form a curve."""
        cfg = self.config
        specs = [EpisodeSpec(make_env(bundle, task, cfg.env, user_seed=derive_seed("val", cfg.seed, i),
                                      max_steps=cfg.rollout.max_turns, user_client=self.user_client),
                             task.task_id, f"val:{i}")
                 for i, (bundle, task) in enumerate(self.validation_tasks)]
        val_rollout = dataclasses.replace(cfg.rollout, temperature=cfg.trainer.val_temperature)
        engine = RolloutEngine(self.model, self.chat, val_rollout, copy_kinds(val_rollout, cfg.env))
        trajectories = engine.run(specs, seed=derive_seed("val", cfg.seed, steps_done))
        return {metric.VAL_PASS1: statistics.fmean(t.outcome_reward for t in trajectories) if trajectories else 0.0,
                metric.VAL_EPISODES: float(len(trajectories))}  # its sample size, for diagnose's val-vs-test check

    @functools.cached_property
    def validation_tasks(self) -> list[tuple[EnvBundle, Task]]:
        """(world, task) pairs validation plays: the training world's validation split, or with
        ``trainer.val_heldout`` fresh tasks of held-out validation worlds (built once)."""
        cfg = self.config
        if cfg.trainer.val_heldout:
            worlds = build_heldout(cfg.env, [VALIDATION_SPLIT], cfg.trainer.val_tasks, training=self.bundle)
            pairs = [(world, task) for world in worlds for task in world.splits.get(VALIDATION_SPLIT, [])]
        else:
            pairs = [(self.bundle, task) for task in self.bundle.tasks([VALIDATION_SPLIT])]
        return pairs[: cfg.trainer.val_tasks]

    # ---------------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict:
        """What a checkpoint keeps of the sampling side: the task sampler's statistics."""
        return self.task_sampler.state_dict()

    def load_state_dict(self, state: dict, step: int) -> None:
        self.task_sampler.load_state_dict(state, step)
