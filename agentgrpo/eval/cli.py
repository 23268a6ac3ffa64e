"""``agentgrpo eval``: pass^k of a checkpoint, the oracle, or a served model."""
from __future__ import annotations

import argparse

from agentgrpo.config import load_config, to_yaml


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval", help="pass^k / pass@k / split pass^1 / generalization of a policy on a task set"
    )
    parser.add_argument("--policy", help="checkpoint directory, 'oracle', or 'openai' (endpoint.* settings)")
    parser.add_argument("--trials", type=int, help="trials per task (n of pass^k)")
    parser.add_argument("--out", help="output directory (eval.json, eval.md, transcripts.jsonl)")
    parser.add_argument("--config", help="a YAML file merged over configs/eval.yaml")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agentgrpo.eval.evaluator import EvalConfig, evaluate
    from agentgrpo.preflight import preflight_eval

    overrides = list(args.overrides)
    for flag, key in ((args.policy, "policy"), (args.trials, "trials"), (args.out, "out_dir")):
        if flag is not None:
            overrides.append(f"{key}={flag}")
    config = load_config(EvalConfig, overrides, defaults="eval.yaml", config_file=args.config)
    if args.print_config:
        print(to_yaml(config))
        return 0
    preflight_eval(config)
    report = evaluate(config)
    print(report.to_markdown())
    print(f"written to {config.out_dir}/ (eval.json, eval.md, transcripts.jsonl)")
    return 0
