"""Report tables and plots."""
from __future__ import annotations

import json

from agentgrpo.report.plots import plot_training_curves
from agentgrpo.report.tables import comparison_table


def metrics(overall, train, error, depth):
    return {"pass^k": {1: overall}, "pass^1_by_split": {"train": train, "covered_seen": train, "unseen": 0.1},
            "generalization": overall / 2, "error_rate": error, "reasoning_depth_p50": depth}


def test_two_column_table_has_the_seed_delta_column():
    table = comparison_table({"Vanilla": metrics(0.175, 0.2, 0.2, 72), "Joint": metrics(0.240, 0.3, 0.14, 313)},
                             baseline="Vanilla")
    lines = table.splitlines()
    assert lines[0] == "| Metric | Vanilla | Joint | Δ vs Vanilla |"
    assert "| Overall pass^1 | 0.175 | 0.240 | +37% |" in lines
    assert "| Error Rate | 0.200 | 0.140 | -30% |" in lines
    assert "| Reasoning Depth (p50 tokens) | 72 | 313 | +335% |" in lines
    assert "| uncovered_seen pass^1 | – | – | – |" in lines


def test_many_column_table_puts_deltas_in_cells():
    table = comparison_table({"vanilla": metrics(0.2, 0.2, 0.2, 10), "lata": metrics(0.3, 0.2, 0.1, 20),
                              "joint": metrics(0.1, 0.2, 0.2, 10)}, baseline="vanilla")
    assert "| Overall pass^1 | 0.200 | 0.300 (+50%) | 0.100 (-50%) |" in table.splitlines()


def test_training_curves_png(tmp_path):
    for name, slope in (("a", 0.1), ("b", -0.05)):
        with open(tmp_path / f"{name}.jsonl", "w") as f:
            for step in range(1, 6):
                f.write(json.dumps({"step": step, "reward/outcome_mean": 0.3 + slope * step,
                                    "rollout/error_rate": 0.5}) + "\n")
    out = plot_training_curves({"a": tmp_path / "a.jsonl", "b": tmp_path / "b.jsonl"}, tmp_path / "c.png")
    assert out.stat().st_size > 10_000
