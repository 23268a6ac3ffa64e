"""agentgrpo ablate: the job graph (skip, resume, failures), the summary's arithmetic on
hand-made evaluations, and a small real grid run end to end."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agentgrpo.config import ConfigError
from agentgrpo.eval.grid import seed_aware_delta
from agentgrpo.eval.stats import holm_adjust, mean_over_seeds
from agentgrpo.jobs.ablate import (
    AblationPlan,
    _check_configs,
    make_plan,
    plan_jobs,
    write_index,
)
from agentgrpo.jobs.ablate_grid import Job, run_jobs, threads_per_job
from agentgrpo.jobs.ablate_summary import summarize_setting
from agentgrpo.report.ablation import ablation_markdown


def touch_job(name: str, target: Path, needs=(), code: str = "") -> Job:
    """A real subprocess that (optionally fails, else) writes its done file."""
    script = code or f"import pathlib; pathlib.Path({str(target)!r}).write_text('done')"
    return Job(name, [sys.executable, "-c", script], target, list(needs))


def test_run_jobs_orders_by_needs_skips_done_and_stops_behind_failures(tmp_path):
    order = tmp_path / "order.txt"

    def logged(name: str) -> str:
        target = tmp_path / f"{name}.done"
        return (f"import pathlib; open({str(order)!r}, 'a').write({name!r} + '\\n'); "
                f"pathlib.Path({str(target)!r}).write_text('done')")

    already = tmp_path / "old.done"
    already.write_text("done")
    jobs = [
        Job("old", [sys.executable, "-c", "raise SystemExit(3)"], already),  # done: never run
        Job("a", [sys.executable, "-c", logged("a")], tmp_path / "a.done", ["old"]),
        Job("b", [sys.executable, "-c", logged("b")], tmp_path / "b.done", ["a"]),
        touch_job("bad", tmp_path / "bad.done", code="raise SystemExit(1)"),
        touch_job("after_bad", tmp_path / "after_bad.done", ["bad"]),
    ]
    messages: list[str] = []
    failed = run_jobs(jobs, parallel=2, log_dir=tmp_path / "logs", report=messages.append)
    assert sorted(failed) == ["after_bad", "bad"]
    assert order.read_text().split() == ["a", "b"]  # b waited for a
    assert not (tmp_path / "after_bad.done").exists()
    assert (tmp_path / "logs" / "bad.log").read_text().startswith("$ ")
    assert messages[0] == "ablate: 1 of 5 jobs already done, 4 to run, 2 at a time"
    # a second run starts only what is not done
    messages.clear()
    jobs[3] = touch_job("bad", tmp_path / "bad.done")
    assert run_jobs(jobs, parallel=1, log_dir=tmp_path / "logs", report=messages.append) == []
    assert messages[0] == "ablate: 3 of 5 jobs already done, 2 to run, 1 at a time"


def test_ready_jobs_that_others_wait_for_start_first(tmp_path):
    # listed as the grid lists them (a run, then its evaluation): with one slot the second run
    # starts before the first evaluation, so the grid ends on evaluations, not on a lone chain
    order = tmp_path / "order.txt"

    def logged(name: str, needs=()) -> Job:
        target = tmp_path / f"{name.replace('/', '_')}.done"
        script = (f"import pathlib; open({str(order)!r}, 'a').write({name!r} + '\\n'); "
                  f"pathlib.Path({str(target)!r}).write_text('done')")
        return Job(name, [sys.executable, "-c", script], target, list(needs))

    jobs = [logged("run1"), logged("run1/eval", ["run1"]), logged("run2"), logged("run2/eval", ["run2"])]
    assert run_jobs(jobs, parallel=1, log_dir=tmp_path / "logs", report=lambda _: None) == []
    assert order.read_text().split() == ["run1", "run2", "run1/eval", "run2/eval"]


def test_a_job_that_runs_alone_gets_every_core_and_parallel_jobs_share_them():
    assert threads_per_job(cores=2, parallel=2, running=1) == 2  # the shared SFT, nothing else ready
    assert threads_per_job(cores=2, parallel=2, running=2) == 1
    assert threads_per_job(cores=16, parallel=4, running=3) == 5
    assert threads_per_job(cores=16, parallel=4, running=9) == 4  # never more jobs than slots
    assert threads_per_job(cores=1, parallel=2, running=2) == 1


def test_a_job_that_exits_0_without_its_output_counts_as_failed(tmp_path):
    jobs = [Job("silent", [sys.executable, "-c", "pass"], tmp_path / "never")]
    assert run_jobs(jobs, 1, tmp_path / "logs", report=lambda _: None) == ["silent"]


def test_plan_resumes_partial_runs_and_evaluations(tmp_path):
    plan = make_plan(tmp_path, seeds=[0, 1], experiments=["vanilla", "lata"],
                     overrides=["grpo.trainer.steps=3", "eval.trials=1", "sft.trainer.epochs=1"])
    (plan.run_dir("base", 1, "lata") / "checkpoints" / "step_000002").mkdir(parents=True)  # the trainer's layout
    (tmp_path / "sft" / "seed1" / "checkpoints" / "step_000050").mkdir(parents=True)  # a killed SFT
    (plan.run_dir("base", 0, "lata") / "step_000002").mkdir(parents=True)  # not a checkpoint: no resume
    (plan.run_dir("base", 0, "vanilla") / "eval").mkdir(parents=True)
    (plan.run_dir("base", 0, "vanilla") / "eval" / "transcripts.jsonl").write_text("")
    jobs = {job.name: job for job in plan_jobs(plan)}
    assert set(jobs) == {"sft/seed0", "sft/seed1", "sft/seed0/eval", "sft/seed1/eval",
                         *(f"base/seed{s}/{e}{suffix}" for s in (0, 1) for e in ("vanilla", "lata")
                           for suffix in ("", "/eval"))}
    assert "--resume" in jobs["base/seed1/lata"].command and "--resume" not in jobs["base/seed0/lata"].command
    assert "--resume" in jobs["base/seed0/vanilla/eval"].command
    assert "--resume" in jobs["sft/seed1"].command and "--resume" not in jobs["sft/seed0"].command
    assert jobs["base/seed1/lata"].needs == ["sft/seed1"]
    assert f"policy.init={tmp_path / 'sft' / 'seed1' / 'final'}" in jobs["base/seed1/lata"].command
    # every GRPO run of the grid shares its first rollouts with the other variants of its seed
    shared = f"trainer.shared_rollouts_dir={tmp_path / 'shared_rollouts'}"
    assert all(shared in job.command for name, job in jobs.items()
               if name.startswith("base/") and not name.endswith("/eval"))
    assert "trainer.epochs=1" in jobs["sft/seed0"].command and "trials=1" in jobs["sft/seed0/eval"].command


def test_presets_resolve_and_bad_choices_fail_naming_them(tmp_path):
    for preset in ("cpu-quick", "cpu"):
        plan = make_plan(tmp_path, preset)
        assert len(plan.experiments) == 7 and plan.seeds[:3] == [0, 1, 2]
        _check_configs(plan)  # every stage's config of every setting and experiment resolves
    with pytest.raises(ConfigError, match="--preset 'nope'"):
        make_plan(tmp_path, "nope")
    with pytest.raises(ConfigError, match="experiments"):
        make_plan(tmp_path, experiments=["vanilla", "bogus"])
    with pytest.raises(ConfigError, match="--settings"):
        make_plan(tmp_path, "cpu", settings=["hot"])


def test_an_opt_in_setting_runs_only_when_named(tmp_path):
    assert list(make_plan(tmp_path, "cpu").settings) == ["base"]  # the 7 x 7 grid alone
    assert list(make_plan(tmp_path, "cpu", settings=["stress"]).settings) == ["stress"]
    assert list(make_plan(tmp_path, "cpu", settings=["base", "stress"]).settings) == ["base", "stress"]
    only_stress, typo = tmp_path / "only-stress.yaml", tmp_path / "typo.yaml"  # presets of one's own
    only_stress.write_text("settings:\n  stress: {overrides: [trainer.lr=1.0e-3], opt_in: true}\n")
    typo.write_text("settings:\n  stress: {overides: []}\n")
    with pytest.raises(ConfigError, match="every setting is opt_in"):
        make_plan(tmp_path, str(only_stress))
    assert make_plan(tmp_path, str(only_stress), settings=["stress"]).settings == {"stress": ["trainer.lr=1.0e-3"]}
    with pytest.raises(ConfigError, match=r"settings.stress has unknown key\(s\) \['overides'\]"):
        make_plan(tmp_path, str(typo))
    with pytest.raises(ConfigError, match="or a preset file"):
        make_plan(tmp_path, str(tmp_path / "missing.yaml"))


def test_a_run_of_other_settings_keeps_the_index_of_the_earlier_ones(tmp_path):
    write_index(tmp_path, {"base": {"rows": [1]}, "stress": {"rows": [2]}})
    write_index(tmp_path, {"stress": {"rows": [3]}})
    assert json.loads((tmp_path / "ablation.json").read_text()) == {"base": {"rows": [1]}, "stress": {"rows": [3]}}
    assert [p.name for p in tmp_path.iterdir()] == ["ablation.json"]  # written whole, no temporary left


def test_a_setting_can_run_a_subset_of_the_experiments_and_seeds(tmp_path):
    plan = make_plan(tmp_path, "cpu", settings=["base", "stress"])
    assert plan.settings["stress"] == ["trainer.lr=2.0e-3", "trainer.lld_diagnostic=true", "trainer.steps=6"]
    assert plan.experiments_of("stress") == ["vanilla", "joint", "llds", "joint_llds"]  # the grid's order
    assert plan.experiments_of("base") == plan.experiments
    assert plan.seeds_of("stress") == [0] and plan.seeds_of("base") == list(range(7))
    names = [job.name for job in plan_jobs(plan) if job.name.startswith("stress/") and not job.name.endswith("/eval")]
    assert sorted(names) == sorted(f"stress/seed0/{e}" for e in ("vanilla", "llds", "joint", "joint_llds"))
    # the command line narrows further
    narrowed = make_plan(tmp_path, "cpu", experiments=["lata", "llds"], settings=["base", "stress"])
    assert narrowed.experiments_of("stress") == ["llds"] and narrowed.experiments_of("base") == ["lata", "llds"]
    # --seeds without the setting's own: the setting keeps the grid's first seed
    assert make_plan(tmp_path, "cpu", seeds=[1, 2], settings=["stress"]).seeds_of("stress") == [1]
    with pytest.raises(ConfigError, match="settings.stress.experiments"):
        AblationPlan(tmp_path, settings={"stress": []}, setting_experiments={"stress": ["bogus"]})
    with pytest.raises(ConfigError, match="settings.stress.seeds"):
        AblationPlan(tmp_path, seeds=[0, 1], settings={"stress": []}, setting_seeds={"stress": [5]})


def shared_sft_preset(tmp_path: Path) -> str:
    """The cpu preset with one SFT checkpoint shared by every seed (the grid's cost-saving option)."""
    import yaml

    data = yaml.safe_load((Path(__file__).parents[1] / "configs" / "ablate" / "cpu.yaml").read_text())
    data |= {"shared_sft": True, "seeds": [0, 1, 2]}
    path = tmp_path / "shared.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_the_cpu_preset_trains_an_sft_per_seed_and_tests_on_a_fresh_family_balanced_set(tmp_path):
    plan = make_plan(tmp_path / "grid", "cpu")
    assert not plan.shared_sft and plan.sft_seeds == plan.seeds == list(range(7))
    jobs = {job.name: job for job in plan_jobs(plan)}
    for seed in plan.seeds:
        assert jobs[f"base/seed{seed}/joint"].needs == [f"sft/seed{seed}"]
    held_out = {"splits=[covered_seen,uncovered_seen]", "tasks_per_family=48", "heldout_seed=4", "trials=1"}
    assert held_out <= set(jobs["sft/seed0/eval"].command)
    # --split validation: the same grid on validation worlds, evaluations and reports apart
    val = make_plan(tmp_path / "grid", "cpu", split="validation")
    val_jobs = {job.name: job for job in plan_jobs(val)}
    assert "sft/seed0/eval-validation" in val_jobs and val_jobs["sft/seed0/eval-validation"].command[-2] == \
        "splits=[validation]"
    assert val.report_dir("base") == tmp_path / "grid" / "base" / "validation"
    assert val_jobs["base/seed1/joint"].done_file == jobs["base/seed1/joint"].done_file  # the same GRPO runs
    with pytest.raises(ConfigError, match="--split"):
        AblationPlan(tmp_path, split="train")


def test_a_shared_sft_is_trained_once_and_starts_every_seed(tmp_path):
    preset = shared_sft_preset(tmp_path)
    plan = make_plan(tmp_path, preset)
    assert plan.shared_sft and plan.sft_seeds == [0]
    jobs = {job.name: job for job in plan_jobs(plan)}
    assert {n for n in jobs if n.startswith("sft/")} == {"sft/seed0", "sft/seed0/eval"}
    for seed in (0, 1, 2):
        assert jobs[f"base/seed{seed}/joint"].needs == ["sft/seed0"]
        assert f"policy.init={tmp_path / 'sft' / 'seed0' / 'final'}" in jobs[f"base/seed{seed}/joint"].command
        assert plan.sft_eval_dir(seed) == tmp_path / "sft" / "seed0" / "eval"
    assert "env.delexicalise=true" in jobs["sft/seed0"].command
    # resuming part of the grid with --seeds reuses the grid's SFT: it is never trained again
    narrowed = make_plan(tmp_path, preset, seeds=[1, 2], experiments=["joint"])
    assert narrowed.sft_seeds == [0] and narrowed.sft_dir(2) == tmp_path / "sft" / "seed0" / "final"
    assert {n for n in (job.name for job in plan_jobs(narrowed)) if n.startswith("sft/")} == {"sft/seed0",
                                                                                           "sft/seed0/eval"}
    own = make_plan(tmp_path, seeds=[0, 1])  # without the preset: one SFT per seed
    assert own.sft_seeds == [0, 1] and own.sft_dir(1) == tmp_path / "sft" / "seed1" / "final"
    # the table's SFT row is one checkpoint, and every seed's runs pair with it
    plan = make_plan(tmp_path, preset, experiments=["vanilla"])
    for out, solved in ((plan.sft_eval_dir(0), 1), *((plan.run_dir("base", s, "vanilla") / "eval", 2) for s in (0, 1))):
        out.mkdir(parents=True)
        (out / "eval.json").write_text(json.dumps(fake_eval({t: float(i < solved) for i, t in enumerate(SPLITS)},
                                                            SPLITS)))
    rows = summarize_setting(plan, "base")["rows"]
    assert rows["SFT"]["seeds_done"] == [0] and rows["vanilla"]["seeds_done"] == [0, 1]
    assert rows["vanilla"]["vs_sft"]["seeds"] == [0, 1] and rows["vanilla"]["vs_sft"]["pairs"] == {0: 0, 1: 0}
    assert overall(rows["vanilla"]["vs_sft"])["value"] == pytest.approx(0.25)


def overall(comparison: dict, figure: str = "overall") -> dict:
    return comparison["figures"][figure]["estimate"]


def fake_eval(pass1_by_task: dict[str, float], split_of: dict[str, str], trials: int = 2,
              do_nothing: dict[str, float] | None = None, **metrics) -> dict:
    """An eval.json with the fields ablate reads: per-task successes (trials each), the
    do-nothing reward when given, and headline metrics."""
    rows = []
    for task, value in pass1_by_task.items():
        wins = round(value * trials)
        rows.append({"task_id": task, "split": split_of[task], "family": split_of[task],
                     "successes": [True] * wins + [False] * (trials - wins),
                     "trials": list(range(trials)), "user_seeds": [100 + i for i in range(trials)]})
        if do_nothing is not None:
            rows[-1]["do_nothing"] = do_nothing[task]
    overall = sum(pass1_by_task.values()) / len(pass1_by_task)
    base = {"pass^k": {"1": overall}, "generalization": overall, "error_rate": 0.1, "reasoning_depth_p50": 20.0}
    sizes = {}
    for split in split_of.values():
        sizes[split] = sizes.get(split, 0) + 1
    return {"trials": trials, "seed": 0, "split_sizes": sizes, "per_task": rows, "metrics": {**base, **metrics}}


SPLITS = {"t1": "uncovered_seen", "t2": "uncovered_seen", "t3": "unseen", "t4": "unseen"}


def test_seed_aware_delta_pairs_seeds_and_keeps_their_spread():
    a = {0: fake_eval({"t1": 1, "t2": 1, "t3": 0.5, "t4": 0}, SPLITS),
         1: fake_eval({"t1": 1, "t2": 0, "t3": 1, "t4": 0}, SPLITS)}
    b = {0: fake_eval({"t1": 0, "t2": 1, "t3": 0.5, "t4": 0}, SPLITS),
         1: fake_eval({"t1": 0, "t2": 0, "t3": 0, "t4": 0}, SPLITS),
         2: fake_eval({"t1": 0, "t2": 0, "t3": 0, "t4": 0}, SPLITS)}  # seed 2 has no partner: left out
    delta = seed_aware_delta(a, b)
    # seed 0: t1 +1 → 0.25; seed 1: t1 +1, t3 +1 → 0.5; the mean 0.375
    assert delta["seeds"] == [0, 1] and delta["tasks"] == 4
    assert overall(delta)["value"] == pytest.approx(0.375)
    assert delta["figures"]["overall"]["per_seed"] == pytest.approx({0: 0.25, 1: 0.5})
    # two families (the splits here) of two tasks each: family-balanced is the same mean
    assert overall(delta, "family")["value"] == pytest.approx(0.375)
    assert "write" not in delta["figures"]  # no task facts in these evaluations
    assert 0 < delta["p"] <= 1 and delta["mde"] > 0
    # against another seed's baseline (one shared SFT): every seed pairs with seed 2's
    shared = seed_aware_delta(a, b, {0: 2, 1: 2})
    assert shared["pairs"] == {0: 2, 1: 2} and overall(shared)["value"] == pytest.approx((0.625 + 0.5) / 2)


def test_every_row_is_compared_with_the_do_nothing_reward_task_by_task(tmp_path):
    plan = make_plan(tmp_path, seeds=[0, 1], experiments=["vanilla"])
    floor = {"t1": 1.0, "t2": 1.0, "t3": 0.0, "t4": 0.0}  # t1, t2 need no change
    scores = {("sft", 0): {"t1": 0, "t2": 1, "t3": 1, "t4": 0},  # writes well but breaks t1
              ("vanilla", 0): {"t1": 1, "t2": 1, "t3": 0, "t4": 0},  # ends at once: exactly the floor
              ("vanilla", 1): {"t1": 1, "t2": 0, "t3": 1, "t4": 1}}
    for (name, seed), per_task in scores.items():
        out = plan.sft_eval_dir(seed) if name == "sft" else plan.run_dir("base", seed, name) / "eval"
        out.mkdir(parents=True)
        (out / "eval.json").write_text(json.dumps(fake_eval(per_task, SPLITS, do_nothing=floor)))
    summary = summarize_setting(plan, "base")
    rows = summary["rows"]
    # SFT: (0 − 1) + (1 − 1) + (1 − 0) + (0 − 0) over 4 tasks
    assert overall(rows["SFT"]["vs_floor"])["value"] == pytest.approx(0.0)
    # vanilla: seed 0 ends at once (0), seed 1 loses t2 and solves t3, t4 (+0.25) → 0.125
    assert overall(rows["vanilla"]["vs_floor"])["value"] == pytest.approx(0.125)
    assert rows["vanilla"]["vs_floor"]["seeds"] == [0, 1] and overall(rows["vanilla"]["vs_floor"])["n"] == 4
    assert rows["vanilla"]["vs_floor"]["figures"]["overall"]["per_seed"] == pytest.approx({0: 0.0, 1: 0.25})
    table = ablation_markdown(summary)
    vanilla_line = next(line for line in table.splitlines() if line.startswith("| vanilla | do-nothing floor |"))
    assert "+0.125 [" in vanilla_line and "+0.000, +0.250" in vanilla_line
    # evaluations without the do-nothing reward (older eval.json) leave the column empty
    (plan.sft_eval_dir(0) / "eval.json").write_text(json.dumps(fake_eval(scores[("sft", 0)], SPLITS)))
    assert "vs_floor" not in summarize_setting(plan, "base")["rows"]["SFT"]


def test_summary_rows_are_means_over_seeds_with_deltas_and_findings(tmp_path):
    plan = make_plan(tmp_path, seeds=[0, 1], experiments=["vanilla", "lata"])
    scores = {("sft", 0): 0.25, ("sft", 1): 0.25, ("vanilla", 0): 0.5, ("vanilla", 1): 0.25,
              ("lata", 0): 0.75, ("lata", 1): 0.5}
    for (name, seed), value in scores.items():
        out = plan.sft_eval_dir(seed) if name == "sft" else plan.run_dir("base", seed, name) / "eval"
        out.mkdir(parents=True)
        per_task = {t: (1.0 if i < value * 4 else 0.0) for i, t in enumerate(SPLITS)}
        (out / "eval.json").write_text(json.dumps(fake_eval(per_task, SPLITS)))
    summary = summarize_setting(plan, "base")
    rows = summary["rows"]
    assert list(rows) == ["SFT", "vanilla", "lata"]
    expected = mean_over_seeds([0.75, 0.5]).to_dict()
    assert rows["lata"]["mean"]["pass^1"] == pytest.approx(expected)
    # lata − vanilla per task: seed 0 lata solves t1..t3, vanilla t1,t2; seed 1 lata t1,t2, vanilla t1
    assert overall(rows["lata"]["vs_vanilla"])["value"] == pytest.approx(0.25)
    assert overall(rows["vanilla"]["vs_sft"])["value"] == pytest.approx((0.25 + 0.0) / 2)
    assert "vs_vanilla" not in rows["vanilla"]
    assert rows["lata"]["diagnose"] == {}  # no metrics.jsonl: nothing to diagnose
    # no primary registered: Holm over every comparison of the table
    family = {f"{name}/{key}": rows[name][key]["p"] for name, key in
              (("vanilla", "vs_sft"), ("lata", "vs_sft"), ("lata", "vs_vanilla"))}
    adjusted = {f"{name}/{key}": rows[name][key]["p_adjusted"] for name, key in
                (("vanilla", "vs_sft"), ("lata", "vs_sft"), ("lata", "vs_vanilla"))}
    assert adjusted == pytest.approx(holm_adjust(family))


def test_the_pre_registered_primary_comparison_gates_the_rest(tmp_path):
    from agentgrpo.report.ablation import ablation_markdown

    tasks = {f"t{i}": ("uncovered_seen" if i % 2 else "unseen") for i in range(16)}
    plan = make_plan(tmp_path, seeds=[0], experiments=["vanilla", "lata", "joint"])
    plan.primary = "joint"
    for name, solved in (("sft", 0), ("vanilla", 2), ("lata", 3), ("joint", 16)):
        out = plan.sft_eval_dir(0) if name == "sft" else plan.run_dir("base", 0, name) / "eval"
        out.mkdir(parents=True)
        per_task = {t: (1.0 if i < solved else 0.0) for i, t in enumerate(tasks)}
        (out / "eval.json").write_text(json.dumps(fake_eval(per_task, tasks)))
    summary = summarize_setting(plan, "base")
    rows = summary["rows"]
    primary = rows["joint"]["vs_sft"]
    assert summary["primary"] == "joint" and primary["primary"] is True
    assert primary["p_adjusted"] == primary["p"] < 0.001 and primary["star"]  # 16 of 16 tasks: +1
    others = {"vanilla/vs_sft": rows["vanilla"]["vs_sft"]["p"], "lata/vs_sft": rows["lata"]["vs_sft"]["p"],
              "lata/vs_vanilla": rows["lata"]["vs_vanilla"]["p"], "joint/vs_vanilla": rows["joint"]["vs_vanilla"]["p"],
              "joint/vs_lata": rows["joint"]["vs_lata"]["p"]}  # H5: Joint − its better single component
    expected = {k: max(v, primary["p"]) for k, v in holm_adjust(others).items()}
    assert {k: rows[k.split("/")[0]][k.split("/")[1]]["p_adjusted"] for k in others} == pytest.approx(expected)
    table = ablation_markdown(summary)
    assert "pre-registered primary (joint − SFT) is tested first" in table
    assert "(primary " in next(line for line in table.splitlines() if line.startswith("| joint | SFT |"))
    assert "(adjusted " in next(line for line in table.splitlines() if line.startswith("| lata | SFT |"))
    # a primary that fails shuts the gate: nothing else is starred
    (plan.run_dir("base", 0, "joint") / "eval" / "eval.json").write_text(json.dumps(fake_eval(dict.fromkeys(tasks, 0.0),
                                                                                         tasks)))
    rows = summarize_setting(plan, "base")["rows"]
    assert not rows["joint"]["vs_sft"]["star"] and rows["lata"]["vs_sft"]["p_adjusted"] == 1.0
    with pytest.raises(ConfigError, match="primary='bogus'"):
        AblationPlan(tmp_path, experiments=["vanilla"], primary="bogus")


def test_the_table_counts_the_seeds_diagnose_calls_collapsed(tmp_path):
    from agentgrpo.report.ablation import ablation_markdown

    plan = make_plan(tmp_path, seeds=[0, 1, 2], experiments=["vanilla"])
    for seed in (0, 1):
        run = plan.run_dir("base", seed, "vanilla")
        run.mkdir(parents=True)
        # seed 0: malformed turns jump from 0.1 to 0.6 at step 4 (a format collapse); seed 1 stays at 0.1
        rates = [0.1] * 3 + ([0.6] * 5 if seed == 0 else [0.1] * 5)
        (run / "metrics.jsonl").write_text("".join(
            json.dumps({"step": i + 1, "rollout/malformed_turn_rate": r}) + "\n" for i, r in enumerate(rates)))
    (plan.run_dir("base", 2, "vanilla")).mkdir(parents=True)
    (plan.run_dir("base", 2, "vanilla") / "metrics.jsonl").write_text("")  # a run started, no step yet
    summary = summarize_setting(plan, "base")
    findings = summary["rows"]["vanilla"]["diagnose"]
    assert set(findings) == {0, 1}
    assert [(f["check"], f["step"], f["collapse"]) for f in findings[0]] == [("format_collapse", 4, True)]
    assert findings[1] == []
    table = ablation_markdown(summary)
    assert "| collapsed | diagnose |" in table
    vanilla = next(line for line in table.splitlines() if line.startswith("| vanilla |"))
    assert vanilla.endswith("| 1/2 | format_collapse (1/2) |")
    assert "vanilla seed 0, step 4: **format_collapse** (collapse):" in table


@pytest.mark.slow
def test_a_small_grid_runs_end_to_end_and_a_rerun_starts_nothing(tmp_path, tiny_policy_dir):
    from agentgrpo.jobs.ablate import run_ablation

    overrides = ["grpo.trainer.steps=1", "grpo.trainer.tasks_per_step=2", "grpo.trainer.group_size=2",
                 "grpo.trainer.mini_batch_size=4", "grpo.trainer.micro_batch_size=4",
                 "grpo.algo.kl_coef=0", "grpo.rollout.max_turns=2", "grpo.rollout.max_new_tokens=12",
                 "grpo.env.n_tasks=12", "grpo.env.splits.covered_seen=4", "grpo.env.splits.uncovered_seen=4",
                 "grpo.env.splits.unseen=4", "eval.trials=1", "eval.rollout.max_turns=2",
                 "eval.rollout.max_new_tokens=12", "eval.env.n_tasks=12", "eval.env.splits.covered_seen=4",
                 "eval.env.splits.uncovered_seen=4", "eval.env.splits.unseen=4"]
    plan = make_plan(tmp_path / "grid", sft=tiny_policy_dir, seeds=[0, 1], experiments=["vanilla", "lata"],
                     parallel=2, overrides=overrides)
    summaries = run_ablation(plan)
    rows = summaries["base"]["rows"]
    assert rows["lata"]["seeds_done"] == [0, 1] and "vs_vanilla" in rows["lata"]
    report = (tmp_path / "grid" / "base" / "ablation.md").read_text()
    assert "| lata | 2 |" in report and (tmp_path / "grid" / "base" / "comparison.png").is_file()
    log = (tmp_path / "grid" / "logs" / "base__seed1__lata.log").read_text()
    assert "experiment=lata" in log
    messages: list[str] = []
    assert run_jobs(plan_jobs(plan), 2, plan.out / "logs", report=messages.append) == []
    assert messages == ["ablate: 9 of 9 jobs already done, 0 to run, 2 at a time"]


def test_the_five_hypotheses_get_verdicts_with_intervals(tmp_path):
    tasks = {f"t{i}": ("uncovered_seen" if i % 2 else "covered_seen") for i in range(24)}
    experiments = ["vanilla", "turn_discount", "lata", "prm_lite", "joint"]
    plan = make_plan(tmp_path, seeds=[0, 1, 2], experiments=experiments)
    plan.primary = "joint"
    solved = {"sft": 4, "vanilla": 8, "turn_discount": 6, "lata": 12, "prm_lite": 10, "joint": 24}
    depth = {"vanilla": 20.0, "turn_discount": 30.0}  # H1: Turn-Discount's turns are longer, every seed
    for name, n in solved.items():
        for seed in (0, 1, 2):
            out = plan.sft_eval_dir(seed) if name == "sft" else plan.run_dir("base", seed, name) / "eval"
            out.mkdir(parents=True)
            per_task = {t: (1.0 if i < n else 0.0) for i, t in enumerate(tasks)}
            extra = {"reasoning_depth_p50": depth.get(name, 25.0) + seed, "family_pass^1": n / 24}
            (out / "eval.json").write_text(json.dumps(fake_eval(per_task, tasks, trials=1, **extra)))
            if name != "sft":  # H2: Joint's groups never all agree, vanilla's half the time
                (out.parent / "metrics.jsonl").write_text("".join(
                    json.dumps({"step": s, "algo/saturated_group_frac": 0.0 if name == "joint" else 0.5}) + "\n"
                    for s in (1, 2)))
    summary = summarize_setting(plan, "base")
    found = summary["hypotheses"]
    assert set(found) == {"H1", "H2", "H3", "H4", "H5"}
    assert found["H1"]["estimate"]["value"] == pytest.approx(10.0) and found["H1"]["verdict"] == "supported"
    assert found["H1"]["per_seed"] == {0: 10.0, 1: 10.0, 2: 10.0}
    assert found["H2"]["estimate"]["value"] == pytest.approx(-0.5) and found["H2"]["verdict"] == "supported"
    # H4: LATA − Turn-Discount = 6/24 on every seed, a row of the table (adjusted with it)
    assert found["H4"]["comparison"] == "lata/vs_turn_discount"
    assert found["H4"]["estimate"]["value"] == pytest.approx(0.25)
    # H5: the better single component is LATA; Joint − LATA = 12/24
    assert found["H5"]["comparison"] == "joint/vs_lata" and found["H5"]["estimate"]["value"] == pytest.approx(0.5)
    assert "vs_turn_discount" in summary["rows"]["lata"] and "p_adjusted" in summary["rows"]["joint"]["vs_lata"]
    table = ablation_markdown(summary)
    assert "## The seed study's hypotheses" in table and "| H5 | Joint beats the best single component" in table
    assert "| lata | turn_discount |" in table
