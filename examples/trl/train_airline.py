"""Train an airline agent with TRL's GRPOTrainer and agentgrpo's objective (docs/scale.md, "TRL on one node").

    python examples/trl/train_airline.py --model runs/sft/final --out runs/trl_airline \
        --estimator lata --llds-coef 0.2 --prm-coef 0.3 --steps 50 [env.KEY=VALUE ...] [--TRL_FLAG VALUE ...]

Every rollout is a whole airline episode (``AirlineRollout``, TRL's ``rollout_func``): the
policy's turns, tool results and the customer's replies — a scripted customer by default,
an LLM one with ``env.user.kind=llm env.user.base_url=... env.user.model=...``. Reward =
outcome + prm_coef · PRM-Lite; advantages from the registry estimator ``--estimator``
(grpo, lata, turn_discount, turn_discount_lata, dr_grpo); loss = agentgrpo's objective
with λ = ``--llds-coef``. TRL scores the log-probs at the rollouts' sampling temperature.
Any other ``GRPOConfig`` / ``AgentGRPOConfig`` field may be given as TRL spells it
(``--beta 0.01``, ``--logging_steps 1``; parsed by ``TrlParser``) and wins over the
example's choice. Trains on the training splits and saves the trained policy to
``OUT/final`` (``agentgrpo eval --policy OUT/final``); choose a checkpoint on the
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
from agentgrpo.config import load_config
from agentgrpo.envs.airline.factory import TRAIN_SPLITS, EnvConfig, build_env
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
from agentgrpo.rollout.engine import RolloutConfig


# --8<-- [start:train]
def train(model_dir: str, out: str, env: EnvConfig, rollout: RolloutConfig, estimator: str = "lata",
          llds_coef: float = 0.2, prm_coef: float = 0.3, steps: int = 50, group: int = 8, tasks_per_step: int = 4,
          splits: Sequence[str] = TRAIN_SPLITS, **trl_args: Any) -> AgentGRPOTrainer:
    """GRPO on airline episodes; returns the trained trainer (the model is ``trainer.model``)."""
    model, tokenizer = load_policy(model_dir)
    bundle = build_env(env)
    chat = ChatFormat(tokenizer, bundle.domain.tool_schemas(), bundle.domain.policy,
                      prompt_style=read_agent_config(model_dir)["prompt_style"])
    settings = dict(
        output_dir=out, max_steps=steps, adv_estimator=estimator, llds_coef=llds_coef,
        num_generations=group,                                   # the GRPO group: episodes per task
        per_device_train_batch_size=group * tasks_per_step // 2,
        steps_per_generation=2,                                  # 2 updates per rollout batch: LLDS acts
        max_completion_length=rollout.max_total_tokens,
        temperature=rollout.temperature,                         # log-probs of the distribution sampled
        use_cpu=not torch.cuda.is_available(), bf16=torch.cuda.is_available(),  # CPU: float32 (bf16 is slow)
        report_to="none", save_strategy="no")
    args = AgentGRPOConfig(**{**settings, **trl_args})           # TRL's own flags win
    trainer = AgentGRPOTrainer(
        model=model, processing_class=tokenizer, args=args,
        train_dataset=airline_dataset(bundle, splits),            # one row per task: prompt = task id
        rollout_func=AirlineRollout(bundle, env, chat, rollout, seed=args.seed,
                                    user_client=llm_user_client(env.user)),
        reward_funcs=[outcome_reward, PRMLiteReward(coef=prm_coef)],  # outcome + prm_coef · PRM-Lite
    )
    trainer.train()
    save_policy(trainer.model, tokenizer, Path(out) / "final", read_agent_config(model_dir))  # agentgrpo eval's input
    return trainer
# --8<-- [end:train]


def split_trl_flags(argv: Sequence[str], ours: set[str]) -> tuple[list[str], list[str]]:
    """``(our arguments, TRL flags)``: a ``--flag`` this script does not define is TRL's, with
    its value (``--flag=value``, or the next argument unless that is a flag or ``env.*``)."""
    mine: list[str] = []
    theirs: list[str] = []
    items = list(argv)
    while items:
        arg = items.pop(0)
        if not arg.startswith("--") or arg.split("=", 1)[0] in ours:
            mine.append(arg)
            continue
        theirs.append(arg)
        if "=" not in arg and items and not items[0].startswith("--") and not items[0].startswith("env."):
            theirs.append(items.pop(0))
    return mine, theirs


def trl_flags(argv: Sequence[str], out: str) -> dict[str, Any]:
    """The ``AgentGRPOConfig`` fields given on the command line as TRL spells them
    (``--beta 0.01``), parsed and typed by ``TrlParser``; checked when ``train`` builds the config."""
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
    parser.add_argument("--estimator", default="lata", help="registry advantage estimator")
    parser.add_argument("--llds-coef", type=float, default=0.2, help="λ of LLDS (0: off)")
    parser.add_argument("--prm-coef", type=float, default=0.3, help="weight of the PRM-Lite process score")
    parser.add_argument("--steps", type=int, default=50, help="optimizer steps")
    parser.add_argument("--group", type=int, default=8, help="episodes per task (num_generations)")
    parser.add_argument("--tasks-per-step", type=int, default=4, help="tasks per rollout batch")
    parser.add_argument("--lr", type=float, default=5e-6, help="learning rate")
    parser.add_argument("--max-turns", type=int, default=30, help="assistant turns per episode")
    parser.add_argument("--max-new-tokens", type=int, default=256, help="tokens per assistant turn")
    parser.add_argument("--max-total-tokens", type=int, default=8192, help="tokens per episode, prompt included")
    parser.add_argument("--temperature", type=float, default=0.7, help="sampling temperature of the rollouts")
    parser.add_argument("overrides", nargs="*", metavar="env.KEY=VALUE", help="environment config overrides")
    ours = {option for action in parser._actions for option in action.option_strings}
    mine, theirs = split_trl_flags(argv if argv is not None else sys.argv[1:], ours)
    args = parser.parse_args(mine)
    trl_args = trl_flags(theirs, args.out)
    env = load_config(EnvConfig, [item.removeprefix("env.") for item in args.overrides])
    rollout = RolloutConfig(max_turns=args.max_turns, max_new_tokens=args.max_new_tokens,
                            max_total_tokens=args.max_total_tokens, temperature=args.temperature)
    train(args.model, args.out, env, rollout, estimator=args.estimator, llds_coef=args.llds_coef,
          prm_coef=args.prm_coef, steps=args.steps, group=args.group, tasks_per_step=args.tasks_per_step,
          **{"learning_rate": args.lr, **trl_args})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
