"""``agentgrpo sft`` and ``agentgrpo train``: the training jobs from the command line.

Settings come from the packaged YAML (``configs/sft.yaml``, ``configs/grpo.yaml``), an
optional ``--config`` file, and Hydra-style ``key=value`` overrides, e.g.
``agentgrpo train experiment=joint trainer.steps=40 seed=1``.
"""
from __future__ import annotations

import argparse

from agentgrpo.config import available_experiments, load_config, to_yaml


def register_sft(subparsers: argparse._SubParsersAction) -> None:
    sft = subparsers.add_parser("sft", help="SFT warm-up on the oracle's transcripts (Render-Twice-Diff masking)")
    sft.add_argument("--config", help="a YAML file merged over configs/sft.yaml")
    sft.add_argument("--resume", action="store_true", help="continue from the run's latest checkpoint")
    sft.add_argument("--force", action="store_true",
                     help="with --resume: continue even if the config differs from the checkpoint's")
    sft.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    sft.add_argument("overrides", nargs="*", metavar="key=value")
    sft.set_defaults(func=run_sft)


def register_train(subparsers: argparse._SubParsersAction) -> None:
    train = subparsers.add_parser(
        "train", help="GRPO with any variant: experiment=" + "|".join(available_experiments())
    )
    train.add_argument("--config", help="a YAML file merged over configs/grpo.yaml")
    train.add_argument("--resume", action="store_true", help="continue from the run's latest checkpoint")
    train.add_argument("--force", action="store_true",
                       help="with --resume: continue even if the config differs from the checkpoint's")
    train.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    train.add_argument("overrides", nargs="*", metavar="key=value")
    train.set_defaults(func=run_train)


def run_sft(args: argparse.Namespace) -> int:
    # the trainers are imported when their command runs: they import torch and transformers,
    # which every other command (and `agentgrpo --help`) would otherwise wait for
    from agentgrpo.train.preflight import preflight_sft
    from agentgrpo.train.sft import train_sft
    from agentgrpo.train.sft_config import SFTConfig

    config = load_config(SFTConfig, args.overrides, defaults="sft.yaml", config_file=args.config)
    if args.print_config:
        print(to_yaml(config))
        return 0
    preflight_sft(config)
    final = train_sft(config, resume=args.resume, force=args.force)
    print(f"SFT checkpoint: {final}")
    return 0


def run_train(args: argparse.Namespace) -> int:
    # lazy for the same reason as run_sft's
    from agentgrpo.train.grpo import train_grpo
    from agentgrpo.train.grpo_config import GRPOConfig
    from agentgrpo.train.preflight import preflight_grpo

    config = load_config(GRPOConfig, args.overrides, defaults="grpo.yaml", config_file=args.config)
    if args.print_config:
        print(to_yaml(config))
        return 0
    preflight_grpo(config)
    final = train_grpo(config, resume=args.resume, force=args.force)
    print(f"GRPO checkpoint: {final}")
    return 0

