"""The oracle agent: solves generated tasks, deterministically, like a policy-following agent."""
from __future__ import annotations

import json
import re
from collections import defaultdict

import pytest

from agentgrpo.envs.airline.core.environment import AirlineEnv, run_episode
from agentgrpo.envs.airline.simulation.plans import oracle_agent
from agentgrpo.envs.airline.tasks.generate import FAMILY_NAMES, generate_domain
from agentgrpo.envs.types import Action
from agentgrpo.envs.user_sim import ScriptedUser

WRITES = {"book_reservation", "cancel_reservation", "update_reservation_flights",
          "update_reservation_baggages", "update_reservation_passengers", "send_certificate"}
ID_PATTERNS = {"reservation_id": r"\b[A-Z0-9]{6}\b", "user_id": r"\b[a-z]+_[a-z]+_\d{4}\b",
               "flight_number": r"\bHAT\d{3}\b",
               "payment_id": r"\b(?:credit_card|gift_card|certificate)_\d+\b"}


def run_all(domain, user_seed: int = 0):
    return [run_episode(AirlineEnv(domain, task, ScriptedUser(task, seed=user_seed)),
                        oracle_agent(domain, task)) for task in domain.tasks]


@pytest.fixture(scope="module")
def results():
    domain = generate_domain(0, n_tasks=322)  # 14 tasks for each of the 23 families
    return domain, run_all(domain)


def test_pass_rate_on_300_tasks_covering_every_family(results):
    domain, episodes = results
    assert len(episodes) >= 300
    by_family = defaultdict(list)
    for episode in episodes:
        by_family[episode.family].append(episode.reward)
    assert set(by_family) == set(FAMILY_NAMES)
    overall = sum(e.reward for e in episodes) / len(episodes)
    assert overall >= 0.98, {f: sum(v) / len(v) for f, v in by_family.items()}
    assert all(e.termination in ("user_stop", "transfer") for e in episodes)


def test_tau_bench_compat_also_solved():
    domain = generate_domain(4, n_tasks=46, compat="tau_bench")
    episodes = run_all(domain)
    assert sum(e.reward for e in episodes) / len(episodes) >= 0.98


def test_transcripts_are_deterministic_and_seed_dependent():
    def dump(seed: int) -> str:
        return json.dumps([e.to_dict() for e in run_all(generate_domain(seed, n_tasks=23))],
                          sort_keys=True)
    assert dump(9) == dump(9)
    assert dump(9) != dump(10)


def _tool_calls(messages):
    for index, message in enumerate(messages):
        for call in message.get("tool_calls", []):
            yield index, call["function"]["name"], json.loads(call["function"]["arguments"])


def test_message_format(results):
    _, episodes = results
    for episode in episodes:
        messages = episode.messages
        assert messages[0]["role"] == "system" and messages[1]["role"] == "user"
        for index, message in enumerate(messages):
            if message["role"] == "assistant" and "tool_calls" in message:
                assert len(message["tool_calls"]) == 1  # one call per turn
                assert message["content"]  # with its one-sentence reason
                reply = messages[index + 1]
                assert reply["role"] == "tool"
                assert reply["tool_call_id"] == message["tool_calls"][0]["id"]
                assert not reply["content"].startswith("Error")


def test_reads_before_writes_and_yes_before_every_write(results):
    _, episodes = results
    for episode in episodes:
        messages = episode.messages
        calls = list(_tool_calls(messages))
        if calls:
            assert calls[0][1] == "get_user_details"
        for index, name, kwargs in calls:
            if name not in WRITES:
                continue
            previous_user = next(m for m in reversed(messages[:index]) if m["role"] == "user")
            assert previous_user["content"].lower().startswith("yes")
            asked = next(m for m in reversed(messages[:index]) if m["role"] == "assistant"
                         and "tool_calls" not in m)
            assert asked["content"].endswith("Shall I proceed (yes/no)?")
            if "reservation_id" in kwargs:
                reads = [k for i, n, k in calls if i < index and n == "get_reservation_details"]
                assert {"reservation_id": kwargs["reservation_id"]} in reads


def test_no_unexplained_knowledge(results):
    """Every id in a tool call was said by the user or returned by a tool before."""
    _, episodes = results
    for episode in episodes:
        seen = ""
        for message in episode.messages[1:]:
            if message["role"] in ("user", "tool"):
                seen += " " + message["content"]
            for call in message.get("tool_calls", []):
                arguments = call["function"]["arguments"]
                for pattern in ID_PATTERNS.values():
                    for value in re.findall(pattern, arguments):
                        if value.startswith("HAT") and not re.fullmatch(r"HAT\d{3}", value):
                            continue
                        assert value in seen, (episode.task_id, value)


def test_refusals_and_transfers_make_no_writes(results):
    domain, episodes = results
    for episode in episodes:
        task = domain.task_by_id(episode.task_id)
        names = [a.name for a in episode.actions]
        if task.scenario.expected in ("refusal", "answer"):
            assert not WRITES & set(names)
        if task.scenario.expected == "transfer":
            assert names[-1] == "transfer_to_human_agents"
            assert episode.termination == "transfer"


class _NoSayer(ScriptedUser):
    """A user who declines every confirmation."""

    def step(self, agent_message: str) -> str:
        if "(yes/no)" in agent_message:
            return "No, I changed my mind."
        return super().step(agent_message)


def test_a_declined_confirmation_means_no_write():
    domain = generate_domain(1, n_tasks=23)
    for task in domain.tasks:
        if task.scenario.expected != "write":
            continue
        episode = run_episode(AirlineEnv(domain, task, _NoSayer(task)), oracle_agent(domain, task))
        assert not WRITES & {a.name for a in episode.actions}
        assert episode.reward == 0.0


def test_after_its_plan_the_oracle_only_closes():
    domain = generate_domain(1, n_tasks=1, families=["cancel_refused"])
    oracle = oracle_agent(domain, domain.tasks[0])
    actions = [oracle.act("hello") for _ in range(12)]
    assert actions[-1] == Action.respond("Is there anything else I can help you with?")


def test_identical_across_processes_and_hash_seeds():
    """No dependence on set/dict hash order: other PYTHONHASHSEEDs give the same bytes."""
    import hashlib
    import os
    import subprocess
    import sys

    code = (
        "import json, hashlib\n"
        "from agentgrpo.envs.airline import AirlineEnv, generate_domain, oracle_agent, run_episode\n"
        "from agentgrpo.envs.user_sim import ScriptedUser\n"
        "d = generate_domain(3, n_tasks=23)\n"
        "runs = [run_episode(AirlineEnv(d, t, ScriptedUser(t)), oracle_agent(d, t)).to_dict()\n"
        "        for t in d.tasks]\n"
        "blob = json.dumps([d.data, [t.to_dict() for t in d.tasks], runs], sort_keys=True)\n"
        "print(hashlib.sha256(blob.encode()).hexdigest())\n")
    digests = set()
    for hash_seed in ("1", "777"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                             capture_output=True, text=True).stdout.strip()
        digests.add(out)
    assert len(digests) == 1 and len(hashlib.sha256().hexdigest()) == len(digests.pop())


# ---- the calculator oracle (env.oracle_arithmetic=calculator) --------------------------------
_NUMBER = re.compile(r"\d+")


@pytest.fixture(scope="module")
def calculated():
    domain = generate_domain(0, n_tasks=322)
    return domain, [run_episode(AirlineEnv(domain, task, ScriptedUser(task, seed=0)),
                                oracle_agent(domain, task, calculator=True)) for task in domain.tasks]


def test_calculator_oracle_solves_the_same_tasks_with_the_same_writes(results, calculated):
    (_, stated), (_, calc) = results, calculated
    assert [e.reward for e in calc] == [e.reward for e in stated]
    for a, b in zip(stated, calc):
        assert [x for x in a.actions if x.name in WRITES] == [x for x in b.actions if x.name in WRITES]
        assert [x for x in a.actions if x.name != "calculate"] == [x for x in b.actions if x.name != "calculate"]
    families = {e.family for e in calc if any(x.name == "calculate" for x in e.actions)}
    # the families whose confirmation or answer states a computed amount (a reservation paid at
    # once, the rule here, has a total to read, not to add)
    assert {"book_one_way", "book_round_trip", "book_payment_limit", "change_cabin", "change_flight",
            "compensation_cancelled", "info_gift_card_balance"} <= families
    assert not any(x.name == "calculate" for e in stated for x in e.actions)


def test_calculator_operands_were_said_and_its_result_is_what_is_stated_next(calculated):
    _, episodes = calculated
    calls = 0
    for episode in episodes:
        messages, seen = episode.messages, ""
        for index, message in enumerate(messages[1:], start=1):
            for call in message.get("tool_calls", []):
                if call["function"]["name"] != "calculate":
                    continue
                calls += 1
                expression = json.loads(call["function"]["arguments"])["expression"]
                assert re.fullmatch(r"[\d ()+\-*]+", expression), expression
                # the policy's fees and credits, and passenger counts (a reservation's list, counted)
                known = set(_NUMBER.findall(seen)) | {"30", "50", "100"} | {str(n) for n in range(1, 10)}
                assert set(_NUMBER.findall(expression)) <= known, (episode.task_id, expression)
                result = messages[index + 1]["content"]
                value = round(float(result))
                later = " ".join(m.get("content") or "" for m in messages[index + 2:] if m["role"] == "assistant")
                assert f"${abs(value)}" in later or str(abs(value)) in later, (episode.task_id, expression)
            if message["role"] in ("user", "tool"):
                seen += " " + str(message["content"])
    assert calls >= 100


def test_calculator_booking_total_by_hand():
    """3 passengers on one leg at $84 with insurance and no paid bag: 84 * 3 + 30 * 3 = $342."""
    from agentgrpo.envs.airline.simulation.oracle import OracleAgent
    from agentgrpo.envs.airline.simulation.plans import PLANS

    domain = generate_domain(2, n_tasks=1, families=["book_one_way"])
    task = domain.tasks[0]
    oracle = OracleAgent(domain, task, PLANS, calculator=True)
    script = oracle.reckon("84 * 3 + 30 * 3", 342, "I add up the total.")
    move = next(script)
    assert move.action.name == "calculate" and move.action.kwargs == {"expression": "84 * 3 + 30 * 3"}
    assert domain.execute(domain.new_state(), "calculate", move.action.kwargs) == "342.0"
    with pytest.raises(StopIteration) as done:
        script.send("342.0")
    assert done.value.value == 342
    wrong = oracle.reckon("84 * 3", 342, "I add up the total.")
    next(wrong)
    with pytest.raises(ValueError, match="gave 252.0, the rule 342"):
        wrong.send("252.0")
    silent = OracleAgent(domain, task, PLANS).reckon("84 * 3 + 30 * 3", 342, "")
    with pytest.raises(StopIteration) as done:
        next(silent)
    assert done.value.value == 342


# ---- the quoted oracle (env.oracle_arithmetic=quoted) -----------------------------------------
_QUOTE = re.compile(r"The fare of (<?\w+>?) in ([a-z ]+) is \$(\d+)\.")


@pytest.fixture(scope="module")
def quoted():
    domain = generate_domain(0, n_tasks=322)
    return domain, [run_episode(AirlineEnv(domain, task, ScriptedUser(task, seed=0)),
                                oracle_agent(domain, task, calculator=True, quote_fares=True)) for task in domain.tasks]


def test_quoted_oracle_makes_the_calculator_oracles_moves(calculated, quoted):
    (_, calc), (_, quote) = calculated, quoted
    assert [e.reward for e in quote] == [e.reward for e in calc]
    for a, b in zip(calc, quote):  # the same tool calls, and as many messages (a quote opens one)
        assert [x for x in a.actions if x.name != "respond"] == [x for x in b.actions if x.name != "respond"]
        assert len(a.actions) == len(b.actions), a.task_id
    said = sum(bool(_QUOTE.search(m.get("content") or "")) for e in quote for m in e.messages)
    assert said >= 50 and not any(_QUOTE.search(m.get("content") or "") for e in calc for m in e.messages)


def test_a_booking_total_copies_only_quoted_fares(quoted):
    """Every number of a booking's total is a fare the oracle quoted earlier, a count or a fee."""
    _, episodes = quoted
    totals = 0
    for episode in episodes:
        if not episode.family.startswith("book_"):
            continue
        quoted_fares: list[str] = []
        for message in episode.messages:
            if message["role"] != "assistant":
                continue
            quoted_fares += [m.group(3) for m in _QUOTE.finditer(message.get("content") or "")]
            for call in message.get("tool_calls", []):
                arguments = json.loads(call["function"]["arguments"])
                if call["function"]["name"] == "calculate" and "fares" in (message.get("content") or ""):
                    totals += 1
                    numbers = set(_NUMBER.findall(arguments["expression"]))
                    fares = numbers - {"30", "50"} - {str(n) for n in range(1, 10)}
                    assert fares <= set(quoted_fares), (episode.task_id, arguments["expression"], quoted_fares)
                if call["function"]["name"] == "book_reservation":
                    assert len(quoted_fares) == len(arguments["flights"])  # one quote per leg
    assert totals >= 20


# ---- the goal-stating oracle (env.oracle_goal=true) --------------------------------------------
def test_goal_oracle_names_the_request_in_its_first_reads_and_acts_the_same():
    domain = generate_domain(0, n_tasks=69)  # 3 tasks of each of the 23 families
    phrases: dict[str, set[str]] = defaultdict(set)
    for task in domain.tasks:
        plain = run_episode(AirlineEnv(domain, task, ScriptedUser(task, seed=0)), oracle_agent(domain, task))
        goal = run_episode(AirlineEnv(domain, task, ScriptedUser(task, seed=0)),
                           oracle_agent(domain, task, state_goal=True))
        # the same calls, messages and reward: only the reasons' words differ
        assert goal.reward == plain.reward == 1.0, task.task_id
        assert goal.actions == plain.actions and len(goal.messages) == len(plain.messages), task.task_id
        said = [m["content"] for m in goal.messages if m["role"] == "assistant" and m.get("tool_calls")
                and m["tool_calls"][0]["function"]["name"] in ("get_user_details", "get_reservation_details")]
        # the profile's read, and the read of the reservation the user names (not a walk through all)
        said = [text for text in said if "user id" in text or "before anything else" in text]
        wants = [re.match(r"The user wants (.+?)(?: and gave their user id,|\. I check reservation)", text)
                 for text in said]
        assert said and all(wants), (task.task_id, said)
        phrases[task.family] |= {match.group(1) for match in wants}
        assert not any("The user wants" in (m.get("content") or "") for m in plain.messages)
    assert set(phrases) == set(FAMILY_NAMES)
    # one phrase per family however the user asked; the out-of-scope transfers, one per request
    assert all(len(p) == 1 for family, p in phrases.items() if family != "transfer_out_of_scope"), phrases
    assert len(phrases["transfer_out_of_scope"]) > 1
    assert phrases["cancel_refused"] == phrases["cancel_business"] == {"to cancel a reservation"}
    assert phrases["info_reservation_total"] != phrases["info_gift_card_balance"]


def test_goal_think_oracle_thinks_the_request_right_after_the_named_reservation_and_acts_the_same():
    """``env.oracle_goal=think``: the goal oracle's moves with one ``think`` call inserted right after
    the read of the reservation the user names, holding the same phrase as that read's reason."""
    domain = generate_domain(0, n_tasks=69)
    thinking_families = set()
    for task in domain.tasks:
        goal = run_episode(AirlineEnv(domain, task, ScriptedUser(task, seed=0)),
                           oracle_agent(domain, task, state_goal=True))
        think = run_episode(AirlineEnv(domain, task, ScriptedUser(task, seed=0)),
                            oracle_agent(domain, task, state_goal="think"))
        assert think.reward == goal.reward == 1.0, task.task_id
        thinks = [i for i, a in enumerate(think.actions) if a.name == "think"]
        assert [a for a in think.actions if a.name != "think"] == goal.actions, task.task_id
        calls = [m for m in think.messages if m["role"] == "assistant" and m.get("tool_calls")]
        for i, message in enumerate(calls):
            call = message["tool_calls"][0]["function"]
            if call["name"] != "think":
                continue
            # right after a reservation read whose reason names the request, in the same words
            read = calls[i - 1]
            assert read["tool_calls"][0]["function"]["name"] == "get_reservation_details", task.task_id
            wants = re.match(r"The user wants (.+?)\. I check reservation", read["content"])
            assert wants, read["content"]
            assert json.loads(call["arguments"]) == {"thought": f"The user wants {wants.group(1)}."}
        if thinks:
            thinking_families.add(task.family)
        # one think per reservation the user names: those reads that name the request
        named = [m for m in calls if "before anything else" in (m.get("content") or "")]
        assert len(thinks) == len(named), task.task_id
    # every family that reads a reservation the user names, changes and refusals alike
    assert {"cancel_refused", "add_bags", "change_flight", "update_passengers", "compensation_delayed",
            "info_reservation_total"} <= thinking_families
    assert not thinking_families & {"book_one_way", "info_gift_card_balance"}
