"""``writes.md``: the write report of ``agentgrpo.eval.writes`` as Markdown tables."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentgrpo.eval.writes import OUTCOMES

ERRORS_SHOWN = 6
"""Error kinds listed per tool (the most frequent); writes.json has them all."""
SHORT_NAMES = {"no_write_call": "no write", "all_rejected": "all rejected", "wrong_tool": "wrong tool",
               "missing_write": "missing write", "wrong_arguments": "wrong args", "right_db": "right db",
               "unreplayable": "unreplayable"}


def writes_markdown(report: Mapping[str, Any]) -> str:
    failed = report["failed_writes"]
    lines = [f"# Write calls: `{report.get('policy', '')}`", "",
             f"{report['episodes']} finished episodes ({report['aborted']} aborted, left out); "
             f"{failed['write_episodes']} on tasks whose gold actions change the database, "
             f"{failed['failed']} of them failed.", "",
             "## Per write tool", "",
             "| tool | attempted | executed | gold | top errors (count) |", "|---|---|---|---|---|"]
    for name, row in report["tools"].items():
        errors = "; ".join(f"{kind} ({n})" for kind, n in list(row["errors"].items())[:ERRORS_SHOWN]) or "-"
        lines.append(f"| {name} | {row['attempted']} | {row['executed']} | {row['gold']} | {_cell(errors)} |")
    lines += ["", "## Failed write episodes by outcome", "",
              "Outcome classes, the first that applies: "
              + "; ".join(f"**{SHORT_NAMES[k]}**: {text}" for k, text in OUTCOMES.items()) + ".", ""]
    lines += _outcome_table(failed)
    lines += ["", f"Right-database episodes cut off by the turn limit: {failed['right_db_cut_off']}. "
              f"Median turn (assistant message, from 1) of the first write call: "
              f"{_number(failed['median_turn_first_write'])}; of the first rejected one: "
              f"{_number(failed['median_turn_first_rejected'])}.", ""]
    lines += _unneeded_table(report["unneeded_writes"])
    return "\n".join(lines) + "\n"


def _outcome_table(failed: Mapping[str, Any]) -> list[str]:
    header = "| family | " + " | ".join(SHORT_NAMES[k] for k in OUTCOMES) + " | failed |"
    lines = [header, "|---|" + "---|" * (len(OUTCOMES) + 1)]
    for family, counts in failed["by_family"].items():
        lines.append(f"| {family} | " + " | ".join(str(counts[k]) for k in OUTCOMES)
                     + f" | {sum(counts.values())} |")
    lines.append("| **all** | " + " | ".join(str(failed["outcomes"][k]) for k in OUTCOMES)
                 + f" | {failed['failed']} |")
    return lines


def _unneeded_table(unneeded: Mapping[str, Any]) -> list[str]:
    lines = ["## Writes executed on tasks that need none", ""]
    if not unneeded:
        return [*lines, "No evaluated task lacks a write."]
    lines += ["| family | episodes | with an executed write | executed calls |", "|---|---|---|---|"]
    for family, row in unneeded.items():
        calls = ", ".join(f"{name} {n}" for name, n in sorted(row["executed"].items())) or "-"
        lines.append(f"| {family} | {row['episodes']} | {row['with_write']} | {calls} |")
    return lines


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
