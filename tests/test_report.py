"""Report tables and plots."""
from __future__ import annotations

import json

from agentgrpo.report.plots import plot_training_curves
from agentgrpo.report.tables import comparison_table


def metrics(overall, train, error, depth):
    return {"pass^k": {1: overall}, "pass^1_by_split": {"seen_families": train, "covered_seen": train, "unseen": 0.1},
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


def test_a_panel_falls_back_to_its_second_metric():
    from agentgrpo.report.plots import _series

    records = [{"step": 1, "algo/lld_action_rate": 0.2}, {"step": 2, "algo/lld_action_rate": 0.1}]
    assert _series(records, "algo/lld_rate|algo/lld_action_rate") == [(1, 0.2), (2, 0.1)]
    assert _series([*records, {"step": 3, "algo/lld_rate": 0.5}], "algo/lld_rate|algo/lld_action_rate") == [(3, 0.5)]
    assert _series(records, "algo/lld_rate") == []


def with_ci(m, floor, write):
    """``metrics`` plus what an evaluation now carries: intervals, the floor, write-task pass^1."""
    m = dict(m, do_nothing_floor=floor, **{"write_pass^1": write})
    m["ci"] = {"pass^k": {"1": {"value": m["pass^k"][1], "low": 0.1, "high": 0.3, "n": 50}},
               "write_pass^1": {"value": write, "low": 0.05, "high": 0.25, "n": 29}}
    return m


def test_cells_carry_intervals_and_every_table_shows_the_floor_and_write_tasks():
    table = comparison_table({"SFT": with_ci(metrics(0.2, 0.3, 0.2, 10), 0.3, 0.15),
                              "GRPO": with_ci(metrics(0.25, 0.3, 0.2, 10), 0.3, 0.2)}, baseline="SFT")
    lines = table.splitlines()
    assert "| Overall pass^1 | 0.200 [0.100, 0.300] | 0.250 [0.100, 0.300] | +25% |" in lines
    assert "| Write-task pass^1 | 0.150 [0.050, 0.250] | 0.200 [0.050, 0.250] | +33% |" in lines
    assert "| Do-nothing floor | 0.300 | 0.300 | – |" in lines  # the tasks', not a change of policy


def test_paired_comparison_replaces_the_relative_change():
    from agentgrpo.eval.compare import Comparison
    from agentgrpo.eval.stats import Estimate

    paired = Comparison("GRPO", "SFT", tasks=50, trials=2, overall=Estimate(0.05, -0.02, 0.12, 50),
                        by_split={"seen_families": Estimate(0.01, -0.04, 0.06, 40)},
                        generalization=Estimate(0.06, 0.01, 0.11, 34))
    names = {"SFT": metrics(0.2, 0.3, 0.2, 10), "GRPO": metrics(0.25, 0.31, 0.2, 10)}
    lines = comparison_table(names, baseline="SFT", paired={"GRPO": paired}).splitlines()
    assert lines[0] == "| Metric | SFT | GRPO | Δ vs SFT (paired, 95% CI) |"
    assert "| Overall pass^1 | 0.200 | 0.250 | +0.050 [-0.020, +0.120] |" in lines
    assert "| pass^1, families trained on | 0.300 | 0.310 | +0.010 [-0.040, +0.060] |" in lines
    assert "| Generalization | 0.100 | 0.125 | +0.060 [+0.010, +0.110] |" in lines
    assert "| Error Rate | 0.200 | 0.200 | +0% |" in lines  # no paired figure: the relative change stays
    many = comparison_table({**names, "LATA": metrics(0.3, 0.3, 0.2, 10)}, baseline="SFT", paired={"GRPO": paired})
    assert "| Overall pass^1 | 0.200 | 0.250 (+0.050 [-0.020, +0.120]) | 0.300 (+50%) |" in many.splitlines()
