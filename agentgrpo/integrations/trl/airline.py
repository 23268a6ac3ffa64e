"""Airline episodes in TRL 1.16: a ``rollout_func``, the rewards read from its episodes, a task dataset.

TRL has two multi-turn hooks (``GRPOTrainer.__init__``). Its tool loop (``tools=`` /
``environment_factory=``) runs tool calls until the model answers without one, and that
answer ends the episode; in an airline episode that answer goes to the customer, who
replies, and the episode goes on until the customer stops, a transfer or the turn budget.
So the episodes run through the other hook, ``rollout_func``: TRL hands it the prompts of
a generation batch (its sampler already repeats each task ``num_generations`` times, in a
row) and the trainer, and takes back per episode

* ``prompt_ids``: the opening (system prompt with policy and tools, the customer's first
  message) and ``completion_ids``: everything after it — assistant turns, tool results,
  customer replies, as the policy saw them (``ChatFormat.encode_delta``, never re-encoded);
* ``env_mask`` (TRL's ``tool_mask``): 1 on the tokens the policy sampled, 0 on tool
  results and customer messages, so the loss, LLDS's actions and Turn-Discount by turn
  see one run of ones per assistant turn; ``logprobs``: the sampling log-probs;
* extra columns TRL forwards to every reward function: ``outcome`` (the grader's 0/1),
  ``transcript`` (``Trajectory.transcript``: OpenAI-style messages that read back as the
  recorded steps, so ``PRMLiteReward`` scores what the native trainer scores) and
  ``termination``.

``AirlineRollout`` plays the episodes with agentgrpo's batched rollout engine on the
trainer's own model — the same turns (``agentgrpo.agent.turn.play_turn``), environments
(``make_env``: tools + scripted or LLM customer) and grader as the native trainer. The
dataset (``airline_dataset``) has one row per training task; its ``prompt`` is the task id.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from agentgrpo.agent.chat import ChatFormat
from agentgrpo.agent.types import Trajectory
from agentgrpo.config import ConfigError
from agentgrpo.envs.config import EnvConfig
from agentgrpo.envs.registry import TRAIN_SPLITS, EnvBundle, make_env
from agentgrpo.envs.user_sim import ChatClient
from agentgrpo.rollout.config import RolloutConfig
from agentgrpo.rollout.engine import EpisodeSpec, RolloutEngine, copy_kinds
from agentgrpo.train.task_sampler import derive_seed

EXTRA_COLUMNS = ("outcome", "transcript", "termination")
"""What ``AirlineRollout`` hands TRL besides tokens; TRL passes them to the reward functions."""


def airline_dataset(bundle: EnvBundle, splits: Sequence[str] = TRAIN_SPLITS) -> Any:
    """A ``datasets.Dataset`` with one row per task of ``splits``: ``prompt`` (the task id,
    which ``AirlineRollout`` turns into an episode), ``task_id``, ``split``, ``family``."""
    from datasets import Dataset

    return Dataset.from_list([
        {"prompt": task.task_id, "task_id": task.task_id, "split": task.split or "", "family": task.family}
        for task in bundle.tasks(list(splits))
    ])


class AirlineRollout:
    """TRL ``rollout_func``: one airline episode per prompt, played by the trainer's model.

    Args:
        bundle: the domain and splits (``build_env(env_config)``).
        env_config: the environment config (its user simulator: scripted or LLM).
        chat: the policy's chat format (tokenizer, tool schemas, policy text, prompt style).
        rollout: turn and token budgets, temperature (the engine's ``RolloutConfig``).
        seed: base of the customers' and the sampler's seeds (each call and row differ).
        user_client: the LLM customer's chat client (None for the scripted one).
    """

    def __init__(self, bundle: EnvBundle, env_config: EnvConfig, chat: ChatFormat, rollout: RolloutConfig,
                 seed: int = 0, user_client: ChatClient | None = None) -> None:
        if rollout.constrain_tool_calls:
            raise ConfigError("rollout.constrain_tool_calls=true: TRL scores the unconstrained distribution, so "
                              "its ratios would not be the sampler's; use the native trainer")
        self.bundle, self.env_config, self.chat, self.rollout = bundle, env_config, chat, rollout
        self.seed, self.user_client = seed, user_client
        self.calls = 0
        self.last: list[Trajectory] = []
        """The latest call's episodes, in prompt order (for inspection and tests)."""

    def specs(self, prompts: Sequence[Any]) -> list[EpisodeSpec]:
        """One episode per prompt; consecutive copies of a task are one GRPO group."""
        specs, sample = [], 0
        for index, prompt in enumerate(prompts):
            task = self.bundle.task_by_id(str(prompt))
            sample = sample + 1 if index and prompts[index - 1] == prompt else 0
            user_seed = derive_seed("trl-user", self.seed, self.calls, index)
            env = make_env(self.bundle, task, self.env_config, user_seed=user_seed,
                           max_steps=self.rollout.max_turns, user_client=self.user_client)
            specs.append(EpisodeSpec(env, task.task_id, f"{self.calls}:{index - sample}", sample))
        return specs

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list]:
        model = trainer.accelerator.unwrap_model(trainer.model)
        engine = RolloutEngine(model, self.chat, self.rollout, copy_kinds(self.rollout, self.env_config))
        with native_precision(model):
            self.last = engine.run(self.specs(prompts), seed=derive_seed("trl-rollout", self.seed, self.calls))
        self.calls += 1
        mode = "train" if trainer.model.training else "eval"
        for name, value in episode_metrics(self.last).items():
            trainer._metrics[mode][name].append(value)
        return self.to_trl(self.last)

    def to_trl(self, trajectories: Sequence[Trajectory]) -> dict[str, list]:
        """TRL's ``rollout_func`` output for finished trajectories (see the module docstring)."""
        out: dict[str, list] = {key: [] for key in ("prompt_ids", "completion_ids", "logprobs", "env_mask",
                                                    *EXTRA_COLUMNS)}
        for traj in trajectories:
            start = traj.turns[0].start if traj.turns else len(traj.token_ids)
            completion, mask = traj.token_ids[start:], traj.response_mask[start:]
            logprobs = traj.logprobs[start:]
            if not completion:  # the episode ended before the policy spoke: one masked end-of-turn
                completion, mask, logprobs = [self.chat.eos_token_ids[0]], [0], [0.0]
            out["prompt_ids"].append(list(traj.token_ids[:start]))
            out["completion_ids"].append(list(completion))
            out["env_mask"].append(list(mask))
            out["logprobs"].append(list(logprobs))
            out["outcome"].append(float(traj.outcome_reward))
            out["transcript"].append(traj.transcript)  # the complete record: reads back as traj.steps
            out["termination"].append(str(traj.termination))
        return out


@contextlib.contextmanager
def native_precision(model: Any) -> Iterator[None]:
    """Run ``model`` in its own dtype for the rollout.

    With ``bf16``/``fp16`` mixed precision, ``accelerate.prepare`` wraps ``model.forward`` in
    autocast (keeping the original as ``model._original_forward``); the engine's KV cache
    has the parameters' dtype, so the rollout calls the original forward, and the wrapper
    is put back for TRL's own forward passes.
    """
    original = model.__dict__.get("_original_forward")
    wrapped = model.__dict__.get("forward")
    if original is None or wrapped is None:
        yield
        return
    model.forward = original
    try:
        yield
    finally:
        model.forward = wrapped


def episode_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """``airline/*`` numbers of one batch of episodes (logged next to TRL's own)."""
    n = max(len(trajectories), 1)
    return {
        "airline/outcome_mean": sum(t.outcome_reward for t in trajectories) / n,
        "airline/turns_mean": sum(len(t.turns) for t in trajectories) / n,
        "airline/error_rate": sum(t.has_error for t in trajectories) / n,
    }


def outcome_reward(completions: Sequence[Any], outcome: Sequence[float] | None = None, **kwargs: Any) -> list[float]:
    """TRL reward function: the grader's outcome (1 solved, 0 not) of each ``AirlineRollout`` episode."""
    if outcome is None:
        raise ValueError("outcome_reward scores airline episodes: pass rollout_func=AirlineRollout(...) to the "
                         "trainer (it adds the `outcome` column)")
    return [float(value) for value in outcome]
