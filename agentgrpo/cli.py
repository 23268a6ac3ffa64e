"""The ``agentgrpo`` command: one subcommand per job.

Each job module exposes ``register(subparsers)`` (or the function named after a colon in
``COMMANDS``), which adds its parser and sets ``func`` (called with the parsed namespace,
returns an exit code). Modules are imported lazily per command so ``agentgrpo env ...``
never imports torch.

Errors: an expected failure (:class:`agentgrpo.config.AgentGRPOError`: a bad config key,
a missing or broken file, an unreachable server) and a bad command line are one line on
stderr, ``agentgrpo: <what, where, how to fix>``, and exit code 2. ``--debug`` (anywhere
on the line) or ``AGENTGRPO_DEBUG=1`` re-raises instead, with the traceback.
``key=value`` overrides may come anywhere after the subcommand, before or after flags.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import NoReturn

from agentgrpo.config import AgentGRPOError

# subcommand -> (module that registers it, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "quickstart": ("agentgrpo.jobs.quickstart", "the whole pipeline on the embedded default (CPU, offline)"),
    "env": ("agentgrpo.envs.cli", "inspect, play and solve airline tasks"),
    "sft": ("agentgrpo.train.cli:register_sft", "SFT warm-up on the oracle's transcripts"),
    "train": ("agentgrpo.train.cli:register_train", "GRPO training with any variant (experiment=...)"),
    "eval": ("agentgrpo.eval.cli", "pass^k evaluation of a checkpoint, the oracle or an endpoint"),
    "tau-bench": ("agentgrpo.eval.tau_bench_cli", "score, compare and regrade τ-bench results files; export ours"),
    "serve": ("agentgrpo.serve.cli", "OpenAI-compatible server of a checkpoint or Hub model"),
    "ablate": ("agentgrpo.jobs.ablate", "every variant × seeds: table with CIs, plots, diagnoses"),
    "sanity": ("agentgrpo.jobs.sanity", "does GRPO learn? the toy domain with negated and lr=0 controls"),
    "diagnose": ("agentgrpo.diagnose", "collapse signatures in a GRPO run's metrics.jsonl"),
    "hosts": ("agentgrpo.integrations.host_settings", "an experiment's settings for veRL or TRL (equal to train's)"),
    "verl-prepare": ("agentgrpo.integrations.verl.data", "write the airline task parquet files for veRL"),
    "verl-merge": ("agentgrpo.integrations.verl.merge", "merge a veRL FSDP checkpoint into an HF dir for eval"),
}
DEBUG_FLAG = "--debug"
DEBUG_ENV = "AGENTGRPO_DEBUG"


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (and exit code 2), like every other error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = Parser(
        prog="agentgrpo",
        description="Stable GRPO for long-horizon multi-turn tool agents (τ-bench airline).",
        epilog=f"Errors are one line on stderr with exit code 2; {DEBUG_FLAG} (or {DEBUG_ENV}=1) shows tracebacks.",
    )
    from agentgrpo import __version__

    parser.add_argument("--version", action="version", version=f"agentgrpo {__version__}")
    parser.add_argument(DEBUG_FLAG, action="store_true", help="show the traceback of a failure")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (target, help_text) in COMMANDS.items():
        if name == only:
            module, _, function = target.partition(":")
            getattr(importlib.import_module(module), function or "register")(sub)
        else:  # listed in --help without importing the module
            sub.add_parser(name, help=help_text)
    return parser


def parse_args(argv: list[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """Parse ``argv``; a job's own options and its ``key=value`` overrides may be intermixed."""
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(only=command if command in COMMANDS else None)
    if command not in COMMANDS:
        return parser, parser.parse_args(argv)
    at = argv.index(command)
    args = parser.parse_args(argv[:at])  # options before the command (--version, --help)
    args.command = command
    job = _subcommand_parser(parser, command)
    nested = any(isinstance(a, argparse._SubParsersAction) for a in job._actions)
    # parse_intermixed_args lets overrides follow flags (`--out D trials=1`); it cannot
    # handle nested subcommands (`env tasks`), which take no overrides
    rest = job.parse_args(argv[at + 1 :]) if nested else job.parse_intermixed_args(argv[at + 1 :])
    for key, value in vars(rest).items():
        setattr(args, key, value)
    return parser, args


def _subcommand_parser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = DEBUG_FLAG in argv or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    argv = [a for a in argv if a != DEBUG_FLAG]
    try:
        parser, args = parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 0 if args.command is None else 2
        return int(args.func(args) or 0)
    except AgentGRPOError as e:
        if debug:
            raise
        print(f"agentgrpo: {one_line(e)}", file=sys.stderr)
        return 2


def one_line(error: BaseException) -> str:
    """The error's message on one line (a stray newline in a message never splits the report)."""
    return " ".join(str(error).split()) or type(error).__name__


if __name__ == "__main__":
    sys.exit(main())
