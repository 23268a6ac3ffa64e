"""Entity schemas, placeholder detection and observation scanning (rewards/entities.py)."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgrpo.rewards.entities import occurs_as_token


@pytest.fixture(scope="module")
def ents(prm):
    return prm.entities


@pytest.mark.parametrize("value", [
    "unknown", "UNKNOWN", " Unknown ", "xxx", "XXXXXX", "placeholder", "<...>", "<user_id>",
    "user_id", "TBD", "N/A", "example", "your_user_id", "your reservation id", "...", "…",
    "", "   ", "null", "None",
])
def test_placeholder_values(ents, value):
    assert ents.is_placeholder(value)


@pytest.mark.parametrize("value", [
    "mia_li_3668", "ZFA04Y", "JFK", "<U1>", "<R16>", "<A3>", "economy", "User wants a refund for a cancelled flight.",
    "Your flight was delayed by four hours and the passenger wants compensation.",
    "an example of nothing", "2 + 2",
])
def test_non_placeholder_values(ents, value):
    assert not ents.is_placeholder(value)


@pytest.mark.parametrize("etype, value, ok", [
    ("user_id", "mia_li_3668", True), ("user_id", "sara_doe_496", False),
    ("user_id", "john", False), ("user_id", "Mia_Li_3668", False),
    ("reservation_id", "ZFA04Y", True), ("reservation_id", "HATHAT", True),
    ("reservation_id", "ABC", False), ("reservation_id", "zfa04y", False),
    ("payment_id", "credit_card_4421486", True), ("payment_id", "gift_card_1", True),
    ("payment_id", "certificate_7504069", True), ("payment_id", "paypal_123", False),
    ("flight_number", "HAT001", True), ("flight_number", "HAT12", False),
    ("flight_number", "UA123", False), ("airport", "JFK", True), ("airport", "JFKX", False),
    ("airport", "jfk", False), ("user_id", "<U1>", True), ("reservation_id", "<R12>", True),
    ("payment_id", "<P3>", True), ("flight_number", "<F48>", True), ("airport", "<A20>", True),
    ("reservation_id", "<U1>", False), ("airport", "<A0>", False), ("user_id", "<user_id>", False),
    ("date", "2024-05-20", True), ("date", "2024-02-29", True),
    ("date", "2023-02-29", False), ("date", "2024-13-01", False), ("date", "May 20", False),
    ("reservation_id", 123456, False), ("user_id", None, False),
])
def test_schema_fit(ents, etype, value, ok):
    assert ents.fits(etype, value) is ok


def test_bad_arguments_reports_nested_paths(ents):
    args = {
        "user_id": "mia_li_3668", "origin": "JFK", "destination": "sea",
        "flights": [{"flight_number": "HAT136", "date": "2024-05-20"},
                    {"flight_number": "HAT039", "date": "2024-02-30"}],
        "passengers": [{"first_name": "Mia", "last_name": "Li", "dob": "unknown"}],
        "payment_methods": [{"payment_id": "credit_card_4421486", "amount": 5}],
        "insurance": "no", "total_baggages": 3,
    }
    assert ents.bad_arguments(args) == ["destination", "flights[1].date", "passengers[0].dob"]


def test_argument_entities_are_the_well_formed_governed_values(ents):
    args = {"reservation_id": "ZFA04Y", "cabin": "economy", "payment_id": "TBD",
            "flights": [{"flight_number": "HAT136", "date": "2024-05-20"}]}
    assert ents.argument_entities(args) == [
        ("reservation_id", "ZFA04Y"), ("flight_number", "HAT136"), ("date", "2024-05-20")]


def test_non_string_id_is_schema_invalid(ents):
    assert ents.bad_arguments({"reservation_id": 123456, "amount": 100}) == ["reservation_id"]


def test_extract_reads_whole_tokens_of_each_type(ents):
    text = ('{"reservation_id": "4WQ150", "user_id": "chen_jackson_3290", "origin": "DFW", '
            '"flights": [{"flight_number": "HAT170", "date": "2024-05-22"}], '
            '"payment_history": [{"payment_id": "gift_card_3576581"}], '
            '"created_at": "2024-05-02T03:10:19", "note": "XZFA04Y9 hat170 ABCD"}')
    found = ents.extract(text)
    assert ("reservation_id", "4WQ150") in found
    assert ("user_id", "chen_jackson_3290") in found
    assert ("airport", "DFW") in found
    assert ("flight_number", "HAT170") in found
    assert ("date", "2024-05-22") in found
    assert ("payment_id", "gift_card_3576581") in found
    # glued to other word characters, wrong case, or a timestamp: not entities
    assert not any(v in ("ZFA04Y", "hat170", "ABC", "BCD", "2024-05-02") for _, v in found)


def test_user_id_in_free_text(ents):
    assert ("user_id", "mia_li_3668") in ents.extract("Sure, my user ID is mia_li_3668.")


@pytest.mark.parametrize("text, ok", [
    ('"ZFA04Y"', True), ("ZFA04Y", True), ("id ZFA04Y.", True), ("XZFA04Y", False),
    ("ZFA04Y_", False), ("ZFA04Y2 then ZFA04Y", True), ("zfa04y", False),
])
def test_occurs_as_token(text, ok):
    assert occurs_as_token("ZFA04Y", text) is ok


_PIECES = st.sampled_from([
    "ZFA04Y", "HAT136", "JFK", "mia_li_3668", "2024-05-20", "credit_card_1", "X", "9", "_",
    " ", '"', ",", "-", ":", "abc", "2024-02-30", "HATHAT",
])


@settings(max_examples=200, deadline=None)
@given(pieces=st.lists(_PIECES, max_size=12))
def test_token_check_agrees_with_scanning(ents, pieces):
    """The engine's fast check (occurs_as_token) against the reference scan (extract)."""
    text = "".join(pieces)
    scanned = ents.extract(text)
    for etype, value in [("reservation_id", "ZFA04Y"), ("flight_number", "HAT136"),
                         ("airport", "JFK"), ("user_id", "mia_li_3668"),
                         ("date", "2024-05-20"), ("payment_id", "credit_card_1"),
                         ("reservation_id", "HATHAT")]:
        assert ((etype, value) in scanned) == occurs_as_token(value, text), (text, value)


def test_tau_bench_gold_actions_are_well_formed(prm, tau_bench_dir):
    """No false P1/P2 on real data: every gold action of the 50 τ-bench test tasks
    passes the schemas, and every tool they use has a class."""
    tasks = json.loads((tau_bench_dir / "tasks_test.json").read_text())
    actions = [a for task in tasks for a in task["actions"]]
    assert len(actions) > 50
    classified = {name for names in prm.config.tool_classes.values() for name in names}
    for action in actions:
        assert prm.entities.bad_arguments(action["kwargs"]) == [], action
        assert action["name"] in classified


def test_tau_bench_records_fit_the_schemas(prm, tau_bench_dir):
    reservations = json.loads((tau_bench_dir / "reservations.json").read_text())
    users = json.loads((tau_bench_dir / "users.json").read_text())
    for rid, res in reservations.items():
        fields = {k: res[k] for k in ("reservation_id", "user_id", "origin", "destination",
                                      "flights", "passengers", "payment_history")}
        assert prm.entities.bad_arguments(fields) == [], rid
    for uid, user in users.items():
        ids = {"user_id": uid, "dob": user["dob"], "payment_id": list(user["payment_methods"])}
        assert prm.entities.bad_arguments(ids) == [], uid
