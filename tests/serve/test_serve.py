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
    for body, status in [(chat(stream=True), 400), (chat(n=2), 400), (b"{not json", 400),
                         (dict(chat(), model="other"), 404), ({"model": "tiny", "messages": []}, 400)]:
        code, error = post(server, body)
        assert code == status and error["error"]["message"]


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
