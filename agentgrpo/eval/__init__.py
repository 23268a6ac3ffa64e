"""Evaluation: pass^k and the seed study's metrics (``metrics``), and the evaluator
that runs any policy on a task set (``evaluator``)."""
from agentgrpo.eval.metrics import generalization, pass_at_k, pass_hat_k
from agentgrpo.stats_util import percentile_50

__all__ = ["generalization", "pass_at_k", "pass_hat_k", "percentile_50"]
