"""``agentgrpo sft`` and ``agentgrpo train``: the training jobs from the command line.

Settings come from the packaged YAML (``configs/sft.yaml``, ``configs/grpo.yaml``), an
optional ``--config`` file, and Hydra-style ``key=value`` overrides, e.g.
``agentgrpo train experiment=joint trainer.steps=40 seed=1``.
"""
from __future__ import annotations

import argparse
import sys

from agentgrpo.config import ConfigError, available_experiments, load_config, to_yaml


def register_sft(subparsers: argparse._SubParsersAction) -> None:
    sft = subparsers.add_parser("sft", help="SFT warm-up on the oracle's transcripts (Render-Twice-Diff masking)")
    sft.add_argument("--config", help="a YAML file merged over configs/sft.yaml")
    sft.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    sft.add_argument("overrides", nargs="*", metavar="key=value")
    sft.set_defaults(func=run_sft)


def register_train(subparsers: argparse._SubParsersAction) -> None:
    train = subparsers.add_parser(
        "train", help="GRPO with any variant: experiment=" + "|".join(available_experiments())
    )
    train.add_argument("--config", help="a YAML file merged over configs/grpo.yaml")
    train.add_argument("--resume", action="store_true", help="continue from the run's latest checkpoint")
    train.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    train.add_argument("overrides", nargs="*", metavar="key=value")
    train.set_defaults(func=run_train)


def run_sft(args: argparse.Namespace) -> int:
    from agentgrpo.train.sft import SFTConfig, train_sft

    config = _load(SFTConfig, "sft.yaml", args)
    if config is None:
        return 2
    if args.print_config:
        print(to_yaml(config))
        return 0
    final = train_sft(config)
    print(f"SFT checkpoint: {final}")
    return 0


def run_train(args: argparse.Namespace) -> int:
    from agentgrpo.train.grpo import train_grpo
    from agentgrpo.train.grpo_config import GRPOConfig

    config = _load(GRPOConfig, "grpo.yaml", args)
    if config is None:
        return 2
    if args.print_config:
        print(to_yaml(config))
        return 0
    final = train_grpo(config, resume=args.resume)
    print(f"GRPO checkpoint: {final}")
    return 0


def _load(schema: type, defaults: str, args: argparse.Namespace):
    try:
        return load_config(schema, args.overrides, defaults=defaults, config_file=args.config)
    except ConfigError as e:
        print(f"agentgrpo: {e}", file=sys.stderr)
        return None
