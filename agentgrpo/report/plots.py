"""Training-curve plots from ``metrics.jsonl`` files (matplotlib, headless)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: CI machines and servers
import matplotlib.pyplot as plt  # noqa: E402

from agentgrpo import metric_names as metric  # noqa: E402
from agentgrpo.tracking import read_metrics  # noqa: E402

DEFAULT_PANELS = (
    (metric.REWARD_OUTCOME_MEAN, "outcome reward (train rollouts)"),
    # outcomes, not the total reward: PRM-Lite's process score almost never ties, so the
    # estimator's algo/saturated_group_frac reads ~0 for joint while most outcome groups are saturated
    (metric.REWARD_OUTCOME_SATURATED_GROUP_FRAC, "outcome-saturated groups (all fail / all succeed)"),
    (metric.ROLLOUT_INFORMATIVE_GROUPS, "informative groups trained on"),
    (metric.ALGO_SKIPPED_STEP_FRAC, "optimizer steps skipped (zero gradient)"),
    (metric.ROLLOUT_RESPONSE_TOKENS_MEAN, "response tokens per trajectory"),
    (metric.ROLLOUT_ERROR_RATE, "error rate"),
    (metric.LOSS_ENTROPY, "entropy"),
    # the after-step pass (trainer.lld_diagnostic), else the in-update share, logged by every update
    (f"{metric.ALGO_LLD_RATE}|{metric.ALGO_LLD_ACTION_RATE}", "LLD rate (after the step | within its updates)"),
)
"""(metric, title) per panel; ``a|b`` plots ``a`` where a run logged it, else ``b``."""
VALIDATION_PANEL = (metric.VAL_PASS1, "validation pass^1 (greedy; step 0 = the initial policy)")
"""The learning curve of a run that validates (``trainer.val_every``)."""


def plot_training_curves(
    runs: Mapping[str, str | Path],
    out_png: str | Path,
    panels: Sequence[tuple[str, str]] = DEFAULT_PANELS,
    smooth: int = 1,
) -> Path:
    """One panel per metric, one line per run (``runs``: label → metrics.jsonl path)."""
    records = {label: read_metrics(path) for label, path in runs.items()}
    columns = 3
    rows = -(-len(panels) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.0 * rows), squeeze=False)
    for ax, (key, title) in zip(axes.flat, panels):
        for label, recs in records.items():
            points = _series(recs, key)
            if points:
                steps, values = zip(*points)
                ax.plot(steps, _moving_average(values, smooth), label=label, linewidth=1.5)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="upper center", ncol=min(len(labels), 7), fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return save_figure(fig, out_png)


def save_figure(fig: plt.Figure, out_png: str | Path) -> Path:
    """Write ``fig`` as a PNG (parent directories made) and free it."""
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _series(records: list[dict], key: str) -> list[tuple[int, float]]:
    """(step, value) of the first of ``key``'s ``|``-separated metrics the run logged."""
    for name in key.split("|"):
        points = [(r["step"], r[name]) for r in records if r.get(name) is not None]
        if points:
            return points
    return []


def _moving_average(values: Sequence[float], window: int) -> list[float]:
    if window <= 1:
        return list(values)
    out = []
    for i in range(len(values)):
        chunk = values[max(0, i - window + 1) : i + 1]
        out.append(sum(chunk) / len(chunk))
    return out
