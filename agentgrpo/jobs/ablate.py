"""``agentgrpo ablate``: every variant × several seeds, side by side, with the uncertainty.

For each seed it trains one SFT checkpoint (or takes ``--sft`` for all), then every
experiment (default: all of ``configs/experiment``) with GRPO from it under each
*setting* (a named set of extra GRPO overrides, e.g. ``base`` and a high-learning-rate
``stress``), evaluates every final checkpoint and the SFT start point on the same tasks,
trials and user seeds, and diagnoses every run (``agentgrpo diagnose``). Finished jobs
are skipped, killed ones resumed, independent ones run ``--parallel`` at a time
(``agentgrpo.jobs.ablate_grid``).

The result, per setting (``ablation.md``, ``ablation.json``, plots; ``agentgrpo.jobs.ablate_summary``):
the seed study's table (overall, family-balanced, τ-bench-weighted, write and no-write pass^1,
Generalization, error rate, reasoning depth p50, cut-off episodes) as the mean over seeds with
a 95% t-interval; the paired differences against the do-nothing floor, vanilla and SFT with
seeds and tasks both random (``agentgrpo.eval.grid``), their per-seed values, sign-flip
p-values adjusted over the whole table (the primary as gatekeeper, Holm behind it);
comparison bars, validation pass^1 against step when the runs validate, and each run's
diagnose findings. ``--split validation`` evaluates the same grid on validation worlds.

Presets (``--preset``, ``configs/ablate/*.yaml`` or a file of one's own) fix the grid and its
sizes; ``cpu-quick`` and ``cpu`` are the CPU benchmark (docs/results/ablation-cpu.md). A
setting marked ``opt_in`` runs only when ``--settings`` names it (``cpu``'s ``stress``).
Overrides use the quickstart's syntax (``grpo.trainer.steps=40``, ``eval.trials=4``, ``sft.trainer.epochs=2``)
and win over the preset's.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentgrpo.config import CONFIG_DIR, ConfigError, DataError, available_experiments, split_overrides
from agentgrpo.jobs.ablate_grid import Job, eval_job, grpo_job, run_jobs, sft_job
from agentgrpo.jobs.ablate_summary import write_report

PRESET_DIR = CONFIG_DIR / "ablate"
STAGES = ("sft", "grpo", "eval")
SPLITS = ("test", "validation")
"""Where a grid's checkpoints are evaluated: the preset's test set, or held-out validation worlds
(``--split validation``: the same families, worlds no test ever uses) for choosing settings."""


def available_presets() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


@dataclass
class AblationPlan:
    """The grid: what runs, where, with which overrides."""

    out: Path
    seeds: list[int] = field(default_factory=lambda: [0])
    experiments: list[str] = field(default_factory=available_experiments)
    settings: dict[str, list[str]] = field(default_factory=lambda: {"base": []})
    """Setting name → extra GRPO overrides of that setting's runs."""
    setting_experiments: dict[str, list[str]] = field(default_factory=dict)
    """Setting name → the experiments it runs, when not all of ``experiments`` (a costly
    stress setting may run only the variants it is about)."""
    overrides: dict[str, list[str]] = field(default_factory=lambda: {s: [] for s in STAGES})
    parallel: int = 1
    sft: Path | None = None
    """One SFT checkpoint for every seed (else one is trained per seed)."""
    shared_sft: bool = False
    """Train one SFT checkpoint (with the first seed) and start every seed's runs from it: the
    seeds then vary GRPO alone (its sampling and updates), and the SFT cost is paid once."""
    shared_sft_seed: int | None = None
    """The seed a shared SFT is trained with: the preset's first seed, so a command narrowed
    with ``--seeds`` reuses the grid's checkpoint (default: the first of ``seeds``)."""
    setting_seeds: dict[str, list[int]] = field(default_factory=dict)
    """Setting name → the seeds it runs, when not all of ``seeds`` (a subset of them)."""
    primary: str | None = None
    """The pre-registered primary comparison: this experiment vs SFT (family-balanced pass^1 on
    the evaluation tasks), tested first at 5%; every other starred comparison of the table (vs
    SFT, vs vanilla, vs the do-nothing floor) is tested only if it holds, Holm-adjusted."""
    split: str = "test"
    """``test`` (the preset's evaluation) or ``validation`` (validation worlds: evaluations in
    ``eval-validation/``, reports in ``<setting>/validation/``; what settings are chosen on)."""

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ConfigError(f"--split {self.split!r} is invalid: choose from {list(SPLITS)}")
        unknown = set(self.experiments) - set(available_experiments())
        if unknown or not self.experiments:
            raise ConfigError(f"experiments={sorted(unknown) or self.experiments} is invalid: choose from "
                              f"{available_experiments()}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"seeds={self.seeds} is invalid: must be distinct integers")
        if self.parallel < 1:
            raise ConfigError(f"parallel={self.parallel} is invalid: must be >= 1")
        if not self.settings:
            raise ConfigError("settings is invalid: name at least one setting (e.g. base: [])")
        if self.primary is not None and self.primary not in self.experiments:
            raise ConfigError(f"primary={self.primary!r} is invalid: must be one of the grid's experiments "
                              f"{self.experiments}")
        for setting, chosen in self.setting_seeds.items():
            if not chosen or not set(chosen) <= set(self.seeds):
                raise ConfigError(f"settings.{setting}.seeds={chosen} is invalid: a non-empty subset of the grid's "
                                  f"seeds {self.seeds}")
        for setting, chosen in self.setting_experiments.items():
            unknown = set(chosen) - set(available_experiments())
            if unknown or not chosen:
                raise ConfigError(f"settings.{setting}.experiments={sorted(unknown) or chosen} is invalid: choose "
                                  f"from {available_experiments()}")

    def experiments_of(self, setting: str) -> list[str]:
        """The experiments ``setting`` runs, in the grid's order."""
        chosen = self.setting_experiments.get(setting)
        return [e for e in self.experiments if chosen is None or e in chosen]

    def seeds_of(self, setting: str) -> list[int]:
        """The seeds ``setting`` runs, in the grid's order."""
        chosen = self.setting_seeds.get(setting)
        return [s for s in self.seeds if chosen is None or s in chosen]

    def sft_seed_of(self, seed: int) -> int:
        """The seed whose SFT checkpoint ``seed``'s runs start from (the first with ``shared_sft``)."""
        if not self.shared_sft:
            return seed
        return self.seeds[0] if self.shared_sft_seed is None else self.shared_sft_seed

    @property
    def sft_seeds(self) -> list[int]:
        """The seeds an SFT checkpoint is trained for (none with ``--sft``)."""
        return [] if self.sft is not None else list(dict.fromkeys(map(self.sft_seed_of, self.seeds)))

    # -- where things go ---------------------------------------------------------------------
    def sft_dir(self, seed: int) -> Path:
        if self.sft is not None:
            return self.sft
        return self.out / "sft" / f"seed{self.sft_seed_of(seed)}" / "final"

    @property
    def eval_name(self) -> str:
        """The evaluation directory's name beside each checkpoint: ``eval`` or ``eval-validation``."""
        return "eval" if self.split == "test" else f"eval-{self.split}"

    @property
    def eval_overrides(self) -> list[str]:
        """The preset's evaluation overrides, pointed at validation worlds for ``--split validation``."""
        return [*self.overrides["eval"], *([] if self.split == "test" else ["splits=[validation]"])]

    def report_dir(self, setting: str) -> Path:
        return self.out / setting if self.split == "test" else self.out / setting / self.split

    def sft_eval_dir(self, seed: int) -> Path:
        if self.sft is not None:
            return self.out / "sft" / self.eval_name
        return self.sft_dir(seed).parent / self.eval_name

    def run_dir(self, setting: str, seed: int, experiment: str) -> Path:
        return self.out / setting / f"seed{seed}" / experiment


SETTING_KEYS = {"overrides", "experiments", "seeds", "opt_in"}
"""A setting's keys in a preset; ``opt_in: true`` runs it only when ``--settings`` names it (a
costly extra beside the grid's own budget, e.g. a stress setting)."""


def load_preset(name: str) -> dict[str, Any]:
    """A packaged preset by name, or a preset file of one's own (a path ending in .yaml)."""
    path = Path(name) if name.endswith((".yaml", ".yml")) else PRESET_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"--preset {name!r} is unknown; choose one of {available_presets()} or a preset "
                          "file (*.yaml)")
    data = yaml.safe_load(path.read_text()) or {}
    known = {"seeds", "experiments", "settings", "parallel", "primary", "shared_sft", *STAGES}
    extra = set(data) - known
    if extra:
        raise ConfigError(f"preset {name}: unknown key(s) {sorted(extra)}; valid keys: {sorted(known)}")
    return data


def make_plan(out: str | Path, preset: str | None = None, sft: str | Path | None = None,
              seeds: list[int] | None = None, experiments: list[str] | None = None,
              settings: list[str] | None = None, parallel: int | None = None,
              overrides: list[str] | None = None, split: str = "test") -> AblationPlan:
    """The plan of a preset (or the defaults) with the command line's choices on top."""
    data = load_preset(preset) if preset else {}
    stage = split_overrides(list(overrides or []), STAGES)
    all_settings: dict[str, list[str]] = {}
    setting_experiments: dict[str, list[str]] = {}
    setting_seeds: dict[str, list[int]] = {}
    opt_in: set[str] = set()
    for name, spec in (data.get("settings") or {"base": []}).items():
        if isinstance(spec, dict):  # {overrides: [...], experiments: [...], seeds: [...], opt_in: bool}
            extra = set(spec) - SETTING_KEYS
            if extra:
                raise ConfigError(f"preset {preset}: settings.{name} has unknown key(s) {sorted(extra)}; "
                                  f"valid keys: {sorted(SETTING_KEYS)}")
            all_settings[name] = list(spec.get("overrides") or [])
            if spec.get("opt_in"):
                opt_in.add(name)
            if spec.get("experiments"):
                setting_experiments[name] = list(spec["experiments"])
            if spec.get("seeds") is not None:
                setting_seeds[name] = [int(s) for s in spec["seeds"]]
        else:
            all_settings[name] = list(spec or [])
    if settings:
        missing = [s for s in settings if s not in all_settings]
        if missing:
            raise ConfigError(f"--settings {missing} unknown; this grid has {sorted(all_settings)}")
        all_settings = {s: all_settings[s] for s in settings}
    else:  # an opt-in setting runs only when --settings names it
        all_settings = {s: o for s, o in all_settings.items() if s not in opt_in}
        if not all_settings:
            raise ConfigError(f"preset {preset}: every setting is opt_in; name one with --settings")
    grid_seeds = list(seeds if seeds is not None else data.get("seeds", [0]))
    return AblationPlan(
        out=Path(out),
        seeds=grid_seeds,
        experiments=list(experiments or data.get("experiments") or available_experiments()),
        settings=all_settings,
        setting_experiments={s: e for s, e in setting_experiments.items() if s in all_settings},
        # a setting's seeds within the grid's (the command line's --seeds may narrow the grid)
        setting_seeds={s: [x for x in chosen if x in grid_seeds] or grid_seeds[:1]
                       for s, chosen in setting_seeds.items() if s in all_settings},
        shared_sft=bool(data.get("shared_sft", False)),
        shared_sft_seed=int(data["seeds"][0]) if data.get("shared_sft") and data.get("seeds") else None,
        overrides={s: [*(data.get(s) or []), *stage[s]] for s in STAGES},
        parallel=int(parallel if parallel is not None else data.get("parallel", 1)),
        sft=Path(sft) if sft else None,
        split=split,
        # the pre-registered comparison exists only when the command line keeps its variant
        primary=data.get("primary") if data.get("primary") in (experiments or data.get("experiments") or
                                                                available_experiments()) else None,
    )


def plan_jobs(plan: AblationPlan) -> list[Job]:
    """Every job of the grid, with its dependencies (finished ones included: they are skipped)."""
    jobs: list[Job] = []
    evaluate = plan.eval_overrides
    trained: dict[int, str] = {}
    for seed in plan.sft_seeds:
        job = sft_job(plan.out, seed, plan.overrides["sft"])
        jobs.append(job)
        trained[seed] = job.name
        jobs.append(eval_job(plan.sft_dir(seed), plan.sft_eval_dir(seed), f"sft/seed{seed}/{plan.eval_name}",
                             evaluate, [job.name]))
    sft_needs = {seed: [trained[plan.sft_seed_of(seed)]] if trained else [] for seed in plan.seeds}
    if plan.sft is not None:
        jobs.append(eval_job(plan.sft, plan.sft_eval_dir(0), f"sft/{plan.eval_name}", evaluate, []))
    # a seed's variants sample the same first step: decoded once, read by the others
    shared = f"trainer.shared_rollouts_dir={plan.out / 'shared_rollouts'}"
    # experiments outermost: with a few jobs at a time every variant gets its first seed early
    # (and the runs that share first rollouts rarely run their first steps at once)
    for setting, extra in plan.settings.items():
        for experiment in plan.experiments_of(setting):
            for seed in plan.seeds_of(setting):
                run_dir = plan.run_dir(setting, seed, experiment)
                name = f"{setting}/seed{seed}/{experiment}"
                jobs.append(grpo_job(run_dir, name, experiment, seed, plan.sft_dir(seed),
                                     [shared, *plan.overrides["grpo"], *extra], sft_needs[seed]))
                jobs.append(eval_job(run_dir / "final", run_dir / plan.eval_name, f"{name}/{plan.eval_name}", evaluate,
                                     [name]))
    return jobs


def run_ablation(plan: AblationPlan) -> dict[str, Any]:
    """Run (or finish) the grid, then write each setting's report; returns the summaries."""
    _check_configs(plan)
    plan.out.mkdir(parents=True, exist_ok=True)
    failed = run_jobs(plan_jobs(plan), plan.parallel, plan.out / "logs")
    summaries = {setting: write_report(plan, setting) for setting in plan.settings}
    write_index(plan.out if plan.split == "test" else plan.out / plan.split, summaries)
    if failed:
        raise DataError(f"ablate: {len(failed)} job(s) failed ({', '.join(failed[:4])}…); see {plan.out / 'logs'}; "
                        "run the same command again to retry them (finished jobs are kept)")
    return summaries


def write_index(out: Path, summaries: dict[str, Any]) -> None:
    """``out/ablation.json``: every setting's summary. A run of some settings (an opt-in one after
    the grid) replaces theirs and keeps the others'."""
    out.mkdir(parents=True, exist_ok=True)
    index = out / "ablation.json"
    kept = json.loads(index.read_text()) if index.is_file() else {}
    tmp = index.with_name(index.name + ".tmp")
    tmp.write_text(json.dumps({**kept, **summaries}, indent=2))
    tmp.replace(index)


def _check_configs(plan: AblationPlan) -> None:
    """Every stage config resolves before the first process starts (a bad key fails now, named)."""
    from agentgrpo.config import load_config
    from agentgrpo.eval.config import EvalConfig
    from agentgrpo.train.grpo_config import GRPOConfig
    from agentgrpo.train.sft import SFTConfig

    if plan.sft is None:
        load_config(SFTConfig, plan.overrides["sft"], defaults="sft.yaml")
    else:
        from agentgrpo.policy.preflight import check_policy_source

        check_policy_source(plan.sft, "--sft", "pass an SFT run's final/ directory (agentgrpo sft writes "
                                               "runs/sft/final)")
    load_config(EvalConfig, plan.eval_overrides, defaults="eval.yaml")
    for setting, extra in plan.settings.items():
        for experiment in plan.experiments_of(setting):
            load_config(GRPOConfig, [f"experiment={experiment}", *plan.overrides["grpo"], *extra],
                        defaults="grpo.yaml")


# ---------------------------------------------------------------------------------- command
def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("ablate", help="train and evaluate every variant × seeds, with CIs and diagnoses")
    parser.add_argument("--preset", help=f"a grid from configs/ablate: {', '.join(available_presets())}")
    parser.add_argument("--sft", help="one SFT checkpoint every run starts from (default: one trained per seed)")
    parser.add_argument("--out", default="runs/ablation", help="output directory (rerun to resume)")
    parser.add_argument("--experiments", help="comma-separated experiment names (default: the preset's, or all)")
    parser.add_argument("--seeds", help="comma-separated seeds (default: the preset's, or 0)")
    parser.add_argument("--settings", help="comma-separated settings of the preset to run "
                        "(default: all but its opt_in ones)")
    parser.add_argument("--parallel", type=int, help="jobs at once (default: the preset's, or 1)")
    parser.add_argument("--split", default="test", choices=SPLITS,
                        help="evaluate on the preset's test set, or on validation worlds (to choose settings)")
    parser.add_argument("overrides", nargs="*", metavar="[sft.|grpo.|eval.]key=value")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    def listed(text: str | None) -> list[str] | None:
        return [x for x in text.split(",") if x] if text else None

    seeds = listed(args.seeds)
    try:
        seed_values = [int(s) for s in seeds] if seeds else None
    except ValueError:
        raise ConfigError(f"--seeds {args.seeds!r} is invalid: comma-separated integers") from None
    plan = make_plan(args.out, args.preset, args.sft, seed_values, listed(args.experiments),
                     listed(args.settings), args.parallel, args.overrides, args.split)
    run_ablation(plan)
    for setting in plan.settings:
        print((plan.report_dir(setting) / "ablation.md").read_text())
    return 0
