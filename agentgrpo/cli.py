"""The ``agentgrpo`` command: one subcommand per job.

Each job module exposes ``register(subparsers)`` (or the function named after a colon in
``COMMANDS``), which adds its parser and sets ``func`` (called with the parsed namespace,
returns an exit code). Modules are
imported lazily per command so ``agentgrpo env ...`` never imports torch.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (module that registers it, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "quickstart": ("agentgrpo.quickstart", "the whole pipeline on the embedded default (CPU, offline)"),
    "env": ("agentgrpo.envs.airline.cli", "inspect, play and solve airline tasks"),
    "sft": ("agentgrpo.train.cli:register_sft", "SFT warm-up on the oracle's transcripts"),
    "train": ("agentgrpo.train.cli:register_train", "GRPO training with any variant (experiment=...)"),
    "eval": ("agentgrpo.eval.cli", "pass^k evaluation of a checkpoint, the oracle or an endpoint"),
    "ablate": ("agentgrpo.report.ablation", "every variant from one SFT checkpoint: table and curves"),
    "verl-prepare": ("agentgrpo.integrations.verl.data", "write the airline task parquet files for veRL"),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentgrpo",
        description="Stable GRPO for long-horizon multi-turn tool agents (τ-bench airline).",
    )
    from agentgrpo import __version__

    parser.add_argument("--version", action="version", version=f"agentgrpo {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (target, help_text) in COMMANDS.items():
        if name == only:
            module, _, function = target.partition(":")
            getattr(importlib.import_module(module), function or "register")(sub)
        else:  # listed in --help without importing the module
            sub.add_parser(name, help=help_text)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(only=command if command in COMMANDS else None)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0 if command is None else 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
