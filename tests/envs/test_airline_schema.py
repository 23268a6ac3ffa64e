"""Generated tool schemas, argument validation at the boundary, and the calculator."""
from __future__ import annotations

import math
import random

import pytest

from agentgrpo.envs.airline import AirlineDomain, load_tau_bench
from agentgrpo.envs.airline.core.calculator import ExpressionError, evaluate_expression
from agentgrpo.envs.airline.core.schema import ArgumentError, parse_docstring, validate_arguments

FLIGHT = ["array", {"required": ["flight_number", "date"], "flight_number": "string", "date": "string"}]
PASSENGERS = ["array", {"required": ["first_name", "last_name", "dob"],
                        "first_name": "string", "last_name": "string", "dob": "string"}]
CABIN = ["string", ["basic_economy", "economy", "business"]]

# Facts of τ-bench's hand-written schemas (names, JSON types, enums, required lists),
# reduced to: type, [type, enum], ["array", item], or {"required": [...], field: ...}.
TAU_BENCH_SCHEMA_FACTS = {
    "book_reservation": {
        "required": ["user_id", "origin", "destination", "flight_type", "cabin", "flights", "passengers",
                     "payment_methods", "total_baggages", "nonfree_baggages", "insurance"],
        "user_id": "string", "origin": "string", "destination": "string",
        "flight_type": ["string", ["one_way", "round_trip"]], "cabin": CABIN, "flights": FLIGHT,
        "passengers": PASSENGERS,
        "payment_methods": ["array", {"required": ["payment_id", "amount"], "payment_id": "string",
                                      "amount": "number"}],
        "total_baggages": "integer", "nonfree_baggages": "integer", "insurance": ["string", ["yes", "no"]]},
    "calculate": {"required": ["expression"], "expression": "string"},
    "cancel_reservation": {"required": ["reservation_id"], "reservation_id": "string"},
    "get_reservation_details": {"required": ["reservation_id"], "reservation_id": "string"},
    "get_user_details": {"required": ["user_id"], "user_id": "string"},
    "list_all_airports": {"required": []},
    "search_direct_flight": {"required": ["origin", "destination", "date"], "origin": "string",
                             "destination": "string", "date": "string"},
    "search_onestop_flight": {"required": ["origin", "destination", "date"], "origin": "string",
                              "destination": "string", "date": "string"},
    "send_certificate": {"required": ["user_id", "amount"], "user_id": "string", "amount": "number"},
    "think": {"required": ["thought"], "thought": "string"},
    "transfer_to_human_agents": {"required": ["summary"], "summary": "string"},
    "update_reservation_baggages": {
        "required": ["reservation_id", "total_baggages", "nonfree_baggages", "payment_id"],
        "reservation_id": "string", "total_baggages": "integer", "nonfree_baggages": "integer",
        "payment_id": "string"},
    "update_reservation_flights": {"required": ["reservation_id", "cabin", "flights", "payment_id"],
                                   "reservation_id": "string", "cabin": CABIN, "flights": FLIGHT,
                                   "payment_id": "string"},
    "update_reservation_passengers": {"required": ["reservation_id", "passengers"],
                                      "reservation_id": "string", "passengers": PASSENGERS},
}


def reduce_schema(schema: dict):
    kind = schema["type"]
    if kind == "array":
        return ["array", reduce_schema(schema["items"])]
    if kind == "object":
        fields = {k: reduce_schema(v) for k, v in schema["properties"].items()}
        return {"required": schema["required"], **fields}
    return [kind, schema["enum"]] if "enum" in schema else kind


@pytest.fixture(scope="module")
def domain(tau_bench_dir) -> AirlineDomain:
    return load_tau_bench(tau_bench_dir)


def test_generated_schemas_match_tau_bench_facts(domain):
    schemas = domain.tool_schemas()
    assert [s["function"]["name"] for s in schemas] == list(TAU_BENCH_SCHEMA_FACTS)  # τ-bench's order
    for schema in schemas:
        function = schema["function"]
        assert schema["type"] == "function" and function["description"]
        assert reduce_schema(function["parameters"]) == TAU_BENCH_SCHEMA_FACTS[function["name"]]
        for prop in function["parameters"]["properties"].values():
            assert prop["description"], function["name"]


def test_tool_kinds(domain):
    assert domain.tool_names == frozenset(TAU_BENCH_SCHEMA_FACTS)
    assert domain.write_tools == {"book_reservation", "cancel_reservation", "send_certificate",
                                  "update_reservation_baggages", "update_reservation_flights",
                                  "update_reservation_passengers"}
    assert domain.read_tools == {"get_user_details", "get_reservation_details", "list_all_airports",
                                 "search_direct_flight", "search_onestop_flight"}
    assert domain.terminal_tools == {"transfer_to_human_agents"}
    assert not {"think", "calculate"} & (domain.read_tools | domain.write_tools)


def test_parse_docstring_joins_continuation_lines():
    doc = """Do a thing.

    More words.

    Args:
        alpha: First line
            and its continuation.
        beta: Second.

    Returns:
        Something.
    """
    assert parse_docstring(doc) == ("Do a thing. More words.",
                                    {"alpha": "First line and its continuation.", "beta": "Second."})


@pytest.mark.parametrize("name,kwargs,message", [
    ("fly_me", {}, "Error: unknown tool 'fly_me'"),
    (None, {}, "Error: unknown tool 'NoneType'"),
    ("get_user_details", ["mia_li_3668"], "Error: invalid arguments for get_user_details: arguments must be "
                                          "a JSON object, got list"),
    ("get_user_details", {}, "Error: invalid arguments for get_user_details: missing required argument 'user_id'"),
    ("get_user_details", {"user_id": "a", "verbose": True},
     "Error: invalid arguments for get_user_details: unexpected argument 'verbose'"),
    ("get_user_details", {"user_id": 7}, "Error: invalid arguments for get_user_details: argument 'user_id' "
                                         "must be a string, got int 7"),
    ("update_reservation_baggages",
     {"reservation_id": "YAX4DR", "total_baggages": 2.0, "nonfree_baggages": 0, "payment_id": "x"},
     "Error: invalid arguments for update_reservation_baggages: argument 'total_baggages' must be an "
     "integer, got float 2.0"),
    ("update_reservation_baggages",
     {"reservation_id": "YAX4DR", "total_baggages": True, "nonfree_baggages": 0, "payment_id": "x"},
     "Error: invalid arguments for update_reservation_baggages: argument 'total_baggages' must be an "
     "integer, got bool True"),
    ("send_certificate", {"user_id": "a", "amount": math.nan},
     "Error: invalid arguments for send_certificate: argument 'amount' must be a finite number, got nan"),
    ("send_certificate", {"user_id": "a", "amount": 10**30},
     "Error: invalid arguments for send_certificate: argument 'amount' is out of range (|value| must be <= 2**53)"),
    ("update_reservation_flights",
     {"reservation_id": "YAX4DR", "cabin": "first", "flights": [], "payment_id": "x"},
     "Error: invalid arguments for update_reservation_flights: argument 'cabin' must be one of "
     "'basic_economy', 'economy', 'business'; got string 'first'"),
    ("update_reservation_flights",
     {"reservation_id": "YAX4DR", "cabin": "economy", "flights": [{"flight_number": "HAT001"}],
      "payment_id": "x"},
     "Error: invalid arguments for update_reservation_flights: argument 'flights[0]' is missing the field 'date'"),
    ("update_reservation_passengers",
     {"reservation_id": "YAX4DR", "passengers": [{"first_name": "A", "last_name": "B", "dob": None}]},
     "Error: invalid arguments for update_reservation_passengers: argument 'passengers[0].dob' must be a "
     "string, got NoneType None"),
])
def test_bad_calls_are_error_observations(domain, name, kwargs, message):
    state = domain.new_state()
    assert domain.execute(state, name, kwargs) == message
    assert state.num_touched == 0


def test_extra_nested_fields_rejected_in_fixed_mode_kept_in_tau_bench_mode(tau_bench_dir, domain):
    kwargs = {"reservation_id": "NOPE00", "cabin": "economy", "payment_id": "x",
              "flights": [{"flight_number": "HAT001", "date": "2024-05-20", "price": 1}]}
    fixed = load_tau_bench(tau_bench_dir, compat="fixed")
    assert fixed.execute(fixed.new_state(), "update_reservation_flights", kwargs) == (
        "Error: invalid arguments for update_reservation_flights: argument 'flights[0]' has an unexpected "
        "field 'price'")
    # τ-bench reads only the fields it uses: the call gets as far as the tool itself
    assert domain.execute(domain.new_state(), "update_reservation_flights", kwargs) == (
        "Error: reservation not found")
    # unknown top-level arguments stay errors in both modes (τ-bench's invoke(**kwargs) raises)
    for dom in (domain, fixed):
        assert dom.execute(dom.new_state(), "get_user_details", {"user_id": "a", "verbose": True}) == (
            "Error: invalid arguments for get_user_details: unexpected argument 'verbose'")


def test_kept_extra_fields_are_checked_json_copies():
    flights = {"type": "object", "properties": {
        "flights": {"type": "array", "items": {"type": "object", "properties": {"date": {"type": "string"}},
                                               "required": ["date"]}}}}
    extra = {"note": ["a", {"b": None}], "n": 1.5}
    given = {"flights": [{"note": extra["note"], "date": "2024-05-20", "n": 1.5}]}
    kept = validate_arguments(flights, given, "keep")
    assert kept == given and list(kept["flights"][0]) == ["note", "date", "n"]  # the caller's order
    assert kept["flights"][0]["note"] is not extra["note"] and kept["flights"][0]["note"][1] is not extra["note"][1]
    for bad, message in [({1: 2}, "field name that is not a string"), (math.nan, "finite number"),
                         (2**60, "out of range"), ({1, 2}, "must be a JSON value")]:
        with pytest.raises(ArgumentError, match=message):
            validate_arguments(flights, {"flights": [{"date": "d", "x": bad}]}, "keep")
    with pytest.raises(ArgumentError, match="unexpected field 'note'"):
        validate_arguments(flights, given)  # "reject" is the default


def test_validated_arguments_are_copies(domain):
    """The database never aliases caller data (τ-bench stores the caller's lists)."""
    state = domain.new_state()
    people = [{"first_name": "Chen", "last_name": "Lee", "dob": "1967-12-12"},
              {"first_name": "Mei", "last_name": "Lee", "dob": "1970-02-02"}]
    domain.execute(state, "update_reservation_passengers", {"reservation_id": "YAX4DR", "passengers": people})
    people[1]["first_name"] = "Changed"
    assert state.get("reservations", "YAX4DR")["passengers"][1]["first_name"] == "Mei"


def test_reads_cannot_write(domain):
    state = domain.new_state()
    with pytest.raises(RuntimeError, match="inside state.transaction"):
        state.mutable("users", "mia_li_3668")


# ---- calculator -----------------------------------------------------------------------
def random_expression(rng: random.Random, depth: int = 0) -> str:
    """A random expression of the accepted grammar (numbers, + - * /, unary, parentheses)."""
    roll = rng.random()
    if depth > 4 or roll < 0.3:
        return rng.choice(["0", "7", "12", "250", "3.5", ".5", "5.", "0.25", "1000"])
    if roll < 0.4:
        return rng.choice(["-", "+"]) + random_expression(rng, depth + 1)
    if roll < 0.55:
        return "(" + random_expression(rng, depth + 1) + ")"
    op = rng.choice(["+", "-", "*", "/"])
    space = rng.choice(["", " "])
    return f"{random_expression(rng, depth + 1)}{space}{op}{space}{random_expression(rng, depth + 1)}"


def test_calculator_agrees_with_python_arithmetic():
    """On 2,000 random grammatical expressions, value and error class equal Python's eval."""
    rng = random.Random(7)
    for _ in range(2000):
        text = random_expression(rng)
        try:
            expected = eval(text, {"__builtins__": None}, {})  # the oracle, in the test only
        except ZeroDivisionError:
            with pytest.raises(ZeroDivisionError):
                evaluate_expression(text)
            continue
        value = evaluate_expression(text)
        assert type(value) is type(expected) and (value == expected or (value != value and expected != expected))


@pytest.mark.parametrize("text", ["", "(", "1 +", "1 2", "(1)(2)", "01", "1..2", ". 5", "2**3", "7//2",
                                  "(" * 250 + "1" + ")" * 250, "-" * 300 + "1", "1e5", "abs(1)"])
def test_calculator_rejects(text):
    with pytest.raises(ValueError):
        evaluate_expression(text)


def test_calculator_accepts_what_python_accepts():
    assert evaluate_expression("00") == 0 and evaluate_expression(" 1 + 1 ") == 2
    assert evaluate_expression("- - 1") == 1 and evaluate_expression("5.+.5") == 5.5
    assert evaluate_expression("3 - -2 * 4") == 11
    with pytest.raises(ExpressionError, match="invalid characters"):
        evaluate_expression("1\t+ 1")
