"""benchmarks/write_interference.py: its report and its bad-input path."""
from __future__ import annotations

import subprocess
import sys

from agentgrpo.diagnose.interference import Attribution

from . import SCRIPTS, load_script

SCRIPT = SCRIPTS / "write_interference.py"


def test_the_report_lists_every_measure_and_part_with_the_share_of_probes_lowered():
    script = load_script("write_interference")
    report = Attribution(["a", "a", "b"], {"write": 8, "no_write": 16, "all": 24}, additivity_error=1e-7)
    for name, sign in (("first_order", 1.0), ("cosine", 0.01), ("adam", 0.1)):
        getattr(report, name).update({"write": [sign, 2 * sign, -sign], "no_write": [-sign, -sign, sign],
                                      "all": [0.0, sign, 0.0]})
    result = {"policy": "p", "experiment": "joint", "lr": 1e-4, "rounds": 2, "probe_rounds": 3,
              "probe_tasks": ["a", "b"], **report.summary()}
    assert result["adam"]["no_write"]["lowered_frac"] == 2 / 3
    assert abs(result["adam"]["write"]["mean"]["value"] - 2 * 0.1 / 3) < 1e-12
    text = script.markdown(result)
    assert "Batch: 24 episodes of kept groups (8 of write tasks, 16 of the others)" in text
    assert "first write call of 3 successful write episodes of 3 further steps (2 tasks)" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| measure")]
    assert len(rows) == 9  # 3 measures × 3 parts
    assert any("| no_write | -0.033" in row and row.endswith("| 0.67 |") for row in rows)


def test_a_bad_override_is_reported_in_one_line(tmp_path):
    result = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--sft", str(tmp_path),
                             "rollout.copy_by_kind=true"], capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "write_interference.py: rollout.copy_by_kind=True is invalid: needs rollout.copy_arguments=true "
        "(it narrows the words an argument copies)"]
