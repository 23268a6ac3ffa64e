"""The write report (``eval --writes``): the oracle's evaluation, then scripted bad episodes of every outcome."""
from __future__ import annotations

import json
import shutil
from dataclasses import asdict, replace

import pytest

from agentgrpo.cli import main
from agentgrpo.envs.airline.factory import EnvConfig, SplitConfig
from agentgrpo.envs.airline.spec import AIRLINE
from agentgrpo.envs.delex import delexicalise_messages
from agentgrpo.envs.registry import write_tools
from agentgrpo.eval.evaluator import EvalConfig, evaluate
from agentgrpo.eval.runner import LOG_FILE, read_records
from agentgrpo.eval.tasks import eval_tasks
from agentgrpo.eval.types import EpisodeRecord
from agentgrpo.eval.writes import (
    NEXT_AFTER_REJECTED,
    OUTCOMES,
    after_rejected,
    analyse_eval_dir,
    analyse_writes,
    error_kind,
    first_replies,
    first_reply,
    load_eval_dir,
    misnamed_calls,
    tool_parameters,
    tools_fitting,
)

ENV = EnvConfig(n_tasks=30, splits=SplitConfig(covered_seen=6, uncovered_seen=8, unseen=4))


@pytest.fixture(scope="module")
def oracle_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("oracle")
    evaluate(EvalConfig(policy="oracle", env=ENV, trials=1, out_dir=str(out), progress=False))
    return out


def test_the_oracle_executes_every_gold_write_and_fails_none(oracle_dir, capsys):
    report = analyse_eval_dir(oracle_dir)
    assert report["episodes"] == 18 and report["aborted"] == 0
    tools = report["tools"]
    assert sum(row["gold"] for row in tools.values()) == 12  # the gold writes of the 11 write tasks
    for name, row in tools.items():
        assert row["attempted"] == row["executed"] == row["gold"], name
        assert row["errors"] == {}
    failed = report["failed_writes"]
    assert failed["write_episodes"] == 11 and failed["failed"] == 0
    assert set(failed["outcomes"].values()) == {0} and failed["median_turn_first_write"] is None
    assert report["unneeded_writes"]["cancel_refused"] == {"episodes": 1, "with_write": 0, "executed": {}}
    assert json.loads((oracle_dir / "writes.json").read_text())["tools"] == tools
    assert "| cancel_reservation | 4 | 4 | 4 | - |" in (oracle_dir / "writes.md").read_text()

    assert main(["eval", "--writes", str(oracle_dir)]) == 0
    assert "written to" in capsys.readouterr().out


def test_a_directory_that_is_not_an_evaluation_is_one_line_error(tmp_path, capsys):
    assert main(["eval", "--writes", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "not an evaluation directory" in err and err.count("\n") == 1


def _scripted(task, calls, recorded_arguments=None):
    """Messages of an agent that makes ``calls`` [(tool, arguments)] in order, each answered by
    what the task's world returns; ``recorded_arguments`` replaces what the transcript shows."""
    domain, state = task.bundle.domain, task.bundle.domain.new_state()
    messages = [{"role": "system", "content": "policy"}, {"role": "user", "content": "Hi."}]
    for i, (name, arguments) in enumerate(calls):
        observation = domain.execute(state, name, arguments)
        shown = recorded_arguments or arguments
        messages += [{"role": "assistant", "content": "",
                      "tool_calls": [{"id": f"call_{i}", "type": "function",
                                      "function": {"name": name, "arguments": json.dumps(shown)}}]},
                     {"role": "tool", "tool_call_id": f"call_{i}", "name": name, "content": observation}]
    return messages + [{"role": "assistant", "content": "Done."}, {"role": "user", "content": "###STOP###"}]


def _gold(task):
    return [(a.name, dict(a.kwargs)) for a in task.task.actions]


def test_scripted_failures_land_in_their_outcome_class(oracle_dir, tmp_path):
    out = tmp_path / "bad"
    shutil.copytree(oracle_dir, out)
    tasks = {t.task.family: t for t in eval_tasks(EvalConfig(policy="oracle", env=ENV, out_dir=str(out)))}
    other_reservation = tasks["cancel_insured"].task.actions[0].kwargs["reservation_id"]
    bags = tasks["add_bags"].task.actions[0].kwargs["reservation_id"]
    change = tasks["change_flight"].task.actions[0].kwargs["reservation_id"]
    scripts = {  # family -> (calls, termination, arguments the transcript shows)
        "add_bags": ([("get_reservation_details", {"reservation_id": bags})], "user_stop", None),
        "change_flight": ([("get_reservation_details", {"reservation_id": change}),
                           ("update_reservation_flights", {"reservation_id": change})], "user_stop", None),
        "book_round_trip": ([("cancel_reservation", {"reservation_id": other_reservation})], "user_stop", None),
        "compensation_delayed": (_gold(tasks["compensation_delayed"])[:1], "user_stop", None),
        "cancel_business": ([("cancel_reservation", {"reservation_id": other_reservation})], "user_stop", None),
        "cancel_airline_cancelled": (_gold(tasks["cancel_airline_cancelled"]), "user_stop", {"reservation_id": "<R1>"}),
        "cancel_refused": ([("cancel_reservation", {"reservation_id": other_reservation})], "user_stop", None),
    }
    records = []
    for record in read_records(out / LOG_FILE):
        if record.family == "cancel_insured":  # a delexicalised policy's view of the oracle's episode, cut off
            record = replace(record, reward=0.0, termination="max_turns",
                             messages=delexicalise_messages(record.messages, AIRLINE.id_kinds))
        elif record.family in scripts:
            calls, termination, shown = scripts[record.family]
            record = replace(record, reward=0.0, termination=termination,
                             messages=_scripted(tasks[record.family], calls, shown))
        records.append(record)
    (out / LOG_FILE).write_text("".join(json.dumps(asdict(r)) + "\n" for r in records))

    report = analyse_eval_dir(out)
    failed = report["failed_writes"]
    expected = {"no_write_call": "add_bags", "all_rejected": "change_flight", "wrong_tool": "book_round_trip",
                "missing_write": "compensation_delayed", "wrong_arguments": "cancel_business",
                "right_db": "cancel_insured", "unreplayable": "cancel_airline_cancelled"}
    assert set(expected) == set(OUTCOMES)
    assert failed["outcomes"] == dict.fromkeys(OUTCOMES, 1) and failed["failed"] == 7
    for outcome, family in expected.items():
        assert failed["by_family"][family][outcome] == 1, (outcome, family)
    assert failed["wrong_tool_instead"] == {"cancel_reservation for book_reservation": 1}
    assert failed["right_db_cut_off"] == 1  # the delexicalised episode, played again with its user's seed
    _, saved, by_id = load_eval_dir(out)
    without_env = analyse_writes(saved, by_id, write_tools(ENV))["failed_writes"]["outcomes"]  # no replay with slots
    assert without_env["right_db"] == 0 and without_env["unreplayable"] == 2
    assert failed["median_turn_first_rejected"] == 2.0  # the rejected flight change came after a read
    assert failed["median_turn_first_write"] == 1.0  # five of the six episodes with a write call wrote first

    tools = report["tools"]
    assert tools["update_reservation_flights"] == {
        "attempted": 1, "executed": 0, "gold": 1,
        "errors": {"invalid arguments for update_reservation_flights: missing required argument 'cabin'": 1}}
    assert tools["update_reservation_baggages"]["attempted"] == 0 and tools["update_reservation_baggages"]["gold"] == 1
    # cancels: book_round_trip, compensation_delayed, cancel_business, cancel_insured, cancel_refused executed;
    # the unreplayable one's recorded call executed too (its observation is no error)
    assert tools["cancel_reservation"]["attempted"] == tools["cancel_reservation"]["executed"] == 6
    assert tools["cancel_reservation"]["gold"] == 4
    assert tools["send_certificate"]["executed"] == 1 and tools["send_certificate"]["gold"] == 2
    assert report["unneeded_writes"]["cancel_refused"] == {"episodes": 1, "with_write": 1,
                                                           "executed": {"cancel_reservation": 1}}
    assert report["unneeded_writes"]["compensation_refused"]["with_write"] == 0
    table = (out / "writes.md").read_text()
    assert "| **all** | 1 | 1 | 1 | 1 | 1 | 1 | 1 | 7 |" in table
    assert "1 write calls rejected, in 1 episodes (0 of them won)" in table  # the flight change, then "Done."


def test_error_kinds_blank_values_and_keep_argument_names():
    assert error_kind("Error: invalid arguments for book_reservation: argument 'passengers[0].first_name' must "
                      "be a string, got int") == \
        "invalid arguments for book_reservation: argument 'passengers[i].first_name' must be a string"
    assert error_kind("Error: flight HAT001 not found on date 2024-05-15") == "flight … not found on date …"
    assert error_kind("Error: reservation not found") == "reservation not found"


def test_confirmation_faults_say_why_the_user_declined(oracle_dir, tmp_path):
    """A booking whose confirmation states a wrong total is declined for ``other amount``; the oracle's
    own confirmation, ids as slots, is one the user accepts (slots go unchecked)."""
    out = tmp_path / "declined"
    shutil.copytree(oracle_dir, out)
    records = []
    for record in read_records(out / LOG_FILE):
        if record.family == "book_round_trip":
            messages = [dict(m) for m in record.messages]
            ask = next(m for m in messages if m["role"] == "assistant" and "(yes/no)" in str(m.get("content")))
            assert AIRLINE.confirmation_faults(_task(out, record.task_id), ask["content"]) == []
            ask["content"] = ask["content"].replace("Total $", "Total $1") + " That is $7 more."
            record = replace(record, reward=0.0, messages=messages)
        elif record.family == "cancel_insured":
            record = replace(record, reward=0.0, termination="max_turns",
                             messages=delexicalise_messages(record.messages, AIRLINE.id_kinds))
        records.append(record)
    (out / LOG_FILE).write_text("".join(json.dumps(asdict(r)) + "\n" for r in records))

    confirmations = analyse_eval_dir(out)["confirmations"]
    assert confirmations == {"requests": 2, "accepted": 1, "faults": {"other amount": 1},
                             "by_family": {"book_round_trip": {"other amount": 1}}}
    assert "| book_round_trip | other amount (1) |" in (out / "writes.md").read_text()
    assert analyse_eval_dir(oracle_dir)["confirmations"] == {"requests": 0, "accepted": 0, "faults": {},
                                                             "by_family": {}}


def test_confirmation_faults_of_the_airline_name_each_broken_rule(oracle_dir):
    tasks = {t.task.family: t.task for t in eval_tasks(EvalConfig(policy="oracle", env=ENV, out_dir=str(oracle_dir)))}
    cancel = tasks["cancel_insured"]
    rid = cancel.actions[0].kwargs["reservation_id"]
    faults = AIRLINE.confirmation_faults
    assert faults(cancel, f"Here is what I will do: cancel reservation {rid}. Shall I proceed (yes/no)?") == []
    assert faults(cancel, "Here is what I will do: cancel reservation 9ZZ9ZZ. Shall I proceed (yes/no)?") == \
        ["missing reservation_id", "other reservation_id"]
    assert faults(cancel, "Here is what I will do: cancel reservation <R2>. Shall I proceed (yes/no)?") == []
    assert faults(cancel, f"I will change {rid}. Shall I proceed (yes/no)?") == ["no keyword"]
    assert faults(cancel, f"Reservation {rid} is cancelled.") is None  # no request
    wants_none = next(t for t in tasks.values() if not t.scenario.confirmations)  # e.g. a question
    assert faults(wants_none, f"Cancel {rid}? Shall I proceed (yes/no)?") is None


def _task(out, task_id):
    return next(t.task for t in eval_tasks(EvalConfig(policy="oracle", env=ENV, out_dir=str(out)))
                if t.task.task_id == task_id)


def test_first_replies_say_whether_the_request_was_read(oracle_dir):
    messages = [{"role": "user", "content": "I want to add bags."},
                {"role": "assistant", "content": "Your user id?"},  # before any tool result: not it
                {"role": "user", "content": "<U1>"},
                {"role": "assistant", "content": "I look up the profile.", "tool_calls": [{"id": "c"}]},
                {"role": "tool", "content": "{}"},
                {"role": "assistant", "content": "Which  reservation\nneeds bags?"},
                {"role": "assistant", "content": "later"}]
    assert first_reply(messages) == "Which reservation needs bags?"
    assert first_reply(messages[:5]) is None
    # the oracle reads the request: its question after the profile differs by request
    replies = analyse_eval_dir(oracle_dir)["first_replies"]
    families = replies["families"]
    assert families["cancel_refused"]["reply"].startswith("Which reservation would you like to cancel")
    assert len({row["reply"] for row in families.values()}) >= len(families) // 2
    assert 0 < len(replies["leading"]["families"]) < len(families)
    assert "## The first reply after a tool result" in (oracle_dir / "writes.md").read_text()
    # after the second read (the reservation) the oracle proposes what the request needs
    assert first_reply(messages, tool_results=2) is None
    second = analyse_eval_dir(oracle_dir)["second_replies"]["families"]
    assert second["cancel_business"]["reply"] == "Here is what I will do: cancel reservati"
    assert second["add_bags"]["reply"].startswith("Which payment method")
    assert second["cancel_refused"]["reply"].startswith("I'm sorry, but I cannot cancel")
    assert "## The reply after the second tool result" in (oracle_dir / "writes.md").read_text()
    # a policy that asks the same whatever was asked leads in every family
    records = [EpisodeRecord(task_id=f"t{i}", split="s", family=family, trial=0, reward=0.0, has_error=False,
                             turn_tokens=[], termination="done", messages=messages)
               for i, family in enumerate(["add_bags", "cancel_refused", "info_upcoming_count"])]
    same = first_replies(records)
    assert same["leading"] == {"reply": "Which reservation needs bags?",
                               "families": ["add_bags", "cancel_refused", "info_upcoming_count"]}
    assert same["families"]["add_bags"] == {"episodes": 1, "reply": "Which reservation needs bags?", "count": 1}


def test_calls_named_for_another_tools_arguments(oracle_dir):
    _, records, by_id = load_eval_dir(oracle_dir)
    parameters = tool_parameters(next(iter(by_id.values())).bundle.domain.tool_schemas())
    assert parameters["send_certificate"] == {"user_id", "amount"} and len(parameters) == 14
    assert tools_fitting("book_reservation", ["user_id", "amount"], parameters) == ["send_certificate"]
    assert tools_fitting("send_certificate", ["reservation_id", "cabin", "flights", "payment_id"],
                         parameters) == ["update_reservation_flights"]
    # a reservation id fits five tools; the closest two (it is their only parameter) are named
    assert tools_fitting("search_direct_flight", ["reservation_id"], parameters) == [
        "cancel_reservation", "get_reservation_details"]
    for name, arguments in [("cancel_reservation", ["reservation_id"]),  # a right call
                            ("update_reservation_flights", ["reservation_id"]),  # arguments missing, not misnamed
                            ("cancel_reservation", ["reservation_id", "bogus"]),  # no tool takes "bogus"
                            ("no_such_tool", ["reservation_id"]), ("cancel_reservation", [])]:
        assert tools_fitting(name, arguments, parameters) == [], (name, arguments)

    oracle = misnamed_calls(records, parameters)
    assert oracle["misnamed"] == 0 and oracle["pairs"] == {} and oracle["by_family"] == {}
    assert oracle["calls"] == sum(len(m.get("tool_calls") or []) for r in records for m in r.messages)

    task = next(t for t in by_id.values() if t.task.family == "compensation_delayed")
    user_id = next(a.kwargs["user_id"] for a in task.task.actions if a.name == "send_certificate")
    calls = [("get_user_details", {"user_id": user_id}), ("book_reservation", {"user_id": user_id, "amount": 100}),
             ("get_reservation_details", {"user_id": user_id})]
    record = replace(next(r for r in records if r.task_id == task.task.task_id), messages=_scripted(task, calls))
    report = misnamed_calls([record], parameters)
    assert (report["calls"], report["misnamed"]) == (3, 2)
    assert report["pairs"] == {"book_reservation for send_certificate": 1,
                               "get_reservation_details for get_user_details": 1}
    assert report["by_family"] == {"compensation_delayed": {"calls": 3, "misnamed": 2}}
    assert analyse_eval_dir(oracle_dir)["misnamed"] == oracle
    assert "0 of" in (oracle_dir / "writes.md").read_text().split("## Calls named for another tool's arguments")[1]


def test_after_a_rejected_write_the_next_turn_and_whether_the_tool_executes_later(oracle_dir):
    _, records, by_id = load_eval_dir(oracle_dir)
    tasks = {t.task.family: t for t in by_id.values()}
    record_of = {r.family: r for r in records}
    change = tasks["change_flight"].task.actions[0].kwargs["reservation_id"]
    bags = tasks["add_bags"].task.actions[0].kwargs["reservation_id"]
    flights = [("get_reservation_details", {"reservation_id": change}),
               ("update_reservation_flights", {"reservation_id": change}),  # rejected: arguments missing
               ("update_reservation_flights", {"reservation_id": change}),  # the same call again
               ("update_reservation_flights", {"reservation_id": change, "cabin": "economy"}),  # other arguments
               ("cancel_reservation", {"reservation_id": "NOPE00"}),  # another write, rejected: no such reservation
               ("get_reservation_details", {"reservation_id": change}),  # a read
               *_gold(tasks["change_flight"])]  # the flight change executes after all
    no_such = [("cancel_reservation", {"reservation_id": "NOPE00"})]
    malformed = [{"role": "assistant", "content": "<tool_call>{oops"},
                 {"role": "tool", "content": "Error: the tool call is not valid JSON (Expecting value)."}]
    episodes = [
        replace(record_of["change_flight"], reward=1.0, messages=_scripted(tasks["change_flight"], flights)),
        replace(record_of["add_bags"], reward=0.0,  # then a message to the user ("Done.")
                messages=_scripted(tasks["add_bags"], [("update_reservation_baggages", {"reservation_id": bags})])),
        replace(record_of["cancel_business"], reward=0.0,  # then nothing
                messages=_scripted(tasks["cancel_business"], no_such)[:-2]),
        replace(record_of["book_round_trip"], reward=0.0,  # then a malformed turn
                messages=_scripted(tasks["book_round_trip"], [("book_reservation", {})])[:-2] + malformed),
    ]
    report = after_rejected(episodes, write_tools(ENV))
    assert report["next"] == dict.fromkeys(NEXT_AFTER_REJECTED, 1) and report["rejected_calls"] == 7
    assert report["by_tool"] == {"book_reservation": {"rejected": 1, "executed_later": 0},
                                 "cancel_reservation": {"rejected": 2, "executed_later": 0},
                                 "update_reservation_baggages": {"rejected": 1, "executed_later": 0},
                                 "update_reservation_flights": {"rejected": 3, "executed_later": 3}}
    assert (report["executed_later"], report["episodes"], report["episodes_won"]) == (3, 4, 1)

    oracle = analyse_eval_dir(oracle_dir)["after_rejected"]  # the oracle's writes are never rejected
    assert oracle["rejected_calls"] == 0 and oracle["episodes"] == 0
    assert "After a rejected write call" not in (oracle_dir / "writes.md").read_text()
