"""Teacher-forced decisions: the counts on constructed turns, and the command on the tiny preset."""
from __future__ import annotations

import json
import math

from helpers import SMALL_ENV_OVERRIDES

from agentgrpo.agent.format import ParsedAction
from agentgrpo.cli import main
from agentgrpo.eval.decisions import Decision, decisions_markdown, summarise

WRITES = {"cancel_reservation", "book_reservation"}


def call(name, **arguments):
    return ParsedAction("tool", name, arguments)


def say(text="Hello"):
    return ParsedAction("respond", "respond", {"content": text}, text=text)


def decide(gold, got, turn=2):
    return Decision("t1", "cancel_refused", turn, gold, got)


def test_kinds_tools_and_arguments_are_counted_as_defined():
    decisions = [
        decide(call("get_user_details", user_id="<U1>"), call("get_user_details", user_id="<U1>")),     # exact
        decide(call("get_reservation_details", reservation_id="<R2>"),
               call("get_reservation_details", reservation_id="<R1>")),                              # right tool
        decide(call("get_reservation_details", reservation_id="<R1>"), say()),                       # a message
        decide(call("cancel_reservation", reservation_id="<R1>"), call("cancel_reservation", reservation_id="<R1>")),
        decide(call("book_reservation", user_id="<U1>", cabin="economy"),
               call("book_reservation", user_id="<U1>", cabin="business", insurance="no")),
        decide(call("book_reservation", user_id="<U1>"), call("cancel_reservation", reservation_id="<R1>")),
        decide(say("Anything else?"), say("Bye")),
        decide(say("Which one?"), call("get_user_details", user_id="<U1>")),
    ]
    report = summarise(decisions, WRITES, episodes=1)
    assert report.by_kind["read"] == {"turns": 3, "kind": 2, "tool": 2, "exact": 1}
    assert report.by_kind["write"] == {"turns": 3, "kind": 3, "tool": 2, "exact": 1}
    assert report.by_kind["respond"] == {"turns": 2, "kind": 1, "tool": 1, "exact": 0}
    assert math.isclose(report.accuracy("write", "tool"), 2 / 3)
    assert report.by_tool["get_reservation_details"] == {"turns": 2, "tool": 1, "exact": 0, "well_formed": 1,
                                                         "wrong reservation_id": 1}
    assert report.by_tool["book_reservation"] == {"turns": 2, "tool": 1, "exact": 0, "well_formed": 2,
                                                  "wrong cabin": 1, "wrong insurance": 1}
    assert report.confusions == [("get_reservation_details", "respond", 1),
                                 ("book_reservation", "cancel_reservation", 1)]
    assert [e["tool"] for e in report.examples] == ["get_reservation_details", "book_reservation"]
    text = decisions_markdown(report, "p")
    assert "| write | 3 | 1.000 | 0.667 | 0.333 |" in text
    assert "| book_reservation | 2 | 1 | 0 | 2 | cabin 1; insurance 1 |" in text


def test_the_command_scores_the_tiny_preset_on_the_oracle_episodes(tiny_policy_dir, tmp_path, capsys):
    out = tmp_path / "decisions"
    code = main(["eval", "--decisions", "--policy", str(tiny_policy_dir), f"out_dir={out}", *SMALL_ENV_OVERRIDES,
                 "splits=[covered_seen]", "rollout.max_new_tokens=24", "rollout.constrain_tool_calls=true"])
    assert code == 0
    report = json.loads((out / "decisions.json").read_text())
    assert report["episodes"] == 4 and report["oracle_failed"] == 0
    # every assistant turn of the four oracle episodes, each counted once
    assert sum(counts["turns"] for counts in report["by_kind"].values()) == report["prefixes"] > 4 * 4
    assert report["by_kind"]["read"]["turns"] >= 4  # each episode looks the user up
    assert (out / "decisions.md").read_text().startswith("# Teacher-forced decisions")
    assert "written to" in capsys.readouterr().out


def test_the_oracle_has_no_turns_of_its_own_to_decode(capsys):
    assert main(["eval", "--decisions", "--policy", "oracle", *SMALL_ENV_OVERRIDES]) == 2
    assert "--decisions decodes a checkpoint" in capsys.readouterr().err
