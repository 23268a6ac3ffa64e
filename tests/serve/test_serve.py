"""``agentgrpo serve`` with the tiny checkpoint, a real server on 127.0.0.1 over real HTTP.

The API itself (models, completions, errors, concurrent requests), then the evaluator
against it: as the evaluated agent (``--policy openai``), as the LLM user of episodes,
and as the LLM user of a τ-bench evaluation imported from a (fake) upstream checkout.
"""
from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from helpers import SMALL_ENV_OVERRIDES
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from serving import ServeProcess

from agentgrpo.cli import main

TOOL = {"type": "function", "function": {"name": "get_user_details", "description": "Look a user up.",
                                         "parameters": {"type": "object", "properties": {
                                             "user_id": {"type": "string"}}, "required": ["user_id"]}}}
ONE_EPISODE_EACH = [*SMALL_ENV_OVERRIDES, "trials=1", "splits=[unseen]", "rollout.max_turns=2", "progress=false"]


@pytest.fixture(scope="module")
def server(tiny_policy_dir):
    process = ServeProcess(tiny_policy_dir, "--served-model-name", "tiny", "--max-new-tokens", "6",
                           "--max-batch", "4")
    yield process
    process.close()


def post(server: ServeProcess, body) -> tuple[int, dict]:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    reply = httpx.post(f"{server.url}/chat/completions", content=content, timeout=120)
    return reply.status_code, reply.json()


def chat(content: str = "Hi, I need help.", **extra) -> dict:
    return {"model": "tiny", "messages": [{"role": "system", "content": "You are an airline agent."},
                                          {"role": "user", "content": content}], "tools": [TOOL], **extra}


def test_models_completions_and_refusals(server):
    assert server.url.startswith("http://127.0.0.1:")
    listed = httpx.get(f"{server.url}/models", timeout=30).json()
    assert [m["id"] for m in listed["data"]] == ["tiny"]
    status, reply = post(server, chat(temperature=0))
    assert status == 200 and reply["object"] == "chat.completion" and reply["model"] == "tiny"
    choice = reply["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["finish_reason"] in ("stop", "length", "tool_calls")
    assert 0 < reply["usage"]["completion_tokens"] <= 6 and reply["usage"]["prompt_tokens"] > 0
    assert post(server, chat(temperature=0))[1]["choices"] == reply["choices"]  # greedy: the same answer
    seeded = [post(server, chat(temperature=1.0, seed=5))[1]["choices"][0]["message"] for _ in range(2)]
    assert seeded[0] == seeded[1]
    for body, status in [(chat(n=2), 400), (b"{not json", 400), (b"[" * 100_000, 400),
                         (dict(chat(), model="other"), 404), ({"model": "tiny", "messages": []}, 400)]:
        code, error = post(server, body)
        assert code == status and error["error"]["message"]


# ---- the request schema, fuzzed: every malformed body gets a 4xx with a reason, never a 500 ----------
def _json() -> st.SearchStrategy:
    text = st.text(max_size=12) | st.sampled_from(["\ud800", "a\udfffb", "<tool_call>", ""])
    scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | text
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
                        max_leaves=6)


ANY = _json()
TEXT = st.text(max_size=20) | st.sampled_from(["\ud800", "Hi \udc00 there"])
PART = st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url"]) | ANY, "text": TEXT | ANY})
CALL = st.fixed_dictionaries({}, optional={"id": TEXT | ANY, "type": st.just("function") | ANY, "function":
                                           st.fixed_dictionaries({}, optional={"name": TEXT | ANY,
                                                                               "arguments": TEXT | ANY}) | ANY})
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "developer", "user", "assistant", "tool", "function", "robot"]) | ANY},
    optional={"content": TEXT | st.none() | st.lists(PART, max_size=2) | ANY, "tool_calls": st.lists(CALL, max_size=2)
              | ANY, "name": TEXT | ANY, "tool_call_id": TEXT | ANY})
FUNCTION = st.fixed_dictionaries({}, optional={"name": TEXT | ANY, "description": TEXT | ANY, "parameters": st.just(
    TOOL["function"]["parameters"]) | st.fixed_dictionaries({}, optional={"properties": ANY}) | ANY})
TOOLS = st.lists(st.just(TOOL) | st.fixed_dictionaries({}, optional={"type": st.just("function") | ANY,
                                                                       "function": FUNCTION | ANY}), max_size=2)
FIELDS = {
    "model": st.just("tiny") | ANY, "messages": st.lists(MESSAGE, max_size=3) | ANY, "tools": TOOLS | ANY,
    "tool_choice": st.sampled_from(["auto", "none", "required"]) | ANY, "stream": st.booleans() | ANY,
    "stream_options": st.fixed_dictionaries({}, optional={"include_usage": st.booleans() | ANY}) | ANY,
    "temperature": st.floats() | ANY, "top_p": st.floats() | ANY, "seed": ANY,
    "max_tokens": st.integers(-2, 4) | ANY, "max_completion_tokens": st.integers(-2, 4) | ANY,
    "n": st.integers(-1, 2) | ANY, "stop": TEXT | st.lists(TEXT, max_size=2) | ANY,
    "logprobs": ANY, "response_format": ANY, "presence_penalty": ANY,
}
VALID = st.fixed_dictionaries(  # well-formed requests, so the fuzz also covers generation and streaming
    {"model": st.just("tiny"), "messages": st.lists(st.fixed_dictionaries({
        "role": st.sampled_from(["system", "developer", "user", "assistant", "tool"]),
        "content": st.text(max_size=20)}), min_size=1, max_size=3)},
    optional={"tools": st.lists(st.just(TOOL), max_size=2), "tool_choice": st.sampled_from(["auto", "none"]),
              "stream": st.booleans(), "temperature": st.floats(0, 2), "top_p": st.floats(0.05, 1),
              "seed": st.integers(0, 2**63 - 1), "max_tokens": st.integers(1, 4),
              "stop": st.lists(st.text(max_size=3), max_size=2)})
ONE_FIELD_WRONG = st.tuples(VALID, st.sampled_from(sorted(FIELDS)).flatmap(lambda k: st.tuples(st.just(k), FIELDS[k]))
                            ).map(lambda pair: {**pair[0], pair[1][0]: pair[1][1]})
BODY = VALID | ONE_FIELD_WRONG | st.fixed_dictionaries({}, optional=FIELDS)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(body=BODY | ANY | st.binary(max_size=40))
def test_no_request_body_gets_a_server_error(server, body):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()  # NaN and \ud800 escapes included
    reply = httpx.post(f"{server.url}/chat/completions", content=content, timeout=120)
    assert reply.status_code in (200, 400, 404), (reply.status_code, reply.text[:500])
    event(f"HTTP {reply.status_code}{' stream' if 'event-stream' in reply.headers['content-type'] else ''}")
    if reply.status_code != 200:
        assert reply.json()["error"]["message"]
    elif reply.headers["content-type"].startswith("text/event-stream"):
        assert reply.text.endswith("data: [DONE]\n\n") and '"error"' not in reply.text
    else:
        assert reply.json()["choices"][0]["message"]["role"] == "assistant"


def test_concurrent_requests_are_all_answered(server):
    bodies = [chat(f"Request number {i}.", temperature=0) for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(lambda body: post(server, body), bodies))
    assert all(status == 200 for status, _ in replies)
    assert all(isinstance(reply["choices"][0]["message"]["content"], (str, type(None))) for _, reply in replies)


def test_eval_of_the_served_model_as_the_agent(server, tmp_path):
    out = tmp_path / "eval"
    code = main(["eval", "--policy", "openai", f"endpoint.base_url={server.url}", "endpoint.model=tiny",
                 "--out", str(out), "concurrency=2", *ONE_EPISODE_EACH])
    assert code == 0
    report = json.loads((out / "eval.json").read_text())
    assert report["metrics"]["episodes"] == 4 and report["metrics"]["aborted"] == 0
    records = [json.loads(line) for line in (out / "transcripts.jsonl").read_text().splitlines()]
    assert len(records) == 4
    for record in records:  # the served model's turns are in the transcript
        assert [m["role"] for m in record["messages"][:3]] == ["system", "user", "assistant"]
        assert record["termination"] in ("max_turns", "user_stop")


def test_episodes_with_the_llm_user_on_the_server(server, tmp_path):
    out = tmp_path / "eval"
    code = main(["eval", "--policy", "oracle", "env.user.kind=llm", f"env.user.base_url={server.url}",
                 "env.user.model=tiny", "--out", str(out), "concurrency=2", *ONE_EPISODE_EACH])
    assert code == 0
    report = json.loads((out / "eval.json").read_text())
    assert report["metrics"]["episodes"] == 4 and report["metrics"]["aborted"] == 0
    for line in (out / "transcripts.jsonl").read_text().splitlines():
        messages = json.loads(line)["messages"]
        assert messages[1]["role"] == "user" and messages[1]["content"].strip()  # the served user's opening


# ---- τ-bench: import an upstream-style checkout, evaluate with our server as the LLM user -----
TASKS_TEST_PY = '''from tau_bench.types import Action, Task

TASKS = [
    Task(
        annotator="0",
        user_id={user0!r},
        instruction="Your user id is {user0}. You want to know how many reservations you have.",
        actions=[],
        outputs=["{count0}"],
    ),
    Task(
        annotator="1",
        user_id={user1!r},
        instruction="Your user id is {user1}. You want to cancel reservation {reservation1}.",
        actions=[Action(name="cancel_reservation", kwargs={{"reservation_id": {reservation1!r}}})],
        outputs=[],
    ),
    Task(
        annotator="0",
        user_id={user2!r},
        instruction="Your user id is {user2}. You just want to say hello.",
        actions=[],
        outputs=[],
    ),
]
'''


def fake_tau_bench_checkout(root: Path, data: Path) -> Path:
    """The layout of a sierra-research/tau-bench clone, with tasks written here and the data copied."""
    airline = root / "tau_bench" / "envs" / "airline"
    (airline / "data").mkdir(parents=True)
    for name in ("users.json", "flights.json", "reservations.json"):
        shutil.copyfile(data / name, airline / "data" / name)
    shutil.copyfile(data / "policy.md", airline / "wiki.md")
    (root / "LICENSE").write_text("MIT License (test copy)\n")
    users = json.loads((data / "users.json").read_text())
    ids = [uid for uid, user in users.items() if user.get("reservations")][:3]
    (airline / "tasks_test.py").write_text(TASKS_TEST_PY.format(
        user0=ids[0], count0=len(users[ids[0]]["reservations"]), user1=ids[1],
        reservation1=users[ids[1]]["reservations"][0], user2=ids[2]))
    return root


def test_tau_bench_eval_with_the_llm_user_on_our_server(server, tiny_policy_dir, tau_bench_dir, tmp_path, capsys):
    checkout = fake_tau_bench_checkout(tmp_path / "tau-bench", tau_bench_dir)
    data = tmp_path / "tau_bench_airline"
    assert main(["env", "import-tau-bench", str(checkout), "--out", str(data)]) == 0
    assert "3 tasks" in capsys.readouterr().out
    tasks = json.loads((data / "tasks_test.json").read_text())
    assert tasks[1]["actions"][0]["name"] == "cancel_reservation" and set(tasks[0]) == {
        "user_id", "instruction", "actions", "outputs"}
    out = tmp_path / "eval"
    code = main(["eval", "--policy", str(tiny_policy_dir), "env.source=tau_bench", f"env.data_dir={data}",
                 f"env.user.base_url={server.url}", "env.user.model=tiny", "env.splits.covered_seen=0",
                 "env.splits.uncovered_seen=0", "env.splits.unseen=3", "splits=[unseen]", "trials=1",
                 "rollout.max_turns=2", "rollout.max_new_tokens=8", "rollout.max_total_tokens=3000",
                 "--out", str(out), "progress=false"])
    assert code == 0
    report = json.loads((out / "eval.json").read_text())
    assert report["metrics"]["episodes"] == 3 and report["metrics"]["aborted"] == 0
    assert {t["task_id"] for t in report["per_task"]} == {"0", "1", "2"}
    for line in (out / "transcripts.jsonl").read_text().splitlines():
        assert json.loads(line)["messages"][1]["content"].strip()  # the LLM user (our server) opened
