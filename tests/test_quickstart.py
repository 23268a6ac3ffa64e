"""The main job end to end at toy size: every stage runs and writes the documented outputs."""
from __future__ import annotations

import json

import pytest
from helpers import SMALL_ENV_OVERRIDES

from agentgrpo.config import split_overrides
from agentgrpo.jobs.quickstart import STAGES, run_quickstart


def test_split_overrides():
    per = split_overrides(["seed=1", "grpo.trainer.steps=2", "eval.trials=1", "sft.data.demos_per_task=1"], STAGES)
    assert per == {"sft": ["seed=1", "data.demos_per_task=1"], "grpo": ["seed=1", "trainer.steps=2"],
                   "eval": ["seed=1", "trials=1"]}


SMALL = [
    *SMALL_ENV_OVERRIDES,
    "sft.env.train_worlds=2", "sft.trainer.epochs=1", "sft.progress=false", "grpo.env.train_worlds=2",
    "sft.trainer.copy_warmup_steps=2", "sft.trainer.copy_warmup_batch_size=2",
    "grpo.trainer.steps=1", "grpo.trainer.tasks_per_step=2", "grpo.trainer.group_size=2",
    "grpo.trainer.mini_batch_size=2", "grpo.trainer.micro_batch_size=2", "grpo.logging.progress=false",
    "grpo.rollout.max_turns=2", "grpo.rollout.max_new_tokens=8",
    "grpo.trainer.task_sampler=uniform", "grpo.trainer.dynamic_sampling=false", "grpo.trainer.val_tasks=2",
    "eval.tasks_per_family=0", "eval.tasks_per_split=6", "eval.rollout.max_turns=2",
    "eval.rollout.max_new_tokens=8",
]


def test_quickstart_writes_report_and_summary(tmp_path):
    summary = run_quickstart(tmp_path, "joint", SMALL)
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["checkpoints"] == summary["checkpoints"]
    assert saved["wall_seconds"] > 0
    for name in ("sft", "grpo"):
        m = saved["checkpoints"][name]
        # held-out worlds' tasks
        assert set(m["pass^1_by_split"]) == {"covered_seen", "uncovered_seen", "seen_families"}
        assert set(m) == {"pass^1", "pass^1_by_split", "family_pass^1", "tau_bench_pass^1", "generalization",
                          "write_pass^1", "no_write_pass^1", "cut_off", "do_nothing_floor", "error_rate",
                          "reasoning_depth_p50", "aborted", "ci"}
        assert m["aborted"] == 0 and 0.0 <= m["pass^1"] <= 1.0
        assert all(0.0 <= v <= 1.0 for v in m["pass^1_by_split"].values())
        assert m["ci"]["pass^1"]["low"] <= m["ci"]["pass^1"]["value"] <= m["ci"]["pass^1"]["high"]
    assert saved["checkpoints"]["sft"]["do_nothing_floor"] == saved["checkpoints"]["grpo"]["do_nothing_floor"]
    paired = saved["paired_grpo_minus_sft"]
    assert paired["tasks"] == 12 and paired["trials"] == 1  # 6 per split
    assert {"overall", "split/seen_families", "write", "family", "no_write"} <= set(paired["difference"])
    overall = paired["difference"]["overall"]
    grpo, sft = (json.loads((tmp_path / f"eval_{n}" / "eval.json").read_text())["metrics"] for n in ("grpo", "sft"))
    assert overall["value"] == pytest.approx(grpo["pass^k"]["1"] - sft["pass^k"]["1"])
    assert overall["low"] <= overall["value"] <= overall["high"]
    report = (tmp_path / "report.md").read_text()
    assert "| Overall pass^1 |" in report and "training_curves.png" in report
    assert "Δ vs SFT (paired, 95% CI)" in report and "| Do-nothing floor |" in report
    assert "GRPO − SFT, paired over the same 12 tasks × 1 trial(s)" in report and "write-task pass^1" in report
    assert "6 fresh tasks per split (covered_seen, uncovered_seen) of held-out test worlds" in report
    sft_agent = json.loads((tmp_path / "sft" / "final" / "agentgrpo.json").read_text())
    assert sft_agent["delexicalise"] is True  # the quickstart's policy reads ids as slots
    assert json.loads((tmp_path / "sft" / "sft_stats.json").read_text())["copy_warmup"]["task"] == "slot"
    assert (tmp_path / "training_curves.png").stat().st_size > 10_000
    curve = [json.loads(line) for line in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in curve if "val/pass1" in r] == [0, 1]  # the learning curve starts at the SFT policy
    assert (tmp_path / "eval_grpo" / "transcripts.jsonl").is_file()

    # killed while evaluating the GRPO checkpoint: --resume keeps both trainings and the finished episodes
    weights = {name: next((tmp_path / name / "final").glob("*.safetensors")) for name in ("sft", "grpo")}
    stamps = {name: path.stat().st_mtime_ns for name, path in weights.items()}
    log = tmp_path / "eval_grpo" / "transcripts.jsonl"
    episodes = log.read_text().splitlines(keepends=True)
    log.write_text("".join(episodes[:-4]))
    (tmp_path / "eval_grpo" / "eval.json").unlink()
    resumed = run_quickstart(tmp_path, "joint", SMALL, resume=True)
    assert {name: path.stat().st_mtime_ns for name, path in weights.items()} == stamps
    assert json.loads((tmp_path / "eval_grpo" / "eval.json").read_text())["resumed"] == len(episodes) - 4
    assert resumed["checkpoints"]["grpo"]["pass^1"] == summary["checkpoints"]["grpo"]["pass^1"]
    # killed while training GRPO (no checkpoint yet): it trains again, and its evaluation starts over
    (tmp_path / "grpo" / "final" / "agentgrpo.json").unlink()
    run_quickstart(tmp_path, "joint", SMALL, resume=True)
    assert weights["sft"].stat().st_mtime_ns == stamps["sft"] and weights["grpo"].stat().st_mtime_ns != stamps["grpo"]
    assert json.loads((tmp_path / "eval_grpo" / "eval.json").read_text())["resumed"] == 0
    assert json.loads((tmp_path / "eval_sft" / "eval.json").read_text())["resumed"] == 12
