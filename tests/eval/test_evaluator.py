"""The evaluator end to end: the oracle on generated tasks, the written report files."""
from __future__ import annotations

import json

from agentgrpo.envs.airline.factory import EnvConfig, SplitConfig
from agentgrpo.eval.evaluator import EvalConfig, evaluate


def test_oracle_evaluation_writes_a_perfect_report(tmp_path):
    env = EnvConfig(n_tasks=30, splits=SplitConfig(covered_seen=6, uncovered_seen=8, unseen=4))
    config = EvalConfig(policy="oracle", env=env, trials=2, out_dir=str(tmp_path))
    report = evaluate(config)
    m = report.metrics
    assert m["episodes"] == (6 + 8 + 4) * 2
    assert m["pass^k"] == {1: 1.0, 2: 1.0}
    assert m["pass^1_by_split"] == {"covered_seen": 1.0, "uncovered_seen": 1.0, "unseen": 1.0, "seen_families": 1.0}
    assert m["generalization"] == 1.0
    assert m["error_rate"] == 0.0
    assert m["reasoning_depth_p50"] > 0
    saved = json.loads((tmp_path / "eval.json").read_text())
    assert saved["metrics"]["pass^1_by_split"]["unseen"] == 1.0
    assert "| pass^2 | 1.000 |" in (tmp_path / "eval.md").read_text()
    lines = (tmp_path / "transcripts.jsonl").read_text().splitlines()
    assert len(lines) == 36 and json.loads(lines[0])["messages"][0]["role"] == "system"
    assert report.summary()["pass^1_by_split"]["seen_families"] == 1.0
