"""``agentgrpo diagnose RUN_DIR``: signs of GRPO collapse in a training run's ``metrics.jsonl``.

Pure analysis of the per-step metrics the trainer logs (no torch, so it answers at once,
also on a run still in progress). Each check reports the step its signature began and
the evidence; docs/diagnostics.md says what each means and what to do about it:

* ``group_saturation``: most groups' episodes all got the same outcome, for several steps
  (no advantage, no learning signal);
* ``lld``: Lazy Likelihood Displacement's three phases (Deng et al. 2025,
  arXiv:2512.04220): the log-likelihood of A ≥ 0 actions falls K steps in a row, then the
  entropy rises, then the gradient norm spikes;
* ``entropy_collapse``: the policy's entropy falls to a small fraction of its start (it
  samples one answer: groups stop differing, exploration ends);
* ``format_collapse``: the malformed-turn rate rises well above its start;
* ``length_collapse``: tokens per turn fall to a fraction of their start;
* ``action_collapse``: tool calls per episode fall to a fraction of the starting policy's
  (step 1's rollout, sampled before any update);
* ``grad_explosion``: the gradient norm far above its running median (or non-finite);
* ``reward_hacking``: the process score rises while the outcome stays flat or falls;
* ``doing_less``: the share of episodes that call a write tool falls while the training
  reward rises (refusing or transferring is the cheapest reward);
* ``val_test_gap``: validation pass^1 far above the evaluation's (the seed: 0.80 vs 0.125).

Noise: level checks compare a centred rolling median of 3 steps with the median of the
first ``BASELINE_STEPS`` steps (``action_collapse``: with step 1's) and fire only when the
condition holds for consecutive steps, so one odd batch fires nothing. A check whose metrics
the run did not log is reported as not applicable. Findings are not errors: the exit code is 0.

``agentgrpo.diagnose.interference`` (not imported here: it needs torch and the trainer) goes a
level below the metrics: it splits one training step's gradient into the part of the write tasks'
groups and the others', and measures what each does to the policy's correct write calls
(``benchmarks/write_interference.py``).
"""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agentgrpo.config import MissingFileError
from agentgrpo.diagnose.checks import CHECKS, Finding
from agentgrpo.diagnose.read import NotApplicable, RunLog, load_records

__all__ = ["CHECKS", "Diagnosis", "Finding", "diagnose", "register"]


@dataclass
class Diagnosis:
    run_dir: str
    steps: int
    findings: list[Finding]
    not_applicable: dict[str, str]
    """Check name → why it could not run."""

    @property
    def collapsed(self) -> Finding | None:
        """The first finding that is a collapse (``Finding.is_collapse``), or None."""
        return next((f for f in self.findings if f.is_collapse), None)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        first = self.collapsed
        out["collapsed"] = None if first is None else {"check": first.check, "step": first.step}
        return out

    def lines(self) -> list[str]:
        """One line per finding, then one summary line."""
        out = [f"step {f.step}: {f.check}: {f.summary}" for f in self.findings]
        skipped = "; ".join(f"{check} ({why})" for check, why in self.not_applicable.items())
        count = f"{len(self.findings)} finding(s)" if self.findings else "no findings"
        first = self.collapsed
        count += f" (collapsed: {first.check} from step {first.step})" if first else " (no collapse)"
        out.append(f"{count} in {self.steps} step(s) of {self.run_dir}"
                   + (f"; not applicable: {skipped}" if skipped else ""))
        return out


def diagnose(run_dir: str | Path, eval_json: str | Path | None = None) -> Diagnosis:
    """Run every check on ``run_dir``'s metrics.jsonl; findings in step order.

    Raises MissingFileError when ``run_dir`` or its metrics.jsonl is missing, DataError when
    the file holds no step record.
    """
    path = Path(run_dir)
    log = RunLog(path, load_records(path), Path(eval_json) if eval_json else None)
    findings, not_applicable = [], {}
    for name, check in CHECKS.items():
        try:
            finding = check(log)
        except NotApplicable as why:
            not_applicable[name] = str(why)
            continue
        if finding is not None:
            findings.append(finding)
    findings.sort(key=lambda f: (f.step, list(CHECKS).index(f.check)))
    return Diagnosis(str(path), len(log.records), findings, not_applicable)


# ---- command ----------------------------------------------------------------------------------
def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "diagnose", help="collapse signatures in a GRPO run's metrics.jsonl (docs/diagnostics.md)")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a GRPO run directory (holds metrics.jsonl)")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    parser.add_argument("--eval", dest="eval_json", metavar="EVAL",
                        help="the final policy's agentgrpo eval report (eval.json or its directory) for the "
                             "validation-vs-test check; default: RUN_DIR/eval/eval.json or ../eval_<run>/eval.json")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    eval_json = Path(args.eval_json) if args.eval_json else None
    if eval_json is not None:
        eval_json = eval_json / "eval.json" if eval_json.is_dir() else eval_json
        if not eval_json.is_file():
            raise MissingFileError(f"diagnose: --eval {args.eval_json}: no eval.json there "
                                   "(agentgrpo eval --out DIR writes DIR/eval.json)")
    result = diagnose(args.run_dir, eval_json)
    print(json.dumps(result.to_dict(), indent=2) if args.json else "\n".join(result.lines()))
    return 0
