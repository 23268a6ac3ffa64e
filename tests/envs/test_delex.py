"""Delexicalisation: ids as slots for the policy, real ids for the environment."""
from __future__ import annotations

import json
import random
import re

import pytest

from agentgrpo.config import ConfigError
from agentgrpo.envs.airline.spec import AIRLINE_ID_KINDS, AIRPORT_KIND
from agentgrpo.envs.airline.tasks.world import AIRPORTS
from agentgrpo.envs.config import EnvConfig
from agentgrpo.envs.delex import (
    DelexEnv,
    Delexicaliser,
    IdKind,
    delexicalise_messages,
    renumber_slots,
    slot_tokens,
)
from agentgrpo.envs.registry import build_training_worlds, id_kinds, make_env
from agentgrpo.envs.types import Action
from agentgrpo.train.demonstrations import collect_demonstrations


def test_slots_by_first_appearance_and_kind():
    names = Delexicaliser(AIRLINE_ID_KINDS)
    text = names.delex("I am sara_lee_2916; cancel K95J5W, not 4WQ150, and HAT019 then K95J5W again.")
    assert text == "I am <U1>; cancel <R1>, not <R2>, and <F1> then <R1> again."
    # a later text continues the numbering and reuses known ids
    assert names.delex('{"reservations": ["4WQ150", "VAAOXJ"], "pay": "gift_card_2194623"}') == \
        '{"reservations": ["<R2>", "<R3>"], "pay": "<P1>"}'
    assert names.relex("<R3> for <U1> with <P1>") == "VAAOXJ for sara_lee_2916 with gift_card_2194623"


def test_what_is_not_an_id():
    names = Delexicaliser(AIRLINE_ID_KINDS)
    kept = ("a 12345 zip; mei.moore5193@example.com; 2024-05-17; ORD to LGA; ###STOP###; "
            "HAT0190; xK95J5W; get_user_details; basic_economy; $346")
    assert names.delex(kept) == kept
    assert names.slot_of == {}


def test_relex_keeps_unknown_slots_and_literals():
    names = Delexicaliser(AIRLINE_ID_KINDS)
    names.delex("K95J5W")
    assert names.relex("<R1> <R2> <Z1> K95J5W") == "K95J5W <R2> <Z1> K95J5W"
    action = names.relex_action(Action("update_reservation_baggages",
                                       {"reservation_id": "<R1>", "nested": [{"id": "<R1>"}], "total_baggages": 2}))
    assert action.kwargs == {"reservation_id": "K95J5W", "nested": [{"id": "K95J5W"}], "total_baggages": 2}
    assert names.relex_action(Action.respond("<R1> is cancelled")).content == "K95J5W is cancelled"


def test_out_of_slots_stays_literal():
    names = Delexicaliser([IdKind("R", r"[A-Z]{2}\d", 2)])
    assert names.delex("AB1 CD2 EF3 AB1") == "<R1> <R2> EF3 <R1>"
    assert slot_tokens([IdKind("R", "x", 2), IdKind("U", "y", 1)]) == ["<R1>", "<R2>", "<U1>"]


@pytest.mark.parametrize("bad", [dict(tag="RR", pattern="x", slots=1), dict(tag="R", pattern="x", slots=0)])
def test_bad_kinds_fail_fast(bad):
    with pytest.raises(ValueError, match="IdKind"):
        IdKind(**bad)


def test_messages_keep_protocol_fields_and_system_prompt():
    messages = [
        {"role": "system", "content": "policy mentions HAT001"},
        {"role": "user", "content": "my id is sara_lee_2916"},
        {"role": "assistant", "content": "looking", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_user_details", "arguments": '{"user_id": "sara_lee_2916"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_user_details", "content": '{"r": ["K95J5W"]}'},
    ]
    out = delexicalise_messages(messages, AIRLINE_ID_KINDS)
    assert out[0] == messages[0]
    assert out[2]["tool_calls"][0]["function"]["arguments"] == '{"user_id": "<U1>"}'
    assert out[2]["tool_calls"][0]["id"] == "call_1"
    assert out[3]["content"] == '{"r": ["<R1>"]}'
    assert messages[1]["content"] == "my id is sara_lee_2916"  # the input is not changed


def test_tau_bench_ids_are_all_recognised(tau_bench_dir):
    """Every user, reservation, payment and flight id in τ-bench's data gets its own kind."""
    users = json.loads((tau_bench_dir / "users.json").read_text())
    reservations = json.loads((tau_bench_dir / "reservations.json").read_text())
    flights = json.loads((tau_bench_dir / "flights.json").read_text())
    samples = {"U": list(users), "R": list(reservations), "F": list(flights),
               "P": [pid for user in users.values() for pid in user["payment_methods"]]}
    kinds = [IdKind(k.tag, k.pattern, 10**6) for k in AIRLINE_ID_KINDS]  # room for every id
    for tag, ids in samples.items():
        names = Delexicaliser(kinds)
        out = names.delex(" ".join(ids)).split()
        assert all(re.fullmatch(rf"<{tag}\d+>", slot) for slot in out), (tag, [i for i, s in zip(ids, out)
                                                                              if not s.startswith(f"<{tag}")][:5])
        assert len(set(out)) == len(set(ids))


def test_tau_bench_airports_are_all_places(tau_bench_dir):
    """Every airport of τ-bench's flights is a place slot; the three capitals of a country, an
    address's state or a zip are not (``USA``, ``NY``)."""
    flights = json.loads((tau_bench_dir / "flights.json").read_text())
    codes = sorted({f[end] for f in flights.values() for end in ("origin", "destination")})
    assert codes == sorted(code for code, _ in AIRPORTS)
    names = Delexicaliser([*AIRLINE_ID_KINDS, AIRPORT_KIND])
    assert names.delex(" ".join(codes)).split() == [f"<A{i}>" for i in range(1, len(codes) + 1)]
    users = json.loads((tau_bench_dir / "users.json").read_text())
    address = json.dumps(next(iter(users.values()))["address"])
    assert "USA" in address and names.delex(address) == address
    fresh = Delexicaliser([*AIRLINE_ID_KINDS, AIRPORT_KIND])
    assert fresh.delex("from JFK to ORD, not JFKX or XJFK, then JFK") == \
        "from <A1> to <A2>, not JFKX or XJFK, then <A1>"


def test_places_are_slots_only_on_request_and_only_beside_ids():
    assert [k.tag for k in id_kinds(EnvConfig(delexicalise=True))] == ["F", "U", "P", "R"]
    places = EnvConfig(delexicalise=True, delexicalise_places=True)
    assert [k.tag for k in id_kinds(places)] == ["F", "U", "P", "R", "A"]
    with pytest.raises(ConfigError, match="env.delexicalise_places=True is invalid: .*env.delexicalise=true"):
        EnvConfig(delexicalise=False, delexicalise_places=True)
    EnvConfig(delexicalise_places=True)  # the checkpoint's view decides env.delexicalise later


def test_places_as_slots_leave_no_airport_code_and_replay(tmp_path):
    """``env.delexicalise_places``: no demonstration shows an airport code; the user's trip, the
    searches and the booking name the airports by slot, and the demonstrations replay through
    ``DelexEnv`` to their reward."""
    config = EnvConfig(delexicalise=True, delexicalise_places=True)
    worlds = build_training_worlds(config)
    demos = collect_demonstrations(worlds, config, ["covered_seen", "uncovered_seen"], 1, 0)
    codes = re.compile(r"(?<![A-Za-z0-9_<])(?:" + "|".join(code for code, _ in AIRPORTS) + r")(?![A-Za-z0-9_>])")
    assert not [d.task_id for d in demos if codes.search(json.dumps(d.messages[1:]))]
    searches = [json.loads(call["function"]["arguments"]) for d in demos for m in d.messages
                for call in m.get("tool_calls") or () if call["function"]["name"].startswith("search_")]
    assert searches and all(re.fullmatch(r"<A\d+>", s["origin"]) and re.fullmatch(r"<A\d+>", s["destination"])
                            for s in searches)
    placed = [d for d in demos if "<A1>" in json.dumps(d.messages)]
    assert any("from <A1> to <A2>" in m["content"] for d in placed for m in d.messages if m["role"] == "user")
    _replay_demonstrations(config, worlds, placed)


@pytest.fixture(scope="module")
def delex_demos():
    config = EnvConfig(train_worlds=2, delexicalise=True)
    worlds = build_training_worlds(config)
    return config, worlds, collect_demonstrations(worlds, config, ["covered_seen", "uncovered_seen"], 1, 0)


def test_oracle_demonstrations_carry_no_ids(delex_demos):
    config, worlds, demos = delex_demos
    assert len(demos) > 40
    ids = {i for world in worlds for i in _world_ids(world.domain)}
    words = {i for i in ids if re.fullmatch(r"\w+", i, re.ASCII)}  # found as whole words of the text
    for demo in demos:
        text = json.dumps(demo.messages[1:])
        found = words & set(re.findall(r"\w+", text, re.ASCII))
        found |= {i for i in ids - words if re.search(rf"(?<![A-Za-z0-9_]){re.escape(i)}(?![A-Za-z0-9_])", text)}
        assert not found, sorted(found)[:5]
        assert "<U1>" in text


def test_replaying_a_delexicalised_demonstration_solves_the_task(delex_demos):
    """The policy's view is consistent: the demonstration's calls, slots and all, played through
    ``DelexEnv`` see exactly the demonstration's observations and earn its reward."""
    _replay_demonstrations(*delex_demos)


def test_process_reward_reads_slots_as_the_ids_they_stand_for(delex_demos):
    """PRM-Lite scores a delexicalised demonstration by the rules its real-id twin fires: no id
    becomes a placeholder (P1/P2) and the data chain (B2/B3) holds on the same calls. Only the
    think bonus may move, as a slot is shorter than its id and text length decides a think step."""
    from agentgrpo.rewards.prm_lite import PRMLite

    config, worlds, demos = delex_demos
    real = collect_demonstrations(worlds, EnvConfig(train_worlds=2), ["covered_seen", "uncovered_seen"], 1, 0)
    assert [d.task_id for d in real] == [d.task_id for d in demos]
    prm = PRMLite()
    chain = 0
    for twin, demo in zip(real, demos):
        ours, theirs = prm.score_messages(demo.messages), prm.score_messages(twin.messages)
        without_b5 = [[[r for r in rules if r != "B5"] for rules in result.fired_per_step] for result in (ours, theirs)]
        assert without_b5[0] == without_b5[1], demo.task_id
        assert not {"P1", "P2"} & set(ours.fired)
        chain += sum(r in ("B2", "B3") for r in ours.fired)
    assert chain >= len(demos)


@pytest.mark.parametrize("arithmetic", ["calculator", "quoted"])
def test_calculator_demonstrations_through_the_config_replay_too(arithmetic):
    """``env.oracle_arithmetic=calculator`` (and ``quoted``) reaches the demonstrations: the oracle's
    sums are ``calculate`` calls, and those transcripts replay through ``DelexEnv`` like the others;
    a quoted fare names its flight as a slot."""
    config = EnvConfig(train_worlds=2, delexicalise=True, oracle_arithmetic=arithmetic)
    worlds = build_training_worlds(config)
    demos = collect_demonstrations(worlds, config, ["covered_seen", "uncovered_seen"], 1, 0)
    calculated = [d for d in demos if '"calculate"' in json.dumps(d.messages)]
    assert len(calculated) >= 10 and all(d.reward == 1.0 for d in demos)
    quotes = re.findall(r"The fare of (\S+) in", json.dumps([d.messages for d in demos]))
    assert (len(quotes) >= 5 and all(re.fullmatch(r"<F\d+>", q) for q in quotes)) == (arithmetic == "quoted")
    _replay_demonstrations(config, worlds, calculated)


def _replay_demonstrations(config, worlds, demos):
    world_of = {task.task_id: world for world in worlds for task in world.tasks()}
    replayed = 0
    for demo in demos[:: max(1, len(demos) // 12)]:
        world = world_of[demo.task_id]
        env = make_env(world, world.task_by_id(demo.task_id), config, user_seed=demo.user_seed)
        assert isinstance(env, DelexEnv)
        messages = demo.messages
        assert env.reset() == messages[1]["content"]
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            calls = message.get("tool_calls")
            action = (Action(calls[0]["function"]["name"], json.loads(calls[0]["function"]["arguments"]))
                      if calls else Action.respond(message["content"]))
            result = env.step(action)
            if result.done:
                break
            assert result.observation == messages[i + 1]["content"], demo.task_id
        assert env.reward == 1.0, demo.task_id
        replayed += 1
    assert replayed >= 10


SLOT = re.compile(r"<[A-Z][0-9]+>")


def _canonical(messages: list[dict]) -> list[dict]:
    """Slots renumbered by first appearance, per kind (what delexicalising the world gives)."""
    seen: dict[str, str] = {}
    counts: dict[str, int] = {}

    def name(match: re.Match) -> str:
        slot = match.group(0)
        if slot not in seen:
            counts[slot[1]] = counts.get(slot[1], 0) + 1
            seen[slot] = f"<{slot[1]}{counts[slot[1]]}>"
        return seen[slot]

    return [m if m["role"] == "system" else json.loads(SLOT.sub(name, json.dumps(m))) for m in messages]


def test_renumbered_slots_are_one_consistent_relabelling():
    kinds = [IdKind("U", r"[a-z]+_\d{4}", 4), IdKind("R", r"[A-Z0-9]{6}", 16)]
    messages = [
        {"role": "system", "content": "Slots look like <R1>."},
        {"role": "user", "content": "I am <U1>."},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_user_details", "arguments": json.dumps({"user_id": "<U1>"})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"reservations": ["<R1>", "<R2>", "<R3>"]})},
        {"role": "user", "content": "Cancel <R2> please, not <R3>."},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_2", "type": "function", "function": {
            "name": "cancel_reservation", "arguments": json.dumps({"reservation_id": "<R2>"})}}]},
    ]
    before = json.dumps(messages)
    out = renumber_slots(messages, kinds, random.Random(3))
    assert json.dumps(messages) == before  # the input is not changed
    assert out[0] == messages[0]  # the system prompt is the policy, not the world
    listed = json.loads(out[3]["content"])["reservations"]
    assert len(set(listed)) == 3 and all(re.fullmatch(r"<R([1-9]|1[0-6])>", r) for r in listed)
    called = json.loads(out[5]["tool_calls"][0]["function"]["arguments"])["reservation_id"]
    assert called == listed[1] and f"Cancel {called} please, not {listed[2]}." == out[4]["content"]
    assert out[3]["tool_call_id"] == "call_1" and out[5]["tool_calls"][0]["id"] == "call_2"
    assert _canonical(out) == messages  # the same conversation, its slots named differently
    firsts = {json.loads(renumber_slots(messages, kinds, random.Random(seed))[3]["content"])["reservations"][0]
              for seed in range(40)}
    assert len(firsts) >= 10  # no slot is the usual first one any more
    users = {renumber_slots(messages, kinds, random.Random(seed))[1]["content"] for seed in range(40)}
    assert users == {f"I am <U{i}>." for i in range(1, 5)}  # a kind's slots only, all of them


def test_renumbered_demonstrations_mean_what_they_meant(delex_demos):
    config, _, demos = delex_demos
    kinds = id_kinds(config)
    rng = random.Random(0)
    changed = 0
    for demo in demos:
        out = renumber_slots(demo.messages, kinds, rng)
        assert _canonical(out) == _canonical(demo.messages) == demo.messages
        changed += out != demo.messages
    assert changed >= len(demos) - 2


def test_make_env_follows_the_config_and_the_override():
    config = EnvConfig()
    bundle = build_training_worlds(config)[0]
    task = bundle.tasks()[0]
    assert not isinstance(make_env(bundle, task, config, user_seed=0), DelexEnv)
    assert isinstance(make_env(bundle, task, config, user_seed=0, delexicalise=True), DelexEnv)
    on = EnvConfig(delexicalise=True)
    assert not isinstance(make_env(bundle, task, on, user_seed=0, delexicalise=False), DelexEnv)
    assert len(id_kinds(on)) == 4
    with pytest.raises(ConfigError, match="env.delexicalise"):
        id_kinds(EnvConfig(domain="toy"))


def _world_ids(domain) -> set[str]:
    data = domain.new_state().materialize()
    found = set(data["users"]) | set(data["reservations"]) | set(data["flights"])
    for user in data["users"].values():
        found |= set(user["payment_methods"])
    return found
