"""``agentgrpo ablate``: every variant from the same SFT checkpoint, side by side.

For each experiment (default: all of ``configs/experiment``) it trains GRPO from the given
SFT checkpoint with identical settings except the variant, evaluates the final
checkpoint (and the SFT start point once), and writes ``ablation.md`` (the seed study's
table, Δ against vanilla), ``ablation.json`` and ``training_curves.png``. Overrides
use the quickstart's syntax: ``grpo.trainer.steps=40``, ``eval.trials=4``, ``seed=1``.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from agentgrpo.config import ConfigError, available_experiments, load_config, split_overrides


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("ablate", help="train and evaluate every variant from one SFT checkpoint")
    parser.add_argument("--sft", required=True, help="the SFT checkpoint every variant starts from")
    parser.add_argument("--out", default="runs/ablation", help="output directory")
    parser.add_argument("--experiments", default=",".join(available_experiments()),
                        help="comma-separated experiment names (default: all)")
    parser.add_argument("overrides", nargs="*", metavar="[grpo.|eval.]key=value")
    parser.set_defaults(func=run)


def run_ablation(sft: str | Path, out: str | Path, experiments: list[str], overrides: list[str]) -> dict[str, Any]:
    from agentgrpo.eval.evaluator import EvalConfig, evaluate
    from agentgrpo.preflight import check_policy_source, preflight_eval, preflight_grpo
    from agentgrpo.report.plots import plot_training_curves
    from agentgrpo.report.tables import comparison_table
    from agentgrpo.train.grpo import train_grpo
    from agentgrpo.train.grpo_config import GRPOConfig

    out = Path(out)
    stage = split_overrides(overrides, ("grpo", "eval"))
    unknown = set(experiments) - set(available_experiments())
    if unknown:
        raise ConfigError(f"unknown experiment(s) {sorted(unknown)}; choose from {available_experiments()}")

    def eval_config(checkpoint: Path, name: str) -> EvalConfig:
        return load_config(EvalConfig, [*stage["eval"], f"policy={checkpoint}", f"out_dir={out / name / 'eval'}"],
                           defaults="eval.yaml")

    check_policy_source(sft, "--sft", "pass an SFT run's final/ directory (agentgrpo sft writes runs/sft/final)")
    configs = {experiment: load_config(GRPOConfig, [f"experiment={experiment}", *stage["grpo"], f"policy.init={sft}",
                                                    f"run_dir={out / experiment}"], defaults="grpo.yaml")
               for experiment in experiments}
    for config in configs.values():  # every config and file is checked before the first model is built
        preflight_grpo(config)
    preflight_eval(eval_config(Path(sft), "sft"))
    metrics = {"SFT": evaluate(eval_config(Path(sft), "sft")).metrics}
    for experiment, config in configs.items():
        metrics[experiment] = evaluate(eval_config(train_grpo(config), experiment)).metrics
    baseline = "vanilla" if "vanilla" in metrics else "SFT"
    (out / "ablation.md").write_text(
        "# Ablation\n\n" + comparison_table(metrics, baseline=baseline)
        + "\n![training curves](training_curves.png)\n"
    )
    plot_training_curves({e: out / e / "metrics.jsonl" for e in experiments}, out / "training_curves.png")
    (out / "ablation.json").write_text(json.dumps(metrics, indent=2))
    return metrics


def run(args: argparse.Namespace) -> int:
    run_ablation(args.sft, args.out, [e for e in args.experiments.split(",") if e], args.overrides)
    print((Path(args.out) / "ablation.md").read_text())
    return 0
