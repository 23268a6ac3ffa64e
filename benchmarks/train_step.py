"""GRPO step time: where a step goes, how fast the update trains, and ours against TRL's.

1. Our multi-turn step. A ``GRPOTrainer`` (``experiment=joint``, the packaged
   ``grpo.yaml``) from the benchmarks' trained policy (the short SFT run of
   ``_common.BENCH_SFT``, trained once; ``--policy DIR|random`` overrides) on the
   generated airline world runs one warm-up
   step and ``--steps`` measured ones through ``GRPOTrainer.step`` (what ``train()`` runs
   each step), timed phase by phase from its ``perf/`` metrics: rollout / scoring (rewards,
   leaving out unusable episodes, advantages) / old log-probs (and reference) / update
   (plus the LLD diagnostic pass the default config runs). Training tokens/s = the
   tokens the update processes (the batch's attention-mask tokens × ppo_epochs) per
   second of update. The raw ceiling: a plain loop over the *same* micro-batches (the
   trainer's shuffle reproduced) doing ``model(input_ids, attention_mask).logits`` → a
   trivial loss → backward, no optimizer; target ratio ours / raw ≥ 0.8 (ours projects
   only the scored positions through the LM head, so it may exceed 1). The rollout's share
   of the step (``grpo_step_rollout_share``) says how much of a step sampling still costs.
   Peak RSS is read after these steps.
2. Against TRL. The same model and tokenizer on single-turn prompts (the training tasks'
   first user messages under our system prompt, rendered by the chat template): TRL's
   ``GRPOTrainer`` on CPU (no vLLM, β = 0, one optimizer step per generation batch) and
   ours (the same prompts as one-turn episodes through our ``RolloutEngine``, scoring
   and update) with matched group size, completion length, temperature and
   batch / micro-batch sizes. Both score a completion by the same function (its length
   in characters / 100). Per-step seconds exclude the first (warm-up) step; target
   ours / TRL ≤ 1.0.

Run: ``python benchmarks/train_step.py [--policy DIR|random] [--quick] [--no-trl]`` (a few
minutes on 2 quiet cores, plus about 2 the first time, to train the policy). Ends with
BENCH lines.
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import torch
from _common import add_policy_arguments, bench, median, peak_rss_mb, policy_dir, set_threads, timed, world

from agentgrpo import metric_names as metric
from agentgrpo.agent.types import Trajectory
from agentgrpo.config import load_config
from agentgrpo.envs.registry import make_env
from agentgrpo.envs.types import Action, StepResult
from agentgrpo.policy.hf import load_policy
from agentgrpo.rollout.engine import EpisodeSpec
from agentgrpo.train.batch import RolloutBatch
from agentgrpo.train.grpo import GRPOTrainer
from agentgrpo.train.grpo_config import GRPOConfig
from agentgrpo.train.task_sampler import derive_seed


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_policy_arguments(parser)
    parser.add_argument("--steps", type=int, default=2, help="measured steps after one warm-up")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke-sized batches and lengths")
    group = parser.add_argument_group("multi-turn step")
    group.add_argument("--tasks", type=int, default=4, help="tasks per step")
    group.add_argument("--group-size", type=int, default=8, help="episodes per task (G)")
    group.add_argument("--mini-batch", type=int, default=16, help="trajectories per optimizer step")
    group.add_argument("--micro-batch", type=int, default=8, help="trajectories per fwd/bwd")
    group.add_argument("--max-turns", type=int, default=8)
    group.add_argument("--max-new-tokens", type=int, default=64, help="tokens per assistant turn")
    group = parser.add_argument_group("TRL comparison (single-turn)")
    group.add_argument("--no-trl", action="store_true", help="skip the TRL comparison")
    group.add_argument("--prompts", type=int, default=4, help="prompts per step")
    group.add_argument("--generations", type=int, default=8, help="completions per prompt (G)")
    group.add_argument("--completion-length", type=int, default=128, help="max completion tokens")
    group.add_argument("--trl-micro-batch", type=int, default=8, help="completions per fwd/bwd")
    args = parser.parse_args()
    if args.quick:
        apply_quick(args)
    if args.steps < 1:
        parser.error("--steps must be >= 1")
    if (args.prompts * args.generations) % args.trl_micro_batch:
        parser.error("--trl-micro-batch must divide --prompts x --generations")
    return args


def apply_quick(a: argparse.Namespace) -> None:
    """Smoke-sized settings: small batches, short turns and completions."""
    a.tasks, a.group_size, a.mini_batch, a.micro_batch = 2, 4, 4, 2
    a.max_turns, a.max_new_tokens = 3, 32
    a.prompts, a.generations, a.completion_length, a.trl_micro_batch = 2, 4, 32, 4


# ------------------------------------------------------------------ multi-turn GRPO step
ROLLOUT_SHARE_TARGET = "<= 0.4"
"""Below the share before continuous batching (rollout was then 40% of a step with random weights,
45% with this trained policy)."""


def grpo_trainer(overrides: list[str]) -> GRPOTrainer:
    config = load_config(GRPOConfig, overrides, defaults="grpo.yaml")
    return GRPOTrainer(config)


def common_overrides(args: argparse.Namespace, checkpoint: Path, run_dir: Path) -> list[str]:
    """Both trainers: the benchmark's policy and seed, a scratch run dir, no progress bar."""
    return [f"policy.init={checkpoint}", f"run_dir={run_dir}", f"seed={args.seed}",
            f"trainer.steps={args.steps + 1}", "logging.progress=false", "logging.trackers=[]"]


def multi_turn_overrides(args: argparse.Namespace, checkpoint: Path, run_dir: Path) -> list[str]:
    return common_overrides(args, checkpoint, run_dir) + [
        "experiment=joint",
        f"trainer.tasks_per_step={args.tasks}", f"trainer.group_size={args.group_size}",
        f"trainer.mini_batch_size={args.mini_batch}", f"trainer.micro_batch_size={args.micro_batch}",
        f"rollout.max_turns={args.max_turns}", f"rollout.max_new_tokens={args.max_new_tokens}",
    ]


class MeasuredStep(NamedTuple):
    step: int
    seconds: dict[str, float]  # per phase
    batch: RolloutBatch


PHASE_SECONDS = {"rollout": metric.PERF_ROLLOUT_S, "score": metric.PERF_SCORE_S,
                 "old_logprobs": metric.PERF_OLD_LOGPROB_S, "update": metric.PERF_UPDATE_S,
                 "lld_diagnostic": metric.PERF_LLD_S}
"""The benchmark's phase → the ``perf/`` metric ``GRPOTrainer.step`` times it in."""


def run_phases(trainer: GRPOTrainer, step: int) -> tuple[dict[str, float], RolloutBatch]:
    """One ``GRPOTrainer.step``; its seconds per phase and the batch it trained on."""
    metrics = trainer.step(step)
    if trainer.last_batch is None:
        raise RuntimeError(f"step {step}: no batch to train on (every episode or group was left out)")
    return {phase: metrics[key] for phase, key in PHASE_SECONDS.items() if key in metrics}, trainer.last_batch


def update_micro_batches(trainer: GRPOTrainer, batch: RolloutBatch, step: int) -> list[list[RolloutBatch]]:
    """The micro-batches ``GRPOTrainer.update`` runs at ``step`` (its plan), per mini-batch and epoch."""
    plan = trainer.plan_updates(batch, step)
    minis = [[batch.select(micro) for micro in mini] for mini in plan.mini_batches]
    return minis * trainer.config.trainer.ppo_epochs


def raw_fwd_bwd_seconds(model: torch.nn.Module, minis: list[list[RolloutBatch]]) -> float:
    """Plain full-logits forward, a trivial loss and backward per micro-batch; no optimizer."""
    model.train()
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    for micros in minis:
        for micro in micros:
            logits = model(input_ids=micro.input_ids, attention_mask=micro.attention_mask).logits
            logits.float().mean().backward()
        model.zero_grad(set_to_none=True)
    seconds = time.perf_counter() - start
    model.eval()
    return seconds


def multi_turn_part(args: argparse.Namespace, checkpoint: Path, workdir: Path) -> dict[str, float]:
    """Warm-up + measured steps of our multi-turn trainer; prints the split and the raw ceiling.

    The raw loops run after all steps, so the peak RSS read in between is the trainer's own
    (the raw loop's full (B, T, V) logits would otherwise set it).
    """
    trainer = grpo_trainer(multi_turn_overrides(args, checkpoint, workdir / "grpo"))
    t, r = trainer.config.trainer, trainer.config.rollout
    print(f"\n== our multi-turn GRPO step: experiment=joint, {t.tasks_per_step} tasks x "
          f"{t.group_size}, mini-batch {t.mini_batch_size}, micro-batch {t.micro_batch_size}, "
          f"ppo_epochs {t.ppo_epochs}, max_turns {r.max_turns}, max_new_tokens {r.max_new_tokens}")
    steps = []
    for step in range(args.steps + 1):
        seconds, batch = run_phases(trainer, step)
        label = "warm-up" if step == 0 else f"step {step}"
        print(f"  {label}: " + ", ".join(f"{k} {v:.2f} s" for k, v in seconds.items())
              + f" (step {sum(seconds.values()):.2f} s; {int(batch.attention_mask.sum())} tokens, "
              f"{int(batch.response_mask.sum())} sampled)")
        steps.append(MeasuredStep(step, seconds, batch))
    rss = peak_rss_mb()
    splits = [record.seconds for record in steps if record.step > 0]
    phases = {name: median([s[name] for s in splits]) for name in splits[0]}
    step_seconds = median([sum(s.values()) for s in splits])
    print(f"  step split (median of {len(splits)}): "
          + ", ".join(f"{k} {v:.2f} s ({v / step_seconds:.0%})" for k, v in phases.items())
          + f"; step {step_seconds:.2f} s; peak RSS {rss:.0f} MB")
    train_rate, ratio = compare_with_raw(trainer, steps)
    return {"step_seconds": step_seconds, "rollout_seconds": phases["rollout"], "train_rate": train_rate,
            "ratio": ratio, "rss": rss}


def compare_with_raw(trainer: GRPOTrainer, steps: list[MeasuredStep]) -> tuple[float, float]:
    """Median training tokens/s of the measured steps and its median ratio to the raw loop."""
    epochs = trainer.config.trainer.ppo_epochs
    train_rates, raw_rates = [], []
    for step, seconds, batch in steps:  # the warm-up step's batch warms the raw loop up
        raw = raw_fwd_bwd_seconds(trainer.model, update_micro_batches(trainer, batch, step))
        tokens = int(batch.attention_mask.sum()) * epochs
        if step > 0:
            print(f"  step {step}: update {tokens} tokens in {seconds['update']:.2f} s, "
                  f"raw fwd+bwd of the same micro-batches {raw:.2f} s")
            train_rates.append(tokens / seconds["update"])
            raw_rates.append(tokens / raw)
    ratio = median([ours / raw for ours, raw in zip(train_rates, raw_rates)])
    print(f"  training tokens/s {median(train_rates):.0f} vs raw fwd+bwd "
          f"{median(raw_rates):.0f} tokens/s: ratio {ratio:.3f}")
    return median(train_rates), ratio


# ------------------------------------------------------------------ single-turn vs TRL
def completion_reward(text: str) -> float:
    """The shared toy reward of the TRL comparison: characters / 100 (deterministic, cheap)."""
    return len(text) / 100


class SingleTurnEnv:
    """One prompt, one answer: ``reset`` gives the user message and any answer ends the episode.

    The environment's own reward is 0: a turn that does not parse never reaches it (the
    engine ends the episode through ``finish``), so ``score_completions`` scores the
    decoded completion after the rollout instead, exactly as TRL's reward function sees it.
    """

    def __init__(self, user_message: str):
        self.user_message = user_message

    def reset(self) -> str:
        return self.user_message

    def step(self, action: Action) -> StepResult:
        return StepResult(observation="", done=True, reward=0.0, info={"termination": "answered"})

    def finish(self, termination: str) -> StepResult:
        return StepResult(observation="", done=True, reward=0.0, info={"termination": termination})


def score_completions(trajectories: list[Trajectory], tokenizer: Any) -> None:
    """Outcome reward = ``completion_reward`` of the sampled tokens, decoded as TRL decodes them."""
    for traj in trajectories:
        sampled = [tok for tok, keep in zip(traj.token_ids, traj.response_mask) if keep]
        traj.outcome_reward = completion_reward(tokenizer.decode(sampled, skip_special_tokens=True))


def first_user_messages(trainer: GRPOTrainer, count: int, seed: int) -> list[str]:
    """The scripted user's opening message for ``count`` training tasks (cycled)."""
    tasks = trainer.groups.train_tasks
    env_config = trainer.config.env
    return [make_env(trainer.groups.bundle, tasks[i % len(tasks)], env_config, user_seed=seed + i).reset()
            for i in range(count)]


def single_turn_overrides(args: argparse.Namespace, checkpoint: Path, run_dir: Path) -> list[str]:
    """Ours matched to the TRL run: vanilla GRPO, β = 0, the sampler's log-probs, one update."""
    return common_overrides(args, checkpoint, run_dir) + [
        "experiment=vanilla", "algo.kl_coef=0", "trainer.ppo_epochs=1",
        f"trainer.tasks_per_step={args.prompts}", f"trainer.group_size={args.generations}",
        f"trainer.mini_batch_size={args.prompts * args.generations}",
        f"trainer.micro_batch_size={args.trl_micro_batch}",
        "trainer.old_logprobs=rollout", "trainer.lld_diagnostic=false",
        "rollout.max_turns=1", f"rollout.max_new_tokens={args.completion_length}",
        "rollout.temperature=1.0",
    ]


def single_turn_step(trainer: GRPOTrainer, specs: list[EpisodeSpec], seed: int, step: int) -> int:
    """Rollout, scoring, advantages, (bypassed) old log-probs and update; returns tokens sampled."""
    trajectories = trainer.groups.engine.run(specs, seed=derive_seed("rollout", seed, step))
    score_completions(trajectories, trainer.tokenizer)
    trainer.groups.score(trajectories)
    batch, _ = trainer.compute_advantages(trajectories)
    plan = trainer.plan_updates(batch, step)
    trainer.compute_old_logprobs(batch, plan)
    trainer.update(batch, plan)
    return trainer.groups.engine.last_stats.policy_tokens


def ours_single_turn(trainer: GRPOTrainer, messages: list[str],
                     args: argparse.Namespace) -> list[float]:
    """Per-step seconds (warm-up dropped) on ``args.prompts`` prompts per step."""
    times = []
    for step in range(args.steps + 1):
        chunk = messages[step * args.prompts : (step + 1) * args.prompts]
        specs = [EpisodeSpec(SingleTurnEnv(message), f"prompt{i}", f"{step}:{i}", sample)
                 for i, message in enumerate(chunk) for sample in range(args.generations)]
        tokens, seconds = timed(partial(single_turn_step, trainer, specs, args.seed, step))
        label = "warm-up" if step == 0 else f"step {step}"
        print(f"  ours {label}: {seconds:.2f} s ({tokens} completion tokens)")
        times.append(seconds)
    return times[1:]


def trl_steps(checkpoint: Path, prompts: list[list[dict[str, str]]], args: argparse.Namespace,
              output_dir: Path) -> list[float]:
    """Per-step seconds of TRL's ``GRPOTrainer.train()`` (the first, warm-up step dropped)."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer as TRLTrainer

    class StepClock(TrainerCallback):
        def __init__(self) -> None:
            self.marks: list[float] = []

        def on_train_begin(self, *_: Any, **__: Any) -> None:
            print(f"  TRL training with {torch.get_num_threads()} torch threads")
            self.marks = [time.perf_counter()]

        def on_step_end(self, *_: Any, **__: Any) -> None:
            self.marks.append(time.perf_counter())
            print(f"  TRL step {len(self.marks) - 1}: {self.marks[-1] - self.marks[-2]:.2f} s")

    def reward(completions: list[Any], **_: Any) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [completion_reward(text) for text in texts]

    model, tokenizer = load_policy(checkpoint)
    batch = args.prompts * args.generations
    config = TRLConfig(
        output_dir=str(output_dir), use_cpu=True, bf16=False, report_to=[], save_strategy="no",
        logging_steps=10**6, disable_tqdm=True, seed=args.seed, shuffle_dataset=False,
        max_steps=args.steps + 1, learning_rate=2e-5, dataloader_num_workers=0,
        # one generation batch of prompts x G completions = one optimizer step, in micro-batches
        per_device_train_batch_size=args.trl_micro_batch,
        gradient_accumulation_steps=batch // args.trl_micro_batch,
        num_generations=args.generations, max_completion_length=args.completion_length,
        temperature=1.0, top_p=1.0, top_k=0, beta=0.0, num_iterations=1, loss_type="grpo",
    )
    clock = StepClock()
    dataset = Dataset.from_list([{"prompt": p} for p in prompts])
    trainer = TRLTrainer(model=model, reward_funcs=reward, args=config, processing_class=tokenizer,
                         train_dataset=dataset, callbacks=[clock])
    trainer.remove_callback(PrinterCallback)  # its end-of-training metrics dump is noise here
    torch.set_num_threads(args.threads)  # in case anything on the way reset it
    trainer.train()
    return [b - a for a, b in zip(clock.marks[1:-1], clock.marks[2:])]


def trl_part(args: argparse.Namespace, checkpoint: Path, workdir: Path) -> float | None:
    """Ours vs TRL per-step seconds on matched single-turn GRPO; returns ours / TRL."""
    if importlib.util.find_spec("trl") is None:
        print("\nTRL is not installed (pip install 'agentgrpo[trl]'): comparison skipped")
        return None
    ours = grpo_trainer(single_turn_overrides(args, checkpoint, workdir / "single"))
    messages = first_user_messages(ours, args.prompts * (args.steps + 1), args.seed)
    prompts = [ours.groups.chat.initial_messages(message) for message in messages]
    ours_ids = ours.groups.chat.encode_prompt(prompts[0])
    trl_ids = list(ours.tokenizer.apply_chat_template(prompts[0], add_generation_prompt=True,
                                                      tokenize=True, return_dict=True)["input_ids"])
    print(f"\n== single-turn GRPO, ours vs TRL: {args.prompts} prompts x {args.generations} "
          f"completions of <= {args.completion_length} tokens, micro-batch {args.trl_micro_batch}, "
          "one optimizer step per batch")
    print(f"  prompt tokens (first prompt): ours {len(ours_ids)}, TRL's template {len(trl_ids)}"
          + ("" if ours_ids == trl_ids else "  (warning: the tokenisations differ)"))
    ours_times = ours_single_turn(ours, messages, args)
    trl_times = trl_steps(checkpoint, prompts, args, workdir / "trl")
    ours_step, trl_step = median(ours_times), median(trl_times)
    print(f"  per-step seconds (median of {len(ours_times)}): ours {ours_step:.2f}, "
          f"TRL {trl_step:.2f}; ours / TRL {ours_step / trl_step:.3f}")
    return ours_step / trl_step


def main() -> None:
    args = parse_args()
    set_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="bench-train-step-") as tmp:
        workdir = Path(tmp)
        checkpoint = policy_dir(world(), workdir, args.policy, args.seed, args.policy_cache, args.quick)
        ours = multi_turn_part(args, checkpoint, workdir)
        ratio_vs_trl = None if args.no_trl else trl_part(args, checkpoint, workdir)
    bench("train_step_seconds", ours["step_seconds"])
    bench("grpo_step_rollout_seconds", ours["rollout_seconds"])
    bench("grpo_step_rollout_share", ours["rollout_seconds"] / ours["step_seconds"], ROLLOUT_SHARE_TARGET)
    bench("train_tokens_per_s", ours["train_rate"])
    bench("train_vs_raw_fwd_bwd_ratio", ours["ratio"], ">= 0.8")
    bench("peak_rss_mb", ours["rss"])
    if ratio_vs_trl is not None:
        bench("ours_vs_trl_step_time_ratio", ratio_vs_trl, "<= 1.0")


if __name__ == "__main__":
    main()
