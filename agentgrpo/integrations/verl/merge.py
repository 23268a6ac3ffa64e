"""``agentgrpo verl-merge``: a veRL FSDP checkpoint → an HF directory ``agentgrpo eval`` loads.

veRL saves the actor of step N as ``<trainer.default_local_dir>/global_step_N/actor/``:
one ``model_world_size_W_rank_R.pt`` shard per rank, ``fsdp_config.json`` and the HF
config and tokenizer in ``huggingface/`` (``latest_checkpointed_iteration.txt`` in the
run directory names the last step). veRL's own merger (``python -m verl.model_merger
merge --backend fsdp``, CPU only) joins the shards into safetensors; this command runs
it and then writes ``agentgrpo.json`` (the prompt style the policy was trained with:
``full``, the policy text and tool schemas that ``verl-prepare`` put in every row), so

    agentgrpo verl-merge --checkpoint checkpoints/agentgrpo_airline/joint_llds --step 250 --out runs/joint_llds_250
    agentgrpo eval --policy runs/joint_llds_250 splits=[unseen]

evaluates the step chosen on the validation curve, once, on the test split.
``--checkpoint`` may be the run directory (the latest or ``--step`` N), a
``global_step_N`` directory or its ``actor`` directory. Needs veRL installed (the merge
itself); ``--help`` does not.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentgrpo.agent.chat import PROMPT_STYLES
from agentgrpo.config import AgentGRPOError, ConfigError, DataError, MissingFileError

LATEST_FILE = "latest_checkpointed_iteration.txt"
AGENT_CONFIG_FILE = "agentgrpo.json"  # agentgrpo.policy.hf reads it (not imported: no torch for --help)
VERL_PROMPT_STYLE = "full"


def actor_dir(checkpoint: str | Path, step: int | None = None) -> Path:
    """The ``actor`` directory of a veRL run directory, ``global_step_N`` directory or actor directory."""
    path = Path(checkpoint)
    if (path / "fsdp_config.json").is_file():
        return path
    if (path / "actor" / "fsdp_config.json").is_file():
        return path / "actor"
    if step is None and (path / LATEST_FILE).is_file():
        step = int((path / LATEST_FILE).read_text().strip())
    if step is not None and (path / f"global_step_{step}" / "actor" / "fsdp_config.json").is_file():
        return path / f"global_step_{step}" / "actor"
    steps = sorted(p.name for p in path.glob("global_step_*")) if path.is_dir() else []
    raise MissingFileError(
        f"no veRL FSDP actor checkpoint at {path}" + (f" for step {step}" if step is not None else "")
        + f" (expected fsdp_config.json, actor/fsdp_config.json or global_step_N/actor/; found {steps or 'none'}); "
        "pass --checkpoint <trainer.default_local_dir>[/global_step_N[/actor]]"
    )


def check_actor_dir(actor: Path) -> None:
    """The files veRL's merger reads, checked before it starts."""
    world_size = json.loads((actor / "fsdp_config.json").read_text()).get("world_size")
    if not isinstance(world_size, int) or world_size < 1:
        raise DataError(f"{actor / 'fsdp_config.json'} has no world_size: not a veRL FSDP checkpoint")
    missing = [f"model_world_size_{world_size}_rank_{rank}.pt" for rank in range(world_size)
               if not (actor / f"model_world_size_{world_size}_rank_{rank}.pt").is_file()]
    if not (actor / "huggingface" / "config.json").is_file():
        missing.append("huggingface/config.json")
    if missing:
        raise MissingFileError(f"the veRL checkpoint {actor} is incomplete: missing {', '.join(missing)}")


def merge(actor: Path, out: Path, prompt_style: str = VERL_PROMPT_STYLE) -> Path:
    """Run veRL's FSDP merger into ``out`` and write ``out/agentgrpo.json``; returns ``out``."""
    check_actor_dir(actor)
    command = [sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp",
               "--local_dir", str(actor), "--target_dir", str(out)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        lines = [line for line in (result.stderr or result.stdout).strip().splitlines() if line.strip()]
        raise DataError(f"veRL's model merger failed on {actor} (exit {result.returncode}): "
                        f"{lines[-1] if lines else 'no output'}; rerun `{' '.join(command)}` to see all of it")
    agent_config = {"prompt_style": prompt_style, "verl_checkpoint": str(actor.resolve())}
    (out / AGENT_CONFIG_FILE).write_text(json.dumps(agent_config, indent=2, sort_keys=True))
    return out


def _run(args: argparse.Namespace) -> int:
    try:
        import verl  # noqa: F401  (the merger runs in its own interpreter; fail here, in one line)
    except ImportError:
        raise AgentGRPOError("verl-merge runs veRL's model merger, and veRL is not installed: "
                             "pip install 'agentgrpo[verl]'") from None
    if args.prompt_style not in PROMPT_STYLES:
        raise ConfigError(f"--prompt-style={args.prompt_style} is invalid: choose one of {sorted(PROMPT_STYLES)}")
    actor = actor_dir(args.checkpoint, args.step)
    out = merge(actor, Path(args.out), args.prompt_style)
    print(f"merged {actor} into {out}; evaluate it with: agentgrpo eval --policy {out}")
    return 0


def register(subparsers: Any) -> None:
    """Add the ``verl-merge`` subcommand (``agentgrpo.cli`` calls this)."""
    parser = subparsers.add_parser(
        "verl-merge",
        help="merge a veRL FSDP checkpoint into an HF directory agentgrpo eval loads",
        description="Join a veRL FSDP actor checkpoint into one HF model directory (veRL's model merger, "
        "on CPU) and add agentgrpo.json, so `agentgrpo eval --policy OUT` evaluates it.",
    )
    parser.add_argument("--checkpoint", required=True,
                        help="veRL run directory (trainer.default_local_dir), a global_step_N directory or its actor/")
    parser.add_argument("--step", type=int, default=None,
                        help="global step to merge from a run directory (default: the latest)")
    parser.add_argument("--out", required=True, help="output directory (an HF model directory)")
    parser.add_argument("--prompt-style", default=VERL_PROMPT_STYLE,
                        help="system prompt the policy was trained with (default full: what verl-prepare writes)")
    parser.set_defaults(func=_run)
