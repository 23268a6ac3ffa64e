"""``eval --likelihood``: turn kinds, the summary by hand, and two policies teacher-forced on the oracle's
episodes (the same checkpoint moves nothing; a policy with zero logits scores every token −log V)."""
from __future__ import annotations

import json
import math
import shutil

import pytest
import torch

from agentgrpo.cli import main
from agentgrpo.envs.airline.factory import EnvConfig, SplitConfig
from agentgrpo.eval.evaluator import EvalConfig, evaluate
from agentgrpo.eval.likelihood import (
    FIRST_WRITE,
    EpisodeChange,
    TurnChange,
    analyse_likelihood,
    assistant_kinds,
    summarise_changes,
    turn_logprobs,
)

ENV = EnvConfig(n_tasks=30, splits=SplitConfig(covered_seen=6, uncovered_seen=8, unseen=4))
WRITES = {"cancel_reservation", "book_reservation"}


def call(name: str) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": name, "arguments": "{}"}}]}


def test_assistant_turns_are_write_calls_read_calls_or_replies():
    messages = [{"role": "system", "content": "p"}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "Your user id?"}, {"role": "user", "content": "u1"},
                call("get_user_details"), {"role": "tool", "content": "{}"}, call("cancel_reservation"),
                {"role": "tool", "content": "{}"}, {"role": "assistant", "content": "Done."}]
    assert assistant_kinds(messages, WRITES) == ["reply", "read", "write", "reply"]


def test_the_summary_by_hand():
    wrote = EpisodeChange("t1", "cancel", True, [
        TurnChange("read", 2, -4.0, -5.0), TurnChange("write", 3, -6.0, -9.0, first_write=True),
        TurnChange("write", 1, -2.0, -1.0)])
    other = EpisodeChange("t2", "refuse", False, [TurnChange("reply", 4, -8.0, -6.0)])
    table = summarise_changes([wrote, other])
    writes = table["writes"]["kinds"]
    assert table["writes"]["episodes"] == 1 and table["no_writes"]["episodes"] == 1
    # the episode's two write turns: Δ −3 and +1 → mean −1 per turn, −2 over 4 tokens, one of two fell
    assert writes["write"]["delta_per_turn"]["value"] == pytest.approx(-1.0)
    assert writes["write"]["delta_per_token"] == pytest.approx(-0.5)
    assert writes["write"]["fell_frac"] == 0.5 and writes["write"]["tokens"] == 4
    assert writes["write"]["before_per_token"] == pytest.approx(-2.0)
    assert writes[FIRST_WRITE]["delta_per_turn"]["value"] == pytest.approx(-3.0)
    assert set(writes) == {"read", "write", FIRST_WRITE}
    assert table["no_writes"]["kinds"]["reply"]["delta_per_token"] == pytest.approx(0.5)
    everything = table["all"]["kinds"]
    assert everything["read"]["episodes"] == 1 and everything["reply"]["fell_frac"] == 0.0


@pytest.fixture(scope="module")
def oracle_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("oracle")
    evaluate(EvalConfig(policy="oracle", env=ENV, trials=1, out_dir=str(out), progress=False))
    return out


@pytest.fixture(scope="module")
def zero_logits_dir(tiny_policy_dir, tmp_path_factory):
    """The tiny policy with its output layer zeroed: every next-token distribution is uniform."""
    from transformers import AutoModelForCausalLM

    out = tmp_path_factory.mktemp("zero") / "policy"
    shutil.copytree(tiny_policy_dir, out)
    model = AutoModelForCausalLM.from_pretrained(str(out))
    with torch.no_grad():
        model.get_output_embeddings().weight.zero_()
        bias = getattr(model.get_output_embeddings(), "bias", None)
        if bias is not None:
            bias.zero_()
    model.save_pretrained(str(out))
    return out, model.config.vocab_size


def test_turn_logprobs_are_the_labelled_tokens_log_likelihood(tiny_policy_dir, oracle_dir):
    from agentgrpo.agent.chat import ChatFormat, policy_view
    from agentgrpo.agent.masking import IGNORE_INDEX, build_sft_example
    from agentgrpo.envs.airline.factory import build_env
    from agentgrpo.eval.runner import read_eval_dir
    from agentgrpo.policy.hf import load_policy

    _, records = read_eval_dir(oracle_dir)
    model, tokenizer = load_policy(tiny_policy_dir)
    domain = build_env(ENV).domain
    chat = ChatFormat(tokenizer, domain.tool_schemas(), domain.policy, prompt_style="compact")
    example = build_sft_example(chat, policy_view(chat, records[0].messages))
    spans = example.label_spans()
    ids = torch.tensor([example.input_ids])
    labels = torch.tensor([example.labels])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1].float()
    target = labels[0, 1:]
    nll = torch.nn.functional.cross_entropy(logits, target, ignore_index=IGNORE_INDEX, reduction="sum")
    per_turn = turn_logprobs(model, example.input_ids, spans)
    assert len(per_turn) == len(assistant_kinds(records[0].messages, WRITES))
    assert sum(per_turn) == pytest.approx(-float(nll), rel=1e-4)


def test_the_same_policy_moves_nothing_and_zero_logits_score_minus_log_v(tiny_policy_dir, oracle_dir,
                                                                          zero_logits_dir, tmp_path, capsys):
    same = analyse_likelihood(oracle_dir, str(tiny_policy_dir), str(tiny_policy_dir), out_dir=tmp_path / "same")
    assert same["episodes"] == 18 and same["skipped"] == 0  # the oracle solves all 18
    for group in ("writes", "no_writes", "all"):
        for row in same["table"][group]["kinds"].values():
            assert row["delta_per_token"] == 0.0 and row["fell_frac"] == 0.0
    assert same["table"]["writes"]["episodes"] == 11  # the write tasks: each calls a write tool
    assert {"write", "read", "reply", FIRST_WRITE} <= set(same["table"]["writes"]["kinds"])

    zero, vocab = zero_logits_dir
    assert main(["eval", "--likelihood", str(oracle_dir), "--baseline", str(tiny_policy_dir),
                 "--policy", str(zero), "--out", str(tmp_path / "zero"), "--max-episodes", "5"]) == 0
    assert "Δ per turn" in capsys.readouterr().out
    report = json.loads((tmp_path / "zero" / "likelihood.json").read_text())
    assert report["episodes"] == 5
    for row in report["table"]["all"]["kinds"].values():
        assert row["before_per_token"] + row["delta_per_token"] == pytest.approx(-math.log(vocab), abs=1e-4)
    assert (tmp_path / "zero" / "likelihood.md").read_text().startswith("# Turn likelihoods")


def test_likelihood_without_a_baseline_is_one_line_error(oracle_dir, capsys):
    assert main(["eval", "--likelihood", str(oracle_dir), "--policy", "x"]) == 2
    err = capsys.readouterr().err
    assert "--likelihood needs --baseline" in err and err.count("\n") == 1
