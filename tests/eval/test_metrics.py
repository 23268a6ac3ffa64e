"""pass^k, pass@k, generalization and the evaluator's summary against hand-computed values."""
from __future__ import annotations

from math import comb

import pytest

from agentgrpo.eval import generalization, pass_at_k, pass_hat_k, percentile_50
from agentgrpo.eval.evaluator import EpisodeRecord, summarize


def test_pass_hat_k_by_hand():
    # task A: 3 of 4 succeed; task B: 1 of 4; task C: 4 of 4
    successes = [[True, True, False, True], [False, False, True, False], [True] * 4]
    # pass^1 = mean(3/4, 1/4, 1) = 2/3
    assert pass_hat_k(successes, 1) == pytest.approx(2 / 3)
    # pass^2 = mean(C(3,2)/C(4,2), 0, 1) = mean(3/6, 0, 1) = 0.5
    assert pass_hat_k(successes, 2) == pytest.approx(0.5)
    # pass^3 = mean(C(3,3)/C(4,3), 0, 1) = mean(1/4, 0, 1) = 5/12
    assert pass_hat_k(successes, 3) == pytest.approx(5 / 12)
    # pass^4 = mean(0, 0, 1) = 1/3
    assert pass_hat_k(successes, 4) == pytest.approx(1 / 3)


def test_pass_at_k_by_hand():
    successes = [[True, False, False, False], [False] * 4]
    # task A: 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5; task B: 0
    assert pass_at_k(successes, 2) == pytest.approx(0.25)
    assert pass_at_k(successes, 1) == pytest.approx(0.125)


def test_published_gpt4o_airline_numbers_are_consistent():
    """pass^k never increases with k, and pass^1 is the plain success rate."""
    successes = [[bool((t * 7 + i) % 3) for i in range(4)] for t in range(50)]
    values = [pass_hat_k(successes, k) for k in range(1, 5)]
    assert values == sorted(values, reverse=True)
    assert values[0] == pytest.approx(sum(map(sum, successes)) / 200)
    assert values[1] == pytest.approx(sum(comb(sum(s), 2) / 6 for s in successes) / 50)


def test_errors():
    with pytest.raises(ValueError, match="at least 3 trials"):
        pass_hat_k([[True, False]], 3)
    with pytest.raises(ValueError):
        pass_hat_k([[True]], 0)
    assert pass_hat_k([], 1) == 0.0


def test_generalization_uses_the_seed_weights_or_split_sizes():
    # the seed: (24·u + 10·v)/34
    assert generalization({"uncovered_seen": 0.1, "unseen": 0.2}) == pytest.approx((24 * 0.1 + 10 * 0.2) / 34)
    assert generalization({"uncovered_seen": 0.1, "unseen": 0.2}, {"uncovered_seen": 1, "unseen": 3}) == (
        pytest.approx((0.1 + 3 * 0.2) / 4)
    )
    assert generalization({"covered_seen": 1.0}) == 0.0


def test_percentile_50():
    assert percentile_50([5, 1, 3]) == 3
    assert percentile_50([1, 2, 3, 4]) == 2.5
    assert percentile_50([]) == 0.0


def test_summarize_by_hand():
    def rec(task, split, trial, ok, error=False, tokens=(10,)):
        return EpisodeRecord(task, split, "fam_" + task, trial, 1.0 if ok else 0.0, error, list(tokens), "user_stop")

    records = [
        rec("a", "covered_seen", 0, True), rec("a", "covered_seen", 1, True, tokens=(20, 30)),
        rec("b", "uncovered_seen", 0, False, error=True), rec("b", "uncovered_seen", 1, True),
        rec("c", "unseen", 0, False), rec("c", "unseen", 1, False, error=True, tokens=(40,)),
    ]
    metrics, per_task = summarize(records, trials=2, split_sizes={"covered_seen": 1, "uncovered_seen": 1, "unseen": 1})
    assert metrics["pass^1_by_split"] == {"covered_seen": 1.0, "uncovered_seen": 0.5, "unseen": 0.0,
                                          "seen_families": 0.75}
    assert metrics["pass^k"][1] == pytest.approx(0.5)
    assert metrics["pass^k"][2] == pytest.approx(1 / 3)  # only task a passes both
    assert metrics["pass@k"][2] == pytest.approx(2 / 3)
    assert metrics["generalization"] == pytest.approx(0.25)  # sizes 1 and 1
    assert metrics["error_rate"] == pytest.approx(2 / 6)
    assert metrics["reasoning_depth_p50"] == 10.0  # median of 10, 20, 30, 10, 10, 10, 40
