"""The scripted user (confirmations, answers, stopping, robustness) and the LLM user."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgrpo.config import ConfigError
from agentgrpo.envs.airline.core.environment import AirlineEnv, run_episode
from agentgrpo.envs.airline.simulation.plans import oracle_agent
from agentgrpo.envs.airline.tasks.generate import FAMILY_NAMES, generate_domain
from agentgrpo.envs.types import USER_STOP, Task
from agentgrpo.envs.user_sim import LLMUser, ScriptedUser
from agentgrpo.openai_client import OpenAIChatPolicy, llm_user_client


@pytest.fixture(scope="module")
def domain():
    return generate_domain(0, n_tasks=2 * len(FAMILY_NAMES))


def task_of(domain, family: str, nth: int = 0) -> Task:
    return [t for t in domain.tasks if t.family == family][nth]


def oracle_messages(domain, task) -> list[str]:
    result = run_episode(AirlineEnv(domain, task, ScriptedUser(task)), oracle_agent(domain, task))
    return [m["content"] for m in result.messages if m["role"] == "assistant" and m["content"]
            and "tool_calls" not in m]


def confirmation_of(domain, task) -> str:
    return next(m for m in oracle_messages(domain, task) if "(yes/no)" in m)


def fresh_user(task) -> ScriptedUser:
    user = ScriptedUser(task, seed=0)
    user.reset()
    return user


def is_yes(reply: str) -> bool:
    return reply.lower().startswith("yes")


def other_reservation(domain, rid: str) -> str:
    return next(r for r in sorted(domain.data["reservations"]) if r != rid)


# ---- confirmations ---------------------------------------------------------------------
def test_accepts_the_matching_change_and_rejects_a_wrong_reservation(domain):
    task = task_of(domain, "change_flight")
    text = confirmation_of(domain, task)
    assert is_yes(fresh_user(task).step(text))
    rid = task.scenario.reservation_id
    wrong = text.replace(rid, other_reservation(domain, rid))
    reply = fresh_user(task).step(wrong)
    assert reply.startswith("No") and rid in reply  # restates what it wants


def test_rejects_a_wrong_flight_date_or_payment(domain):
    task = task_of(domain, "change_flight")
    text = confirmation_of(domain, task)
    new_flight = task.scenario.flight_choices[0]
    other_flight = next(f for f in sorted(domain.data["flights"]) if f not in text)
    assert fresh_user(task).step(text.replace(new_flight, other_flight)).startswith("No")
    new_date = task.scenario.new_date
    other_date = "2024-05-29" if new_date != "2024-05-29" else "2024-05-28"
    assert fresh_user(task).step(text.replace(new_date, other_date)).startswith("No")
    pid = task.scenario.payment_ids[0]
    assert fresh_user(task).step(text.replace(pid, "credit_card_0000001")).startswith("No")


def test_rejects_a_wrong_cabin(domain):
    task = task_of(domain, "change_cabin")
    text = confirmation_of(domain, task)
    assert is_yes(fresh_user(task).step(text))
    target = task.scenario.cabin.replace("_", " ")
    wrong = next(c for c in ("business", "economy", "basic economy") if c not in text)
    assert fresh_user(task).step(text.replace(f"to {target}", f"to {wrong}")).startswith("No")


def test_rejects_a_wrong_certificate_amount_and_a_wrong_action(domain):
    task = task_of(domain, "compensation_cancelled")
    text = confirmation_of(domain, task)
    amount = task.actions[0].kwargs["amount"]
    assert is_yes(fresh_user(task).step(text))
    assert fresh_user(task).step(text.replace(f"${amount}", f"${amount + 50}")).startswith("No")
    rid = task.scenario.reservation_id
    cancel = f"Here is what I will do: cancel reservation {rid}. Shall I proceed (yes/no)?"
    assert fresh_user(task).step(cancel).startswith("No")  # keyword of another write


def test_booking_needs_every_passenger_and_the_right_amounts(domain):
    task = task_of(domain, "book_round_trip")
    text = confirmation_of(domain, task)
    assert is_yes(fresh_user(task).step(text))
    name = task.scenario.passengers[0]["first_name"]
    assert fresh_user(task).step(text.replace(name, "Zed")).startswith("No")
    total = task.actions[0].kwargs["payment_methods"][-1]["amount"]
    assert fresh_user(task).step(text.replace(f"${total}.", f"${total + 1}.")).startswith("No")


def test_refused_family_user_still_wants_its_request(domain):
    """τ-bench semantics: the user would accept the forbidden write; the agent must refuse."""
    task = task_of(domain, "cancel_refused")
    rid = task.scenario.reservation_id
    assert is_yes(fresh_user(task).step(f"I will cancel reservation {rid}. Shall I proceed "
                                        f"(yes/no)?"))
    insurance = task_of(domain, "add_insurance_refused")
    assert fresh_user(insurance).step("Shall I proceed (yes/no)?").startswith("No")


# ---- answers ---------------------------------------------------------------------------
def test_answers_every_kind_of_question(domain):
    book = task_of(domain, "book_payment_limit")
    s = book.scenario
    user = fresh_user(book)
    assert s.user_id in user.step("Could you please give me your user id?")
    trip = user.step("Where would you like to fly from and to, and on which dates?")
    assert s.trip["origin"] in trip and s.trip["destination"] in trip
    listing = f"Options: {s.flight_choices[0]} and HAT999. Which flight would you like?"
    assert s.flight_choices[0] in user.step(listing)
    people = user.step("Please give me the first name, last name and date of birth of each "
                       "passenger.")
    assert all(p["first_name"] in people and p["dob"] in people for p in s.passengers)
    bags = user.step("How many checked bags, and would you like travel insurance?")
    assert f"{s.bags} checked bag" in bags and "insurance" in bags.lower()
    first = user.step("Which payment methods would you like to use?")
    assert all(pid in first for pid in s.rejected_payment_ids)
    second = user.step("Only one is allowed. Which payment methods would you like instead?")
    assert all(pid in second for pid in s.payment_ids)

    cancel = task_of(domain, "cancel_insured")
    answer = fresh_user(cancel).step("Which reservation, and what is the reason?")
    assert cancel.scenario.reservation_id in answer
    assert any(word in answer for word in ("ill", "storm"))
    change = task_of(domain, "change_flight")
    reply = fresh_user(change).step("Which reservation, and what change would you like?")
    assert change.scenario.reservation_id in reply and "May" in reply
    cabin = task_of(domain, "change_cabin")
    assert cabin.scenario.cabin.replace("_", " ") in \
        fresh_user(cabin).step("Which cabin would you like?")
    bags_task = task_of(domain, "add_bags")
    assert f"add {bags_task.scenario.bags} checked bag" in \
        fresh_user(bags_task).step("How many checked bags would you like to add?")
    update = task_of(domain, "update_passengers")
    field = update.scenario.passenger_update["field"]
    assert update.scenario.passenger_update["new"][field] in \
        fresh_user(update).step("What needs to be corrected?")


def test_does_not_invent_what_it_does_not_know(domain):
    book = task_of(domain, "book_one_way")
    assert "don't have a reservation" in fresh_user(book).step("What is your reservation id?")


# ---- stopping ----------------------------------------------------------------------------
def test_stops_after_the_goal_is_done(domain):
    task = task_of(domain, "cancel_business")
    user = fresh_user(task)
    assert is_yes(user.step(confirmation_of(domain, task)))
    assert user.step("Done: the reservation is cancelled. Is there anything else I can help "
                     "you with?") == USER_STOP


def test_stops_when_the_answer_is_given(domain):
    task = task_of(domain, "info_gift_card_balance")
    user = fresh_user(task)
    assert user.step("Your balance is large.") != USER_STOP
    assert user.step(f"Together that is ${task.outputs[0]}.") == USER_STOP


def test_accepts_a_correct_refusal_and_insists_once_on_a_wrong_one(domain):
    refused = task_of(domain, "cancel_refused")
    assert fresh_user(refused).step("I'm sorry, but I cannot cancel it.") == USER_STOP
    allowed = task_of(domain, "cancel_business")
    user = fresh_user(allowed)
    first = user.step("I'm sorry, but I cannot cancel it.")
    assert first != USER_STOP and allowed.scenario.reservation_id in first
    assert user.step("No, that is not possible.") == USER_STOP


def test_bounded_patience_and_turn_limit(domain):
    task = task_of(domain, "change_cabin")
    user = ScriptedUser(task, seed=0, patience=3)
    user.reset()
    replies = [user.step("The weather is lovely today.") for _ in range(3)]
    assert replies[:2] == [r for r in replies[:2] if r != USER_STOP] and replies[2] == USER_STOP
    assert user.step("Anything at all.") == USER_STOP  # stays stopped
    looping = ScriptedUser(task, seed=0, max_turns=6)
    looping.reset()
    replies = [looping.step("Could you please give me your user id?") for _ in range(8)]
    assert USER_STOP in replies and replies.index(USER_STOP) <= 6


def test_deterministic_given_the_seed(domain):
    task = task_of(domain, "cancel_within_24h")
    messages = ["Hello?", "Could you please give me your user id?", "Which reservation?",
                "What is the reason?", "random words", "Shall I proceed (yes/no)?"]

    def replies(seed: int) -> list[str]:
        user = ScriptedUser(task, seed=seed)
        return [user.reset()] + [user.step(m) for m in messages]

    assert replies(3) == replies(3)
    assert any(replies(s) != replies(0) for s in range(1, 6))


def test_scenario_as_dict_and_missing_scenario(domain):
    task = task_of(domain, "add_bags")
    as_loaded = Task(**{**task.__dict__, "scenario": task.to_dict()["scenario"]})
    assert ScriptedUser(as_loaded).reset() == ScriptedUser(task).reset()
    with pytest.raises(ValueError, match="no scenario"):
        ScriptedUser(Task("t", "u", "instruction", []))


TOKENS = ["yes", "no", "(yes/no)", "Shall I proceed", "cancel", "HAT001", "2024-05-20",
          "May 3", "$50", "business", "basic economy", "credit_card_1234567", "ABC123",
          "user id", "reservation id", "bags", "?", "transfer", "human agent", "cannot",
          "anything else", "\n", "", "🙂", "{}", "null", "3 checked bags", "$", "$1,2,3.4.5"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=60), st.sampled_from(TOKENS)), max_size=12),
       st.sampled_from(FAMILY_NAMES))
def test_never_raises_on_arbitrary_text(domain, pieces, family):
    user = fresh_user(task_of(domain, family))
    for i in range(len(pieces) + 1):
        reply = user.step(" ".join(pieces[:i]))
        assert isinstance(reply, str) and reply


# ---- LLM user against a local OpenAI-compatible server -----------------------------------
class _ChatServer(BaseHTTPRequestHandler):
    replies: list[tuple[int, str]] = []
    seen: list[dict] = []

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append({"body": body, "auth": self.headers.get("Authorization")})
        status, content = type(self).replies.pop(0)
        payload = json.dumps({"choices": [{"message": {"content": content}}]}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def test_llm_user_protocol_retries_and_stop(monkeypatch):
    server = HTTPServer(("127.0.0.1", 0), _ChatServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        _ChatServer.replies = [(500, ""), (200, "Hi, I want to cancel my trip."),
                               (200, "Thanks! ###STOP###")]
        _ChatServer.seen = []
        monkeypatch.setenv("TEST_USER_KEY", "sekret")
        task = Task("t", "u", "Your user id is u. You want to cancel.", [])
        client = OpenAIChatPolicy(f"http://127.0.0.1:{server.server_port}/v1", "m",
                                  api_key_env="TEST_USER_KEY", backoff=0.01)
        user = LLMUser(task, client, seed=4)
        assert user.base_url == f"http://127.0.0.1:{server.server_port}/v1"
        assert user.reset() == "Hi, I want to cancel my trip."
        assert user.step("Sure, which reservation?") == USER_STOP
        first = _ChatServer.seen[1]["body"]["messages"]
        assert first[0]["role"] == "system" and "You want to cancel." in first[0]["content"]
        assert first[1] == {"role": "user", "content": "Hi! How can I help you today?"}
        last = _ChatServer.seen[2]["body"]["messages"]
        assert last[-1] == {"role": "user", "content": "Sure, which reservation?"}
        assert last[-2] == {"role": "assistant", "content": "Hi, I want to cancel my trip."}
        assert _ChatServer.seen[0]["auth"] == "Bearer sekret"
        assert _ChatServer.seen[0]["body"]["seed"] == 4
        assert _ChatServer.seen[0]["body"]["model"] == "m"
        _ChatServer.replies = [(400, "bad")]
        with pytest.raises(RuntimeError, match="400"):
            user.step("hello")
        _ChatServer.replies = [(503, ""), (429, "")]
        user.client.max_retries = 1
        with pytest.raises(RuntimeError, match="429"):
            user.step("hello again")
    finally:
        server.shutdown()


def test_make_env_passes_the_chat_client_to_the_llm_user(domain):
    from agentgrpo.envs.airline.factory import EnvBundle, EnvConfig, UserConfig, make_env

    class EchoClient:
        base_url = "http://echo/v1"

        def __init__(self):
            self.calls = []

        def complete(self, messages, *, temperature=0.0, seed=None):
            self.calls.append((list(messages), temperature, seed))
            return {"role": "assistant", "content": "I want to add a bag."}

    task = task_of(domain, "add_bags")
    config = EnvConfig(user=UserConfig(kind="llm", base_url="http://10.0.0.9:8000", temperature=0.5))
    bundle = EnvBundle(domain, {"unseen": [task]})
    client = EchoClient()
    env = make_env(bundle, task, config, user_seed=7, user_client=client)
    assert env.reset() == "I want to add a bag."
    assert env.user.client is client and client.calls[0][1:] == (0.5, 7)
    with pytest.raises(ConfigError, match="needs a chat client"):  # envs never builds an HTTP client
        make_env(bundle, task, config, user_seed=7)
    built = make_env(bundle, task, config, user_seed=7, user_client=llm_user_client(config.user)).user
    assert isinstance(built, LLMUser) and isinstance(built.client, OpenAIChatPolicy)
    assert built.base_url == "http://10.0.0.9:8000/v1" and built.client.model == config.user.model
    assert llm_user_client(UserConfig(kind="scripted")) is None
