"""Train an airline agent with TRL's GRPOTrainer and agentgrpo's objective (docs/scale.md, "TRL on one node").

    python examples/trl/train_airline.py --model runs/sft/final --out runs/trl_airline --steps 50 \
        experiment=joint_llds [key=value ...] [--TRL_FLAG VALUE ...]

The experiment's numbers come from the native config, loaded as ``agentgrpo train`` loads
it (``configs/grpo.yaml``, ``experiment=NAME``, ``--config FILE``, ``key=value``
overrides such as ``algo.llds_coef=0.3``, ``rollout.max_turns=30``, ``env.source=...``) and
written in TRL's terms by ``agentgrpo.integrations.host_settings.trl_settings`` (what
``agentgrpo hosts trl`` prints): estimator, ε, Turn-Discount, clip, β, λ, gate, aggregation,
ratio level, temperature, group, micro-/mini-batches and epochs, and the PRM-Lite weight. So
``experiment=llds`` here trains what ``agentgrpo train experiment=llds`` trains.

Every rollout is a whole airline episode (``AirlineRollout``, TRL's ``rollout_func``): the
policy's turns, tool results and the customer's replies — a scripted customer by default,
an LLM one with ``env.user.kind=llm env.user.base_url=... env.user.model=...``. Other
``GRPOConfig`` fields may be given as TRL spells them (``--logging_steps 1``; parsed by
``TrlParser``); those the experiment sets (``--beta``, ``--epsilon``...) are refused, naming
the native key to set instead. Trains on the training splits and saves the trained policy
to ``OUT/final`` (``agentgrpo eval --policy OUT/final``); choose a checkpoint on the
validation split and evaluate it on the test split.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from trl import TrlParser

from agentgrpo.agent.chat import ChatFormat
from agentgrpo.config import ConfigError
from agentgrpo.envs.registry import TRAIN_SPLITS, build_env
from agentgrpo.integrations.host_settings import load_native, refuse_trl_overrides, trl_settings
from agentgrpo.integrations.trl import (
    AgentGRPOConfig,
    AgentGRPOTrainer,
    AirlineRollout,
    PRMLiteReward,
    airline_dataset,
    outcome_reward,
)
from agentgrpo.openai_client import llm_user_client
from agentgrpo.policy.hf import load_policy, read_agent_config, save_policy
from agentgrpo.rewards import PRMLite
from agentgrpo.train.grpo_config import GRPOConfig


# --8<-- [start:train]
def train(model_dir: str, out: str, config: GRPOConfig, steps: int = 50, splits: Sequence[str] = TRAIN_SPLITS,
          **trl_args: Any) -> AgentGRPOTrainer:
    """GRPO on airline episodes with ``config``'s experiment; returns the trained trainer (``trainer.model``)."""
    refuse_trl_overrides(trl_args)                                # the experiment's numbers: from config only
    variant = trl_settings(config)                                # = agentgrpo hosts trl (refuses what TRL can't)
    model, tokenizer = load_policy(model_dir)
    bundle = build_env(config.env)
    chat = ChatFormat(tokenizer, bundle.domain.tool_schemas(), bundle.domain.policy,
                      prompt_style=read_agent_config(model_dir)["prompt_style"])
    settings = dict(
        output_dir=out, max_steps=steps, **variant.config,
        max_completion_length=config.rollout.max_total_tokens,
        use_cpu=not torch.cuda.is_available(), bf16=torch.cuda.is_available(),  # CPU: float32 (bf16 is slow)
        report_to="none", save_strategy="no")
    args = AgentGRPOConfig(**{**settings, **trl_args})
    prm = PRMLite.from_yaml(variant.prm_weights) if variant.prm_weights else None
    trainer = AgentGRPOTrainer(
        model=model, processing_class=tokenizer, args=args,
        train_dataset=airline_dataset(bundle, splits),            # one row per task: prompt = task id
        rollout_func=AirlineRollout(bundle, config.env, chat, config.rollout, seed=args.seed,
                                    user_client=llm_user_client(config.env.user)),
        reward_funcs=[outcome_reward, PRMLiteReward(coef=variant.prm_coef, prm=prm)],  # outcome + coef · PRM-Lite
    )
    trainer.train()
    save_policy(trainer.model, tokenizer, Path(out) / "final", read_agent_config(model_dir))  # agentgrpo eval's input
    return trainer
# --8<-- [end:train]


def split_trl_flags(argv: Sequence[str], ours: set[str]) -> tuple[list[str], list[str]]:
    """``(our arguments, TRL flags)``: a ``--flag`` this script does not define is TRL's, with
    its value (``--flag=value``, or the next argument unless that is a flag or a ``key=value``)."""
    mine: list[str] = []
    theirs: list[str] = []
    items = list(argv)
    while items:
        arg = items.pop(0)
        if not arg.startswith("--") or arg.split("=", 1)[0] in ours:
            mine.append(arg)
            continue
        theirs.append(arg)
        if "=" not in arg and items and not items[0].startswith("--") and "=" not in items[0]:
            theirs.append(items.pop(0))
    return mine, theirs


def trl_flags(argv: Sequence[str], out: str) -> dict[str, Any]:
    """The ``AgentGRPOConfig`` fields given on the command line as TRL spells them
    (``--logging_steps 1``), parsed and typed by ``TrlParser``; checked when ``train`` builds the config."""
    if not argv:
        return {}
    parsed, unknown = TrlParser((AgentGRPOConfig,)).parse_known_args(args=[*argv, "--output_dir", out])
    if unknown:
        raise SystemExit(f"train_airline.py: unknown options {unknown} (neither this script's nor AgentGRPOConfig's)")
    given = {arg[2:].split("=", 1)[0].replace("-", "_") for arg in argv if arg.startswith("--")}
    return {name: getattr(parsed, name) for name in given}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="policy checkpoint directory (e.g. an SFT run's final)")
    parser.add_argument("--out", default="runs/trl_airline", help="TRL output directory")
    parser.add_argument("--config", help="a YAML file merged over configs/grpo.yaml (as agentgrpo train --config)")
    parser.add_argument("--steps", type=int, default=50, help="optimizer steps (TRL's max_steps)")
    parser.add_argument("--lr", type=float, default=5e-6, help="learning rate (the model's, not the experiment's)")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="native config overrides: experiment=NAME, algo.*, reward.*, trainer.*, rollout.*, env.*")
    ours = {option for action in parser._actions for option in action.option_strings}
    mine, theirs = split_trl_flags(argv if argv is not None else sys.argv[1:], ours)
    args = parser.parse_args(mine)
    trl_args = trl_flags(theirs, args.out)
    try:
        config = load_native(args.overrides, args.config)
        train(args.model, args.out, config, steps=args.steps, **{"learning_rate": args.lr, **trl_args})
    except ConfigError as error:
        raise SystemExit(f"train_airline.py: {error}") from None
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
