"""``agentgrpo eval``: pass^k of a checkpoint, a Hub model, the oracle, or a served model.

With ``env.source=tau_bench`` the τ-bench layer (``configs/eval_tau_bench.yaml``: 30
turns, an LLM user sampled as τ-bench samples it) goes over ``configs/eval.yaml`` before
the ``--config`` file and the overrides. ``--writes DIR`` evaluates nothing: it reports
why an earlier evaluation's write tasks failed (``agentgrpo.eval.writes``). ``--likelihood DIR``
evaluates nothing either: it teacher-forces DIR's successful episodes under ``--baseline`` and
``--policy`` and says which turns' likelihood moved (``agentgrpo.eval.likelihood``). ``--decisions``
plays the oracle instead and scores the policy's turn at each of its steps
(``agentgrpo.eval.decisions``).
"""
from __future__ import annotations

import argparse

from agentgrpo.config import load_config, to_yaml

TAU_BENCH_LAYER = "eval_tau_bench.yaml"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval", help="pass^k / pass@k / split pass^1 / generalization of a policy on a task set"
    )
    parser.add_argument("--policy", help="checkpoint directory, Hub id, 'oracle', or 'openai' (endpoint.* settings)")
    parser.add_argument("--trials", type=int, help="trials per task (n of pass^k)")
    parser.add_argument("--out", help="output directory (eval.json, eval.md, transcripts.jsonl)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the finished episodes of --out's transcripts.jsonl and play only the others")
    parser.add_argument("--force", action="store_true",
                        help="evaluate into an --out that already holds files, replacing its evaluation files "
                             "(without --resume or --force such a directory is refused)")
    parser.add_argument("--format", choices=["tau-bench"], action="append", default=[],
                        help="also write the transcripts as τ-bench's results file (tau_bench_results.json: "
                             "[{task_id, reward, info, traj, trial}], aborted episodes as reward 0)")
    parser.add_argument("--compare-to", metavar="DIR",
                        help="an earlier evaluation (its out_dir) of the same tasks, trials and seed: write the "
                             "paired difference (this − that) with 95%% intervals to compare.md / compare.json")
    parser.add_argument("--writes", metavar="DIR",
                        help="evaluate nothing: report why the write tasks of the evaluation in DIR failed (per "
                             "write tool: attempted, executed, gold calls, errors; each failed write episode's "
                             "outcome class; writes on tasks that need none) into DIR/writes.md and writes.json")
    parser.add_argument("--likelihood", metavar="DIR",
                        help="evaluate nothing: teacher-force the successful episodes of the evaluation in DIR "
                             "under --baseline and --policy (float32) and report, per turn kind (write call, "
                             "read call, reply), how their log-likelihood moved, into --out (default DIR)/"
                             "likelihood.md and likelihood.json")
    parser.add_argument("--baseline", metavar="CHECKPOINT",
                        help="with --likelihood: the policy before (e.g. the SFT checkpoint GRPO started from)")
    parser.add_argument("--all-episodes", action="store_true",
                        help="with --likelihood: read every episode, not only the successful ones")
    parser.add_argument("--max-episodes", type=int, metavar="N",
                        help="with --likelihood: read the first N episodes chosen")
    parser.add_argument("--decisions", action="store_true",
                        help="play no episode of the policy: at every assistant turn of the oracle's episodes on "
                             "the evaluated tasks, decode the policy's turn after the oracle's conversation so far "
                             "and compare (kind, tool, exact arguments; per tool, which arguments differ) into "
                             "out_dir/decisions.md and decisions.json")
    parser.add_argument("--config", help="a YAML file merged over configs/eval.yaml")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    parser.set_defaults(func=run)


def load_eval_config(overrides: list[str], config_file: str | None = None):
    """The evaluation config: eval.yaml, the τ-bench layer when env.source=tau_bench, the file, the overrides."""
    from agentgrpo.eval.config import EvalConfig

    layers = ["eval.yaml", TAU_BENCH_LAYER] if _source(overrides, config_file) == "tau_bench" else ["eval.yaml"]
    return load_config(EvalConfig, overrides, defaults=layers, config_file=config_file)


def _source(overrides: list[str], config_file: str | None) -> str | None:
    """``env.source`` as the overrides (last one wins) or else the config file set it."""
    for item in reversed(overrides):
        key, _, value = item.partition("=")
        if key.strip().lstrip("+") == "env.source":
            return value.strip()
    if config_file:
        from omegaconf import OmegaConf

        try:
            return OmegaConf.select(OmegaConf.load(config_file), "env.source")
        except Exception:  # unreadable: load_config reports it with its own message
            return None
    return None


def run(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from agentgrpo.eval.compare import compare_evals, load_eval
    from agentgrpo.eval.evaluator import evaluate
    from agentgrpo.eval.markdown import report_markdown
    from agentgrpo.eval.preflight import preflight_eval
    from agentgrpo.eval.provenance import check_out_dir

    if args.writes:
        return _writes_report(args.writes)
    if args.likelihood:
        return _likelihood_report(args)
    overrides = list(args.overrides)
    for flag, key in ((args.policy, "policy"), (args.trials, "trials"), (args.out, "out_dir")):
        if flag is not None:
            overrides.append(f"{key}={flag}")
    config = load_eval_config(overrides, args.config)
    if args.print_config:
        print(to_yaml(config))
        return 0
    if args.decisions:
        return _decisions_report(config)
    if not args.force:  # refused before any check that costs time; --force clears it in evaluate()
        check_out_dir(config.out_dir, resume=args.resume)
    preflight_eval(config)
    baseline = load_eval(args.compare_to) if args.compare_to else None  # a wrong path fails before any episode
    report = evaluate(config, resume=args.resume, force=args.force)
    print(report_markdown(report))
    resumed = f" ({report.resumed} finished episodes kept from the earlier run)" if args.resume else ""
    print(f"written to {config.out_dir}/ (eval.json, eval.md, transcripts.jsonl){resumed}")
    _log_to_trackers(config, report)
    if "tau-bench" in args.format:
        from agentgrpo.eval.tau_bench_io import export_eval_dir

        path, count = export_eval_dir(config.out_dir)
        print(f"τ-bench results: {path} ({count} records)")
    if baseline is not None:
        diff = compare_evals(report, baseline, names=(report.policy, str(baseline.get("policy", args.compare_to))))
        (Path(config.out_dir) / "compare.json").write_text(json.dumps(diff.to_dict(), indent=2))
        (Path(config.out_dir) / "compare.md").write_text(diff.to_markdown())
        print(diff.to_markdown())
    return 0


def _writes_report(eval_dir: str) -> int:
    """``--writes DIR``: the write report of an earlier evaluation, printed and written beside it."""
    from agentgrpo.eval.writes import WRITES_JSON, WRITES_MD, analyse_eval_dir, writes_markdown

    report = analyse_eval_dir(eval_dir)
    print(writes_markdown(report))
    print(f"written to {eval_dir}/ ({WRITES_MD}, {WRITES_JSON})")
    return 0


def _likelihood_report(args: argparse.Namespace) -> int:
    """``--likelihood DIR``: how ``--policy`` moved the likelihood of DIR's episodes from ``--baseline``."""
    from agentgrpo.config import ConfigError
    from agentgrpo.eval.likelihood import LIKELIHOOD_JSON, LIKELIHOOD_MD, analyse_likelihood, likelihood_markdown

    if not args.baseline or not args.policy:
        raise ConfigError("--likelihood needs --baseline (the policy before) and --policy (the policy after)")
    if args.max_episodes is not None and args.max_episodes < 1:
        raise ConfigError(f"--max-episodes must be >= 1, got {args.max_episodes}")
    report = analyse_likelihood(args.likelihood, args.baseline, args.policy, out_dir=args.out,
                                successful_only=not args.all_episodes, max_episodes=args.max_episodes)
    print(likelihood_markdown(report))
    print(f"written to {args.out or args.likelihood}/ ({LIKELIHOOD_MD}, {LIKELIHOOD_JSON})")
    return 0


def _decisions_report(config) -> int:
    """``--decisions``: the policy's teacher-forced turns on the oracle's episodes (``agentgrpo.eval.decisions``)."""
    from agentgrpo.config import ConfigError
    from agentgrpo.eval.config import AGENT_POLICIES
    from agentgrpo.eval.decisions import DECISIONS_JSON, DECISIONS_MD, decisions_markdown, run_decisions

    if config.policy.init in AGENT_POLICIES:
        raise ConfigError(f"policy={config.policy.init}: --decisions decodes a checkpoint or Hub model's own turns")
    report = run_decisions(config)
    print(decisions_markdown(report, str(config.policy.init)))
    print(f"written to {config.out_dir}/ ({DECISIONS_MD}, {DECISIONS_JSON})")
    return 0


def _log_to_trackers(config, report) -> None:
    """The summary's figures (``eval/pass^k/1``, ``eval/ci/...``) to ``logging.trackers``: one W&B run each."""
    from pathlib import Path

    from agentgrpo.config import to_dict
    from agentgrpo.tracking import flat_numbers, log_summary

    label = "-".join(Path(str(report.policy)).parts[-2:]) or "policy"  # runs/grpo/final -> grpo-final
    log_summary(config.out_dir, config.logging, flat_numbers(report.metrics, "eval/"),
                run_name=f"eval-{label}-seed{config.seed}", group="eval", config=to_dict(config))
