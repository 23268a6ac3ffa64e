"""Relabelling ids for SFT: every copied id gets a fresh same-shape value, consistently, and
nothing that is not an id changes."""
from __future__ import annotations

import json
import random
import re

import pytest

from agentgrpo.envs.config import EnvConfig
from agentgrpo.envs.registry import build_env
from agentgrpo.train.copy_check import copied_values
from agentgrpo.train.demonstrations import collect_demonstrations
from agentgrpo.train.id_relabel import relabel_ids


def _call(name, call_id="call_1", **arguments):
    return {"role": "assistant", "content": "I look it up.", "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def _shape(value: str) -> str:
    return re.sub(r"[A-Z]", "A", re.sub(r"\d", "9", value))


SEARCH = [
    {"role": "system", "content": "Policy. Example reservation ABC123."},
    {"role": "user", "content": "I am mia_li_3668 and want HAT034 on 2024-05-26 for $171, call_1 style."},
    _call("get_user_details", user_id="mia_li_3668"),
    {"role": "tool", "tool_call_id": "call_1", "name": "get_user_details",
     "content": json.dumps({"reservations": ["0KEWFW", "U73KOY"], "address1": "1 Road",
                            "created_at": "2024-05-15T15:00:00"})},
    {"role": "tool", "tool_call_id": "call_2", "name": "search_direct_flight",
     "content": json.dumps([{"flight_number": "HAT031"}, {"flight_number": "HAT034"}, {"flight_number": "HAT0345"}])},
    _call("book_reservation", call_id="call_2", user_id="mia_li_3668",
          flights=[{"flight_number": "HAT034", "date": "2024-05-26"}], amount=171),
]


def test_copied_ids_and_their_shape_mates_are_refilled_consistently_and_nothing_else_changes():
    out = relabel_ids(SEARCH, random.Random(0))
    assert SEARCH[1]["content"].startswith("I am mia_li_3668")  # the input is not changed
    # get_user_details(user), book_reservation(user, flight, date): the same slots, new ids, one value each
    new_user, again, new_flight, date = copied_values(out)
    assert again == new_user and date == "2024-05-26"
    assert new_user != "mia_li_3668" and new_user.startswith("mia_li_") and _shape(new_user) == "mia_li_9999"
    assert new_flight != "HAT034" and _shape(new_flight) == "AAA999"
    # the user's words, the calls and the tool's text all carry the same new values
    assert out[1]["content"] == f"I am {new_user} and want {new_flight} on 2024-05-26 for $171, call_1 style."
    assert json.loads(out[5]["tool_calls"][0]["function"]["arguments"])["flights"][0] == {
        "flight_number": new_flight, "date": "2024-05-26"}
    flights = [f["flight_number"] for f in json.loads(out[4]["content"])]
    # HAT031 has the copied flight's shape, so it is refilled too (the copied one is not the odd one
    # out); HAT0345 is another shape and a longer word that merely contains HAT034: left alone
    assert flights[1] == new_flight and flights[0] != "HAT031" and _shape(flights[0]) == "AAA999"
    assert flights[2] == "HAT0345"
    user_record = json.loads(out[3]["content"])
    # reservation ids of another shape than any copied id, dates, times, keys and call ids: unchanged
    assert user_record == json.loads(SEARCH[3]["content"])
    assert out[0] == SEARCH[0] and out[5]["tool_calls"][0]["id"] == "call_2" and out[3]["tool_call_id"] == "call_1"


def test_a_transcript_that_copies_no_id_is_unchanged_and_draws_differ():
    plain = [{"role": "user", "content": "Hi, flight HAT034?"}, {"role": "assistant", "content": "No."}]
    assert relabel_ids(plain, random.Random(0)) == plain
    draws = {copied_values(relabel_ids(SEARCH, random.Random(seed)))[0] for seed in range(20)}
    assert len(draws) == 20


@pytest.fixture(scope="module")
def demonstrations():
    config = EnvConfig()
    return collect_demonstrations(build_env(config), config, ["covered_seen"], per_task=1, seed=0)


def test_real_demonstrations_keep_their_structure_with_every_word_id_refilled(demonstrations):
    rng = random.Random(1)
    refilled = 0
    for demo in demonstrations:
        before, after = copied_values(demo.messages), copied_values(relabel_ids(demo.messages, rng))
        assert len(after) == len(before)  # the same calls copy, in the same order
        mapping: dict[str, str] = {}
        for old, new in zip(before, after):
            assert _shape(old) == _shape(new)
            if re.fullmatch(r"[A-Za-z0-9_]+", old) and re.search(r"\d", old) and re.search(r"[A-Za-z]", old):
                assert new != old
                refilled += 1
            else:
                assert new == old  # dates keep their meaning
            assert mapping.setdefault(old, new) == new  # one id, one new value throughout
    assert refilled >= len(demonstrations)  # every demonstration copies at least its user id
