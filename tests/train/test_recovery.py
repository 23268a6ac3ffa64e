"""Recovery demonstrations: one rejected call before one of the oracle's writes, left out of the loss."""
from __future__ import annotations

import json
import random
import re

import pytest
from helpers import SMALL_ENV_OVERRIDES, small_env_config

from agentgrpo.agent.chat import ChatFormat, ToolSignature, policy_view, tool_signatures
from agentgrpo.agent.format import render_assistant
from agentgrpo.agent.masking import IGNORE_INDEX
from agentgrpo.config import ConfigError, load_config
from agentgrpo.envs.airline.factory import build_env
from agentgrpo.envs.delex import delexicalise_messages
from agentgrpo.envs.registry import id_kinds, write_tools
from agentgrpo.envs.types import Action
from agentgrpo.policy.hf import load_policy
from agentgrpo.train.demonstrations import LabelWeights, collect_demonstrations, training_examples
from agentgrpo.train.recovery import (
    RECOVERY_FAULTS,
    TOOL_FAULTS,
    PolicySlips,
    Slip,
    fault_call,
    fault_turn,
    first_slip,
    is_recovery_of,
    wrong_call,
    wrong_message,
)
from agentgrpo.train.sft import train_sft
from agentgrpo.train.sft_config import SFTConfig

SIGNATURES = {
    "get_reservation_details": ToolSignature(frozenset({"reservation_id"}), frozenset({"reservation_id"})),
    "cancel_reservation": ToolSignature(frozenset({"reservation_id"}), frozenset({"reservation_id"})),
    "send_certificate": ToolSignature(frozenset({"user_id", "amount"}), frozenset({"user_id", "amount"})),
    "search_direct_flight": ToolSignature(frozenset({"origin", "destination", "date"}),
                                          frozenset({"origin", "destination", "date"})),
    "note": ToolSignature(frozenset({"text", "tag"}), frozenset({"text"})),  # ``tag`` optional
}


def test_a_signature_rejects_an_argument_it_does_not_take_or_a_required_one_missing():
    note = SIGNATURES["note"]
    assert not note.rejects(["text"]) and not note.rejects(["text", "tag"])
    assert note.rejects(["tag"]) and note.rejects(["text", "user_id"]) and note.rejects([])
    airline = tool_signatures(build_env(small_env_config()).domain.tool_schemas())
    assert airline["send_certificate"] == SIGNATURES["send_certificate"]
    assert airline["list_all_airports"] == ToolSignature(frozenset(), frozenset())


def test_each_fault_is_one_the_argument_check_or_the_parser_rejects():
    rng = random.Random(0)
    cancel = Action("cancel_reservation", {"reservation_id": "ZFA04Y"})
    for _ in range(50):
        fault = wrong_call("misnamed", cancel, "I cancel it.", SIGNATURES, rng)
        # never get_reservation_details: it takes exactly these arguments and would run
        assert fault.kind == "misnamed" and fault.action.name in {"send_certificate", "search_direct_flight", "note"}
        assert fault.action.kwargs == cancel.kwargs and fault.text == "I cancel it." and fault.error is None
        assert SIGNATURES[fault.action.name].rejects(fault.action.kwargs)

    certificate = Action("send_certificate", {"user_id": "mia_li_3668", "amount": 150})
    kept = set()
    for _ in range(50):
        fault = wrong_call("incomplete", certificate, "", SIGNATURES, rng)
        assert fault.kind == "incomplete" and fault.action.name == "send_certificate"
        assert len(fault.action.kwargs) == 1 and fault.action.kwargs.items() <= certificate.kwargs.items()
        kept |= set(fault.action.kwargs)
    assert kept == {"user_id", "amount"}
    note = Action("note", {"text": "x", "tag": "y"})  # the optional argument never goes alone: ``text`` always does
    assert all(wrong_call("incomplete", note, "", SIGNATURES, rng).action.kwargs == {"tag": "y"} for _ in range(20))
    # one argument: nothing to leave out but everything, so the name goes wrong instead
    assert wrong_call("incomplete", cancel, "", SIGNATURES, rng).kind == "misnamed"

    fault = wrong_call("malformed", cancel, "I cancel it.", SIGNATURES, rng)
    assert fault.kind == "malformed" and fault.action == cancel
    assert fault.text.startswith("I cancel it.\n<tool_call>\n{") and "</tool_call>" not in fault.text
    assert fault.error == "unclosed <tool_call>: end the call with </tool_call>."
    with pytest.raises(ValueError, match="unknown fault"):
        wrong_call("declined", cancel, "", SIGNATURES, rng)  # a fault of a message, not of a call


def test_a_declined_message_has_one_number_changed_and_a_date_keeps_its_shape():
    rng = random.Random(0)
    text = "Here is the change: 2 bags on 2024-05-07, $150 in all. Shall I proceed (yes/no)?"
    numbers = [int(n) for n in "2 2024 05 07 150".split()]
    seen = set()
    for _ in range(100):
        wrong = wrong_message(text, rng)
        got = [int(n) for n in __import__("re").findall(r"\d+", wrong)]
        changed = [i for i, (a, b) in enumerate(zip(numbers, got)) if a != b]
        assert len(got) == len(numbers) and len(changed) == 1 and 1 <= abs(got[changed[0]] - numbers[changed[0]]) <= 3
        assert __import__("re").search(r"\d{4}-\d{2}-\d{2}", wrong)  # zero-padded: still a date's shape
        seen.add(changed[0])
    assert seen == set(range(5))
    assert wrong_message("Which reservation is it?", rng) is None


def test_the_fault_turn_is_the_calls_own_or_for_a_declined_request_the_message_before_it():
    actions = [Action("get_user_details", {}), Action.respond("Shall I proceed?"), Action("think", {}),
               Action("cancel_reservation", {})]
    assert fault_turn(actions, 2, "misnamed") == 3 and fault_turn(actions, 0, "malformed") == 0
    assert fault_turn(actions, 2, "declined") == 1 and fault_turn(actions, 0, "declined") is None


def test_the_fault_goes_before_a_write_call_or_any_call_in_an_episode_without_one():
    rng = random.Random(0)
    actions = [Action("get_user_details", {}), Action.respond("Sure."), Action("cancel_reservation", {}),
               Action("send_certificate", {})]
    writes = {"cancel_reservation", "send_certificate"}
    assert {fault_call(actions, writes, rng) for _ in range(40)} == {1, 2}  # call indices, messages not counted
    assert {fault_call(actions[:2], writes, rng) for _ in range(10)} == {0}
    assert fault_call([Action.respond("Hi.")], writes, rng) is None


def _shown(message):
    """A message as the policy reads it, call ids aside (they number the turns)."""
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message.get("tool_calls") or []]
    return message["role"], message.get("content"), calls


@pytest.fixture(scope="module")
def demos():
    env = small_env_config(delexicalise=True)
    bundle = build_env(env)
    plain = collect_demonstrations(bundle, env, ["covered_seen", "uncovered_seen"], per_task=2, seed=3)
    recovering = collect_demonstrations(bundle, env, ["covered_seen", "uncovered_seen"], per_task=2, seed=3,
                                        recovery_share=1.0)
    return bundle, env, plain, recovering


def test_a_recovery_demonstration_is_the_plain_one_with_a_rejected_call_before_the_oracles(demos):
    bundle, env, plain, recovering = demos
    assert [(d.task_id, d.user_seed) for d in plain] == [(d.task_id, d.user_seed) for d in recovering]
    assert all(d.fault is None and d.untrained == () for d in plain)
    assert {d.fault for d in recovering} == set(TOOL_FAULTS)  # every demonstration made one (share 1)
    writes = write_tools(env)
    for before, after in zip(plain, recovering):
        (index,) = after.untrained
        wrong, error, right = after.messages[index:index + 3]
        assert wrong["role"] == "assistant" and error["content"].startswith("Error: ")
        assert error["role"] == "tool"  # the call rejected, or the malformed turn answered by the parser's error
        assert right["role"] == "assistant" and right["tool_calls"]
        assert is_recovery_of(after.messages, index, before.messages)
        assert not is_recovery_of(after.messages, index - 1, before.messages)
        # without the wrong turn and its error, the same conversation, the oracle's call where the fault was
        rest = after.messages[:index] + after.messages[index + 2:]
        assert [_shown(m) for m in rest] == [_shown(m) for m in before.messages]
        name = right["tool_calls"][0]["function"]["name"]
        plain_calls = [c["function"]["name"] for m in before.messages for c in m.get("tool_calls") or []]
        assert name in writes or not writes & set(plain_calls)  # a write where the episode has one
        if after.fault == "malformed":
            assert not wrong.get("tool_calls") and "<tool_call>" in wrong["content"]
        else:
            (call,) = wrong["tool_calls"]
            arguments = json.loads(call["function"]["arguments"])
            assert (call["function"]["name"] != name) == (after.fault == "misnamed")
            assert arguments.items() <= json.loads(right["tool_calls"][0]["function"]["arguments"]).items()
        assert "<R" in json.dumps(after.messages)  # put in the delexicalised view like the plain one


def test_a_declined_request_is_answered_no_with_the_request_and_the_oracles_own_request_follows():
    env = small_env_config(delexicalise=True)
    bundle = build_env(env)
    plain = collect_demonstrations(bundle, env, ["covered_seen", "uncovered_seen"], per_task=2, seed=3)
    declined = collect_demonstrations(bundle, env, ["covered_seen", "uncovered_seen"], per_task=2, seed=3,
                                      recovery_share=1.0, recovery_faults=["declined"])
    made = [(a, b) for a, b in zip(plain, declined) if b.fault]
    assert {b.fault for _, b in made} == {"declined"} and len(made) >= 5  # of the 10 episodes with a write
    for before, after in made:
        (index,) = after.untrained
        wrong, answer, right = after.messages[index:index + 3]
        assert answer["role"] == "user" and answer["content"].startswith("No, that's not what I want.")
        assert wrong["content"] != right["content"] and not right.get("tool_calls")
        assert after.messages[index + 3]["content"].startswith("Yes")  # the oracle's own request is accepted
        assert is_recovery_of(after.messages, index, before.messages)
        assert any(c["function"]["name"] in write_tools(env) for m in after.messages[index:]
                   for c in m.get("tool_calls") or [])  # the request of a write
    for before, after in zip(plain, declined):  # no write, or a request the user would accept anyway: plain
        if not after.fault:
            assert after.messages == before.messages and after.untrained == ()


def test_the_wrong_turn_is_context_only_and_everything_trained_is_the_plain_demonstrations(demos, tiny_policy_dir):
    bundle, env, plain, recovering = demos
    _, tokenizer = load_policy(tiny_policy_dir)
    chat = ChatFormat(tokenizer, bundle.domain.tool_schemas(), bundle.domain.policy, prompt_style="compact")
    weights = LabelWeights(tool_name=3.0)
    plain_examples, _ = training_examples(chat, [d.messages for d in plain], 6144, weights)
    examples, _ = training_examples(chat, [d.messages for d in recovering], 6144, weights,
                                    [d.untrained for d in recovering])
    unmasked, _ = training_examples(chat, [d.messages for d in recovering], 6144, weights)
    for a, b, c in zip(plain_examples, examples, unmasked):
        assert len(b.input_ids) > len(a.input_ids)  # the wrong turn and its error are in the context
        trained = [(t, w) for t, label, w in zip(b.input_ids, b.labels, b.label_weights()) if label != IGNORE_INDEX]
        assert trained == [(t, w) for t, label, w in zip(a.input_ids, a.labels, a.label_weights())
                           if label != IGNORE_INDEX]  # the same tokens, with the same weights (names 3)
        assert c.num_label_tokens > b.num_label_tokens  # unless told, the wrong turn would be trained


# ---- the policy's own slips (DAgger-style) -----------------------------------------------------

def _oracle_turns(chat, demos, kinds=None):
    """Each oracle turn's text, keyed by the policy-view prefix before it (a policy that is the oracle)."""
    turns = {}
    for demo in demos:
        view = policy_view(chat, delexicalise_messages(demo.messages, kinds) if kinds else demo.messages)
        for index, message in enumerate(view):
            if message["role"] == "assistant":
                turns[json.dumps(view[:index])] = message["content"]
    return turns


def _policy(chat, turns, change):
    """A policy that makes the oracle's turn, except where ``change(parsed, prefix)`` gives other text."""
    def next_turn(prefix):
        text = turns[json.dumps(prefix)]
        return change(chat.parse(text), prefix) or text
    return next_turn


@pytest.fixture(scope="module")
def real_world(tiny_policy_dir):
    env = small_env_config(delexicalise=True)
    bundle = build_env(env)
    _, tokenizer = load_policy(tiny_policy_dir)
    chat = ChatFormat(tokenizer, bundle.domain.tool_schemas(), bundle.domain.policy, prompt_style="compact")
    plain = collect_demonstrations(bundle, env, ["covered_seen", "uncovered_seen"], per_task=1, seed=3)
    # the same episodes in real ids: the slip finder is given what the oracle played
    real = collect_demonstrations(bundle, small_env_config(), ["covered_seen", "uncovered_seen"], per_task=1, seed=3)
    return bundle, env, chat, plain, real


def test_the_first_slip_is_the_first_call_that_is_not_the_oracles_put_back_in_the_worlds_ids(real_world):
    bundle, env, chat, plain, real = real_world
    kinds = id_kinds(env)
    turns = _oracle_turns(chat, real, kinds)
    demo = next(d for d in real if any(c["function"]["name"] == "get_reservation_details"
                                       for m in d.messages for c in m.get("tool_calls") or []))
    assert first_slip(demo.messages, chat, _policy(chat, turns, lambda p, _: None), kinds) == \
        Slip(sum(m["role"] == "assistant" for m in demo.messages) - 1, "none")

    def other_reservation(parsed, prefix):  # reads a slot the conversation never filled
        if parsed.name == "get_reservation_details":
            return render_assistant("I look it up.", parsed.name, {"reservation_id": "<R9>"})
    slip = first_slip(demo.messages, chat, _policy(chat, turns, other_reservation), kinds)
    reads = [i for i, a in enumerate(m for m in demo.messages if m["role"] == "assistant")
             if any(c["function"]["name"] == "get_reservation_details" for c in a.get("tool_calls") or [])]
    assert slip.turn == reads[0] and slip.outcome == "call" and slip.fault.kind == "policy"
    assert slip.fault.action == Action("get_reservation_details", {"reservation_id": "<R9>"})  # never filled: kept

    def first_filled(parsed, prefix):  # the first reservation slot the prefix filled, as the policy sees it
        if parsed.name == "get_reservation_details":
            filled = sorted(set(re.findall(r"<R\d+>", json.dumps(prefix))))
            other = next(s for s in filled if s != parsed.arguments["reservation_id"])
            return render_assistant("I look it up.", parsed.name, {"reservation_id": other})
    slip = first_slip(demo.messages, chat, _policy(chat, turns, first_filled), kinds)
    rid = slip.fault.action.kwargs["reservation_id"]
    (read,) = [c for m in demo.messages for c in m.get("tool_calls") or []
               if c["function"]["name"] == "get_reservation_details"][:1]
    assert "<" not in rid and rid in json.dumps(demo.messages)  # the world's id that slot stood for
    assert rid != json.loads(read["function"]["arguments"])["reservation_id"]
    message = first_slip(demo.messages, chat, _policy(chat, turns, lambda p, _: "Let me check." if p.kind == "tool"
                                                       else None), kinds)
    assert message.outcome == "message" and message.fault is None and message.turn == 1  # the profile read
    broken = first_slip(demo.messages, chat, _policy(chat, turns, lambda p, _: '<tool_call>\n{"name": "x"'
                                                      if p.kind == "tool" else None), kinds)
    assert broken.outcome == "malformed" and broken.fault.error and broken.fault.text.startswith("<tool_call>")


def test_policy_recovery_demonstrations_play_the_policys_slip_then_the_oracles_turn(real_world):
    bundle, env, chat, plain, real = real_world
    kinds = id_kinds(env)
    turns = _oracle_turns(chat, real, kinds)
    writes = write_tools(env)

    def drops_an_argument(parsed, prefix):  # the first write with one of its arguments left out: rejected
        if parsed.name in writes and len(parsed.arguments) >= 2:
            first = sorted(parsed.arguments)[0]
            return render_assistant(parsed.text, parsed.name, {k: v for k, v in parsed.arguments.items() if k != first})
    slips = PolicySlips(chat, _policy(chat, turns, drops_an_argument), kinds)
    recovering = collect_demonstrations(bundle, env, ["covered_seen", "uncovered_seen"], per_task=1, seed=3,
                                        recovery_share=1.0, recovery_faults=["policy"], slips=slips)
    assert slips.counts["call"] >= 2 and slips.counts["call"] + slips.counts["none"] == len(plain)
    made = [(a, b) for a, b in zip(plain, recovering) if b.fault]
    assert {b.fault for _, b in made} == {"policy"} and len(made) == slips.counts["call"]
    examples, _ = training_examples(chat, [d.messages for _, d in made], 6144, untrained=[d.untrained for _, d in made])
    plain_examples, _ = training_examples(chat, [d.messages for d, _ in made], 6144)
    for (before, after), example, reference in zip(made, examples, plain_examples):
        (index,) = after.untrained
        wrong, error, right = after.messages[index:index + 3]
        assert error["content"].startswith("Error: ") and wrong["tool_calls"][0]["function"]["name"] in writes
        assert right["tool_calls"][0]["function"]["name"] == wrong["tool_calls"][0]["function"]["name"]
        assert is_recovery_of(after.messages, index, before.messages)
        trained = [t for t, label in zip(example.input_ids, example.labels) if label != IGNORE_INDEX]
        assert trained == [t for t, label in zip(reference.input_ids, reference.labels) if label != IGNORE_INDEX]

    def reads_another(parsed, prefix):  # a read that runs: its answer stays in the context
        if parsed.name == "get_reservation_details":
            filled = sorted(set(re.findall(r"<R\d+>", json.dumps(prefix))))
            others = [s for s in filled if s != parsed.arguments["reservation_id"]]
            if others:
                return render_assistant("I look it up.", parsed.name, {"reservation_id": others[0]})
    slips = PolicySlips(chat, _policy(chat, turns, reads_another), kinds)
    recovering = collect_demonstrations(bundle, env, ["covered_seen", "uncovered_seen"], per_task=1, seed=3,
                                        recovery_share=1.0, recovery_faults=["policy"], slips=slips)
    made = [(a, b) for a, b in zip(plain, recovering) if b.fault]
    assert made and len(made) == slips.counts["call"]
    for before, after in made:
        (index,) = after.untrained
        answer = after.messages[index + 1]
        assert answer["role"] == "tool" and not answer["content"].startswith("Error")  # it ran
        assert after.messages[index + 2]["tool_calls"][0]["function"]["name"] == "get_reservation_details"
        # the rest is the plain demonstration's (with the read's ids in view, later slots are numbered on)
        rest = after.messages[:index] + after.messages[index + 2:]
        assert after.messages[:index] == before.messages[:index]
        assert [(m["role"], [c["function"]["name"] for c in m.get("tool_calls") or []]) for m in rest] == \
            [(m["role"], [c["function"]["name"] for c in m.get("tool_calls") or []]) for m in before.messages]
    with pytest.raises(ValueError, match="slips"):
        collect_demonstrations(bundle, env, ["covered_seen"], 1, 3, recovery_share=1.0, recovery_faults=["policy"])


def test_sft_records_its_recovery_demonstrations_a_trained_policys_slips_and_checks_its_settings(
        tmp_path, tiny_policy_dir):
    args = [*SMALL_ENV_OVERRIDES, "data.demos_per_task=1", "data.recovery_share=1.0", "data.opening_repeats=1",
            "data.recovery_faults=[misnamed,incomplete,malformed,policy]", "trainer.epochs=1", "trainer.batch_size=4",
            "progress=false", "data.copy_check_tasks=0"]
    config = load_config(SFTConfig, [*args, f"run_dir={tmp_path / 'sft'}", f"data.recovery_policy={tiny_policy_dir}"],
                         defaults="sft.yaml")
    train_sft(config)
    stats = json.loads((tmp_path / "sft" / "sft_stats.json").read_text())
    made, slips = stats["recovery_demonstrations"], stats["policy_slips"]
    assert set(made) <= set(RECOVERY_FAULTS) and set(made) & set(TOOL_FAULTS)
    assert 0 < sum(made.values()) <= stats["demonstrations"]
    # the untrained tiny policy leaves at once every demonstration drawn for its fault
    assert 0 < sum(slips.values()) < stats["demonstrations"] and "none" not in slips
    assert made.get("policy", 0) <= slips.get("call", 0) + slips.get("malformed", 0)
    with pytest.raises(ConfigError, match="data.recovery_share"):
        load_config(SFTConfig, ["data.recovery_share=1.5"], defaults="sft.yaml")
    with pytest.raises(ConfigError, match="data.recovery_faults"):
        load_config(SFTConfig, ["data.recovery_faults=[typo]"], defaults="sft.yaml")
    assert set(RECOVERY_FAULTS) == {*TOOL_FAULTS, "declined", "policy"}
    with pytest.raises(ConfigError, match="data.recovery_policy"):
        load_config(SFTConfig, [*args, f"run_dir={tmp_path}"], defaults="sft.yaml")  # the fault needs a policy
    with pytest.raises(ConfigError, match="data.recovery_policy"):
        load_config(SFTConfig, [f"data.recovery_policy={tiny_policy_dir}"], defaults="sft.yaml")  # and only it
    with pytest.raises(ConfigError, match="no such checkpoint"):
        train_sft(load_config(SFTConfig, [*args, f"run_dir={tmp_path / 'x'}", "data.recovery_policy=/nonexistent"],
                              defaults="sft.yaml"))
    with pytest.raises(ConfigError, match="delexicalise"):  # it must see ids as the demonstrations show them
        train_sft(load_config(SFTConfig, [*args, f"run_dir={tmp_path / 'y'}", "env.delexicalise=true",
                                          f"data.recovery_policy={tiny_policy_dir}"], defaults="sft.yaml"))


def test_a_call_that_ran_is_a_recovery_only_when_it_changes_nothing():
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": "get_reservation_details", "arguments": "{}"}}]}
    plain = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Which one?"}]
    ran = [plain[0], call, {"role": "tool", "content": '{"id": "X"}'}, plain[1]]
    assert not is_recovery_of(ran, 1, plain)  # a call that ran is no rejected call
    assert is_recovery_of(ran, 1, plain, writes={"cancel_reservation"})  # a read changes nothing
    assert not is_recovery_of(ran, 1, plain, writes={"get_reservation_details"})
