"""PRM-Lite's AUROC (success vs failure) on evaluation transcripts, rescored with the current rules.

    python benchmarks/prm_auroc.py runs/eval/transcripts.jsonl [more.jsonl ...] [--json OUT]

Reads the episodes an ``agentgrpo eval`` run wrote (``transcripts.jsonl`` with messages,
the default), scores each finished episode's chat transcript with ``PRMLite()`` (the
packaged YAML of the code on ``PYTHONPATH``) and prints the AUROC of the process score for
success (reward 1) against failure, with a 95% bootstrap interval over tasks
(``eval.stats.bootstrap_auroc``), the mean process score of each class and the rules that
fire most. To compare two versions of the rules, run it once per version on the same
transcripts (e.g. an older checkout's ``agentgrpo`` first on ``PYTHONPATH``).
"""
from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path

from agentgrpo.eval.stats import bootstrap_auroc
from agentgrpo.rewards.prm_lite import PRMLite


def read_episodes(path: Path) -> list[dict]:
    """The finished episodes of a transcripts.jsonl (plain JSON, so that an older checkout's
    rules can score a newer evaluation's log); a line cut short by a kill is skipped."""
    episodes = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not record.get("aborted") and record.get("messages"):
            episodes.append(record)
    return episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("transcripts", nargs="+", type=Path, help="transcripts.jsonl of an evaluation")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    prm = PRMLite()
    by_task: dict[str, list[tuple[float, bool]]] = defaultdict(list)
    fired: dict[bool, Counter[str]] = {True: Counter(), False: Counter()}
    for path in args.transcripts:
        for record in read_episodes(path):
            result = prm.score_messages(record["messages"])
            success = record["reward"] == 1.0
            by_task[f"{path}:{record['task_id']}"].append((result.process_score, success))
            fired[success].update(result.fired)
    scores = [[s for s, _ in episodes] for episodes in by_task.values()]
    labels = [[ok for _, ok in episodes] for episodes in by_task.values()]
    estimate = bootstrap_auroc(scores, labels)
    flat = [(s, ok) for episodes in by_task.values() for s, ok in episodes]
    mean = {ok: sum(s for s, y in flat if y == ok) / max(1, sum(1 for _, y in flat if y == ok))
            for ok in (True, False)}
    counts = {ok: sum(1 for _, y in flat if y == ok) for ok in (True, False)}
    print(f"PRM-Lite AUROC {estimate.value:.3f} [{estimate.low:.3f}, {estimate.high:.3f}] "
          f"({counts[True]} successes / {counts[False]} failures, {len(by_task)} tasks)")
    print(f"mean process score: success {mean[True]:+.4f}, failure {mean[False]:+.4f}")
    for ok in (True, False):
        top = ", ".join(f"{r} {n / max(1, counts[ok]):.2f}" for r, n in fired[ok].most_common(8))
        print(f"rules per {'successful' if ok else 'failed'} episode: {top}")
    print(f"BENCH prm_auroc {estimate.value:.4f} target info")
    if args.json:
        args.json.write_text(json.dumps({
            "auroc": estimate.value, "low": estimate.low, "high": estimate.high,
            "successes": counts[True], "failures": counts[False],
            "mean_success": mean[True], "mean_failure": mean[False]}, indent=2) + "\n")


if __name__ == "__main__":
    main()
