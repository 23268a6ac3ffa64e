"""SFT on the oracle's transcripts: data, masking, loss goes down, a loadable checkpoint."""
from __future__ import annotations

import json

import pytest
import torch
from helpers import SMALL_ENV_OVERRIDES, small_env_config

from agentgrpo.agent.chat import ChatFormat, policy_view
from agentgrpo.agent.masking import build_sft_examples
from agentgrpo.config import ConfigError, load_config
from agentgrpo.envs.airline.factory import build_env
from agentgrpo.envs.registry import build_training_worlds, id_kinds
from agentgrpo.eval.evaluator import EvalConfig, evaluate
from agentgrpo.policy.hf import load_policy, read_agent_config, resolve_delexicalise
from agentgrpo.tracking import read_metrics
from agentgrpo.train.demonstrations import augmented_examples, collect_demonstrations
from agentgrpo.train.grpo import GRPOTrainer
from agentgrpo.train.grpo_config import GRPOConfig
from agentgrpo.train.sft import train_sft
from agentgrpo.train.sft_config import SFTConfig


def test_demonstrations_are_successful_varied_and_seen_through_our_system_prompt(tiny_policy_dir):
    bundle = build_env(small_env_config())
    demos = collect_demonstrations(bundle, small_env_config(), ["covered_seen"], per_task=3, seed=0)
    assert len(demos) == 4 * 3 and all(d.reward == 1.0 for d in demos)
    first_user = {(d.task_id, d.messages[1]["content"]) for d in demos}
    assert len(first_user) > 4  # users with different seeds phrase things differently
    _, tokenizer = load_policy(tiny_policy_dir)
    chat = ChatFormat(tokenizer, bundle.domain.tool_schemas(), bundle.domain.policy, prompt_style="compact")
    view = policy_view(chat, demos[0].messages)
    assert view[0] == {"role": "system", "content": chat.system_prompt}
    assert view[1:] == chat.chat_messages(demos[0].messages[1:])


def test_more_training_worlds_give_more_demonstrations_of_the_same_families():
    one = small_env_config()
    three = small_env_config(train_worlds=3)
    worlds = build_training_worlds(three)
    demos = collect_demonstrations(worlds, three, ["covered_seen"], per_task=1, seed=0)
    base = collect_demonstrations(build_env(one), one, ["covered_seen"], per_task=1, seed=0)
    assert len(demos) > 2 * len(base) and all(d.reward == 1.0 for d in demos)
    families = {t.family for t in build_env(one).splits["covered_seen"]}
    tasks = {t.task_id: t for w in worlds for t in w.tasks()}
    assert {tasks[d.task_id].family for d in demos} == families


def test_sft_lowers_the_loss_and_saves_a_self_describing_checkpoint(tmp_path):
    config = load_config(SFTConfig, [
        *SMALL_ENV_OVERRIDES, f"run_dir={tmp_path}", "data.demos_per_task=2", "trainer.epochs=3",
        "trainer.batch_size=4", "trainer.micro_batch_size=2", "trainer.lr=2e-3", "progress=false",
    ], defaults="sft.yaml")
    final = train_sft(config)
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert len(records) == 3 * 2  # 8 demonstrations, 4 per optimizer step, 3 epochs
    assert records[-1]["sft/loss"] < records[0]["sft/loss"] - 1.0
    stats = json.loads((tmp_path / "sft_stats.json").read_text())
    assert stats["demonstrations"] == 8 and stats["rejected_samples"] == 0 and stats["worlds"] == 1
    # the copy check ran at the end of each epoch, on ids of held-out validation worlds
    assert [r["step"] for r in records if "sft/copy_token_acc" in r] == [2, 4, 6]
    check = stats["copy_check"]
    assert [point["epoch"] for point in check["curve"]] == [0, 1, 2] and check["sft/copy_ids"] > 16
    assert 0 <= check["sft/copy_id_acc"] <= check["sft/copy_token_acc"] <= 1
    assert 0 < stats["label_tokens"] < stats["tokens"]
    assert read_agent_config(final) == {"prompt_style": "compact", "delexicalise": False,
                                        "delexicalise_places": False, "oracle_arithmetic": "stated",
                                        "oracle_goal": False, "demonstrated_splits": ["covered_seen"]}
    model, tokenizer = load_policy(final)
    assert tokenizer.chat_template and model.config.vocab_size == len(tokenizer)


def test_sft_under_cpu_autocast_learns_and_keeps_float32_weights(tmp_path):
    """``policy.cpu_autocast``: bfloat16 passes (the mixed-in copy loss's too), float32 weights and
    updates; each step's loss is float32's to bfloat16's precision, and falls. Two steps: a CPU
    without native bfloat16 takes ~50 s for each."""
    losses = {}
    for autocast in (True, False):
        config = load_config(SFTConfig, [
            *SMALL_ENV_OVERRIDES, f"run_dir={tmp_path / str(autocast)}", "data.demos_per_task=1", "trainer.epochs=1",
            "trainer.batch_size=2", "trainer.micro_batch_size=2", "trainer.lr=2e-3", "progress=false",
            f"policy.cpu_autocast={str(autocast).lower()}", "trainer.copy_mix_weight=0.5", "data.copy_check_tasks=0",
        ], defaults="sft.yaml")
        final = train_sft(config)
        losses[autocast] = [r["sft/loss"] for r in read_metrics(tmp_path / str(autocast) / "metrics.jsonl")]
        model, _ = load_policy(final)
        assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert len(losses[True]) == 2 and losses[True][1] < losses[True][0] - 0.3
    assert losses[True] == pytest.approx(losses[False], rel=1e-2)
    assert losses[True] != losses[False]  # bfloat16 did run


def test_relabelled_sft_sees_fresh_ids_each_epoch_and_checks_copying_every_step(tmp_path, tiny_policy_dir):
    bundle = build_env(small_env_config())
    demos = collect_demonstrations(bundle, small_env_config(), ["covered_seen"], per_task=1, seed=0)
    _, tokenizer = load_policy(tiny_policy_dir)
    chat = ChatFormat(tokenizer, bundle.domain.tool_schemas(), bundle.domain.policy, prompt_style="compact")
    first, again, second = (augmented_examples(chat, demos, 0, epoch, 6144) for epoch in (0, 0, 1))
    assert [e.input_ids for e in first] == [e.input_ids for e in again]  # reproducible per (seed, epoch)
    assert all(a.input_ids != b.input_ids for a, b in zip(first, second))  # every demonstration copies an id
    plain = [chat.render(policy_view(chat, d.messages), False) for d in demos]
    assert all(chat.render(policy_view(chat, d.messages), False) == p for d, p in zip(demos, plain))  # demos untouched

    config = load_config(SFTConfig, [
        *SMALL_ENV_OVERRIDES, f"run_dir={tmp_path}", "data.demos_per_task=2", "trainer.epochs=2",
        "trainer.batch_size=4", "trainer.micro_batch_size=2", "trainer.lr=2e-3", "progress=false",
        "data.relabel_ids=true", "data.copy_check_every=1",
    ], defaults="sft.yaml")
    train_sft(config)
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records if "sft/copy_token_acc" in r] == [1, 2, 3, 4]
    assert records[-1]["sft/loss"] < records[0]["sft/loss"]


def test_permuted_slots_give_each_epoch_other_slot_numbers_of_the_same_conversation(tmp_path, tiny_policy_dir):
    env_config = small_env_config()
    env_config.delexicalise = True
    bundle = build_env(env_config)
    demos = collect_demonstrations(bundle, env_config, ["covered_seen"], per_task=1, seed=0)
    _, tokenizer = load_policy(tiny_policy_dir)
    chat = ChatFormat(tokenizer, bundle.domain.tool_schemas(), bundle.domain.policy, prompt_style="compact")
    kinds = id_kinds(env_config)
    first, again, second = (augmented_examples(chat, demos, 0, epoch, 6144, relabel=False, slot_kinds=kinds)
                            for epoch in (0, 0, 1))
    plain = augmented_examples(chat, demos, 0, 0, 6144, relabel=False)
    assert [e.input_ids for e in first] == [e.input_ids for e in again]  # reproducible per (seed, epoch)
    assert all(a.input_ids != b.input_ids for a, b in zip(first, second))  # every demonstration names a user
    assert [e.input_ids for e in plain] == [e.input_ids for e in build_sft_examples(
        chat, [policy_view(chat, d.messages) for d in demos], max_length=6144)[0]]  # no augmentation asked

    with pytest.raises(ConfigError, match="data.permute_slots"):
        train_sft(load_config(SFTConfig, [*SMALL_ENV_OVERRIDES, f"run_dir={tmp_path}", "data.permute_slots=true",
                                          "progress=false"], defaults="sft.yaml"))


def test_slot_recall_warmup_asks_for_the_slots_the_demonstrations_copy_and_mixes_into_sft(tmp_path):
    """``trainer.copy_warmup_task=slot``: the warm-up and the mixed-in loss run on rows built from
    the run's own demonstrations (every kind their calls copy gets query contexts), and the task
    is refused without slots to recall."""
    common = [*SMALL_ENV_OVERRIDES, "data.demos_per_task=1", "trainer.epochs=1", "trainer.batch_size=4",
              "trainer.micro_batch_size=2", "progress=false", "data.copy_check_tasks=0",
              "trainer.copy_warmup_task=slot", "trainer.copy_warmup_steps=2", "trainer.copy_warmup_batch_size=2",
              "trainer.copy_warmup_context=24", "trainer.copy_mix_weight=0.5"]
    with pytest.raises(ConfigError, match="trainer.copy_warmup_task=slot"):
        train_sft(load_config(SFTConfig, [*common, f"run_dir={tmp_path / 'words'}"], defaults="sft.yaml"))
    run_dir = tmp_path / "slots"
    train_sft(load_config(SFTConfig, [*common, f"run_dir={run_dir}", "env.delexicalise=true",
                                      "data.tokenizer_split=id"], defaults="sft.yaml"))
    warmup = json.loads((run_dir / "sft_stats.json").read_text())["copy_warmup"]
    assert warmup["task"] == "slot" and warmup["steps"] == 2 and 0 < warmup["final_loss"] < 20
    records = read_metrics(run_dir / "metrics.jsonl")
    assert records and all(0 < r["sft/copy_mix_loss"] < 20 for r in records)  # every SFT step takes the task too


def test_the_copy_task_loss_through_the_training_forward_is_the_full_logits_nll():
    """SFT scores its copy task through ``PolicyForward`` (only the labelled positions projected);
    it must equal the reference ``labelled_nll`` over full logits, value and gradient."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from agentgrpo.train.copy_check import SlotRecallTokens, labelled_nll, slot_recall_batch
    from agentgrpo.train.sft import copy_task_nll

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=4))
    tokens = SlotRecallTokens(filler=list(range(10, 40)), slots=[[50, 51, 52], [60, 61]], queries=[[[3, 4]], [[5]]])
    sequences, labelled = slot_recall_batch(tokens, 36, 4, 3, torch.Generator().manual_seed(0), 1)
    ours = copy_task_nll(model, sequences, labelled, autocast_on=False)
    ours.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    reference = labelled_nll(model, sequences, labelled)
    reference.backward()
    assert ours.item() == pytest.approx(reference.item(), rel=1e-5)
    assert all(torch.allclose(g, p.grad, atol=1e-6) for g, p in zip(grads, model.parameters()))


def _examples_plain_and_weighted(policy_dir, **weights):
    """The small world's demonstrations as SFT examples, unweighted and with ``weights``."""
    from agentgrpo.train.demonstrations import LabelWeights, training_examples

    bundle = build_env(small_env_config())
    demos = collect_demonstrations(bundle, small_env_config(), ["covered_seen"], per_task=1, seed=0)
    model, tokenizer = load_policy(policy_dir)
    chat = ChatFormat(tokenizer, bundle.domain.tool_schemas(), bundle.domain.policy, prompt_style="compact")
    plain, _ = training_examples(chat, [d.messages for d in demos], 6144)
    weighted, _ = training_examples(chat, [d.messages for d in demos], 6144, LabelWeights(**weights))
    return model, chat, demos, plain, weighted


def test_copy_weight_weighs_the_copied_values_and_the_loss_is_their_weighted_mean(tiny_policy_dir):
    import torch

    from agentgrpo.policy.forward import PolicyForward
    from agentgrpo.train.copy_check import copied_values
    from agentgrpo.train.sft import _optimizer_step

    model, chat, demos, plain, weighted = _examples_plain_and_weighted(tiny_policy_dir, copy=5.0)
    assert all(e.weights is None for e in plain)
    for demo, a, b in zip(demos, plain, weighted):
        assert (a.input_ids, a.labels) == (b.input_ids, b.labels)
        heavy = [t for t, w in enumerate(b.label_weights()) if w == 5.0]
        values = [chat.encode(v) for v in copied_values(demo.messages)]
        assert heavy and len(heavy) <= sum(len(v) for v in values)  # only copied values' tokens
        assert all(b.labels[t] != -100 for t in heavy)  # labelled tokens only
        assert set(b.label_weights()) <= {0.0, 1.0, 5.0}

    # the loss is Σ w·(−log p) / Σ w over the batch's labelled tokens, however micro-batched
    from agentgrpo.train.sft_config import SFTTrainerConfig
    batch = weighted[:2]
    with torch.no_grad():
        nll, weight = 0.0, 0.0
        for example in batch:
            ids = torch.tensor([example.input_ids])
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
            token_logp = logp.gather(1, ids[0, 1:, None])[:, 0]
            w = torch.tensor(example.label_weights()[1:])
            nll += float(-(w * token_logp).sum())
            weight += float(w.sum())
    loss, _ = _optimizer_step(PolicyForward(model), batch, SFTTrainerConfig(micro_batch_size=1, batch_size=2), 0)
    assert loss == pytest.approx(nll / weight, rel=1e-4)


def test_tool_name_weight_weighs_each_calls_name_and_nothing_else(tiny_policy_dir):
    model, chat, demos, plain, weighted = _examples_plain_and_weighted(tiny_policy_dir, tool_name=4.0)
    for demo, a, b in zip(demos, plain, weighted):
        assert (a.input_ids, a.labels) == (b.input_ids, b.labels)
        names = [c["function"]["name"] for m in demo.messages if m["role"] == "assistant"
                 for c in m.get("tool_calls") or []]
        heavy = [t for t, w in enumerate(b.label_weights()) if w == 4.0]
        # every call's name, in order, and only its tokens
        assert names and "".join(chat.tokenizer.decode([b.input_ids[t] for t in heavy]).split()) == "".join(names)
        assert len(heavy) == sum(len(chat.encode(n)) for n in names)
        assert all(b.labels[t] != -100 for t in heavy) and set(b.label_weights()) <= {0.0, 1.0, 4.0}
    with pytest.raises(ConfigError, match="trainer.tool_name_weight"):
        load_config(SFTConfig, ["trainer.tool_name_weight=0"], defaults="sft.yaml")


@pytest.mark.parametrize("places", [False, True])
def test_delexicalised_sft_records_its_view_and_evaluation_plays_it(tmp_path, monkeypatch, places):
    """``env.delexicalise``: the demonstrations hold slots, each slot is one token of the built
    tokenizer, the checkpoint records the view, and an evaluation of it (which does not say
    ``env.delexicalise``) plays its episodes through the same view. With
    ``env.delexicalise_places`` the airports are slots too, in every one of those steps."""
    config = load_config(SFTConfig, [
        *SMALL_ENV_OVERRIDES, f"run_dir={tmp_path / 'sft'}", "data.demos_per_task=1", "trainer.epochs=1",
        "trainer.batch_size=4", "trainer.micro_batch_size=2", "progress=false", "env.delexicalise=true",
        "data.tokenizer_split=id", "data.copy_check_tasks=4", f"env.delexicalise_places={str(places).lower()}",
    ], defaults="sft.yaml")
    final = train_sft(config)
    assert read_agent_config(final)["delexicalise"] is True
    assert read_agent_config(final)["delexicalise_places"] is places
    stats = json.loads((tmp_path / "sft" / "sft_stats.json").read_text())
    assert stats["copy_check"]["sft/copy_ids"] >= 4  # the copied values are slots now
    _, tokenizer = load_policy(final)
    slots = ("<U1>", "<R16>", "<F48>", *(("<A1>", "<A20>") if places else ()))
    assert all(len(tokenizer.encode(slot, add_special_tokens=False)) == 1 for slot in slots)
    assert len(tokenizer.encode("<A1>", add_special_tokens=False)) > 1 or places  # no airport slots without them
    assert resolve_delexicalise(None, final) is True  # unset: the checkpoint's own
    assert resolve_delexicalise(None, final, "delexicalise_places") is places
    with pytest.raises(ConfigError, match="env.delexicalise=false is invalid"):
        resolve_delexicalise(False, final)
    with pytest.raises(ConfigError, match=f"env.delexicalise_places={str(not places).lower()} is invalid"):
        resolve_delexicalise(not places, final, "delexicalise_places")
    # GRPO from the checkpoint takes its view too (and records it in its config)
    grpo = GRPOTrainer(load_config(GRPOConfig, [*SMALL_ENV_OVERRIDES, f"policy.init={final}",
                                                f"run_dir={tmp_path / 'grpo'}"], defaults="grpo.yaml"))
    assert grpo.config.env.delexicalise is True
    assert grpo.config.env.delexicalise_places is places

    from agentgrpo.envs.delex import DelexEnv
    from agentgrpo.eval import runner

    made = []

    def recording_make_env(*args, **kwargs):  # the real make_env; remembers what it built
        made.append(runner_make_env(*args, **kwargs))
        return made[-1]

    runner_make_env = runner.make_env
    monkeypatch.setattr(runner, "make_env", recording_make_env)
    eval_config = load_config(EvalConfig, [*SMALL_ENV_OVERRIDES, f"policy={final}", "trials=1",
                                           "splits=[covered_seen]", f"out_dir={tmp_path / 'eval'}",
                                           "progress=false", "rollout.max_turns=4"], defaults="eval.yaml")
    evaluate(eval_config)
    assert len(made) == 4 and all(isinstance(env, DelexEnv) for env in made)
    assert all(("A" in env.names.kinds) is places for env in made)


def test_openings_are_the_demonstrations_up_to_their_first_reply_and_join_sft(tmp_path):
    """``data.opening_splits``: every task of those splits adds its oracle opening (through the first
    message to the user after the first tool result), a prefix of its whole demonstration;
    ``data.opening_repeats``: each demonstration's own opening joins every epoch that many times."""
    from agentgrpo.envs.transcript import first_reply_index
    from agentgrpo.train.demonstrations import demonstration_openings, opening_demonstrations

    env = small_env_config(oracle_goal=True)
    bundle = build_env(env)
    openings = opening_demonstrations(bundle, env, ["uncovered_seen"], seed=0)
    whole = {d.task_id: d for d in collect_demonstrations(bundle, env, ["uncovered_seen"], per_task=1, seed=0)}
    assert len(openings) == len(bundle.splits["uncovered_seen"]) == len(whole)
    for opening in openings:
        messages = opening.messages
        assert messages == whole[opening.task_id].messages[: len(messages)] and len(messages) < len(
            whole[opening.task_id].messages)
        assert first_reply_index(messages) == len(messages) - 1  # it ends on that reply
        assert messages[-1]["role"] == "assistant" and not messages[-1].get("tool_calls")
        assert sum(m["role"] == "tool" for m in messages) >= 1
        assert "The user wants" in str(messages)  # the goal-stating oracle names the request on the way
    with pytest.raises(ConfigError, match="data.opening_splits"):
        load_config(SFTConfig, ["data.opening_splits=[train]"], defaults="sft.yaml")
    with pytest.raises(ConfigError, match="data.opening_repeats"):
        load_config(SFTConfig, ["data.opening_repeats=-1"], defaults="sft.yaml")
    demos = collect_demonstrations(bundle, env, ["covered_seen"], per_task=1, seed=0)
    own = demonstration_openings(demos)
    assert [o.messages for o in own] == [d.messages[: len(o.messages)] for d, o in zip(demos, own)]
    assert len(own) == len(demos)  # every covered task reads something before its first reply
    config = load_config(SFTConfig, [
        *SMALL_ENV_OVERRIDES, "env.oracle_goal=true", f"run_dir={tmp_path}", "data.demos_per_task=1",
        "data.opening_splits=[uncovered_seen]", "data.opening_repeats=2", "trainer.epochs=1",
        "trainer.batch_size=4", "progress=false",
    ], defaults="sft.yaml")
    train_sft(config)
    stats = json.loads((tmp_path / "sft_stats.json").read_text())
    assert stats["demonstrations"] == len(demos) == len(bundle.splits["covered_seen"])
    assert stats["openings"] == len(openings) + 2 * len(own)
    assert len(read_metrics(tmp_path / "metrics.jsonl")) == -(-(stats["openings"] + stats["demonstrations"]) // 4)
    assert json.loads((tmp_path / "final" / "agentgrpo.json").read_text())["oracle_goal"] is True


def test_first_reply_index_counts_tool_results_before_the_reply():
    from agentgrpo.envs.transcript import first_reply_index

    call = [{"id": "c", "type": "function", "function": {"name": "read", "arguments": "{}"}}]
    messages = [
        {"role": "system", "content": "s"}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "your id?"},                   # 2: before any read
        {"role": "user", "content": "u1"},
        {"role": "assistant", "content": "", "tool_calls": call},       # 4
        {"role": "tool", "content": "profile"},                         # 5: read 1
        {"role": "assistant", "content": "", "tool_calls": call},       # 6: a call, not a reply
        {"role": "tool", "content": "reservation"},                     # 7: read 2
        {"role": "assistant", "content": "cancel it?"},                 # 8: first reply after reads 1 and 2
        {"role": "user", "content": "yes"},
        {"role": "assistant", "content": "", "tool_calls": call},       # 10
        {"role": "tool", "content": "done"},                            # 11: read 3
        {"role": "assistant", "content": "done."},                      # 12
    ]
    assert [first_reply_index(messages, n) for n in (1, 2, 3, 4)] == [8, 8, 12, None]
    with pytest.raises(ValueError, match="tool_results"):
        first_reply_index(messages, 0)


def test_openings_through_the_second_read_reach_the_turn_that_proposes_the_change():
    """``data.opening_reads=2``: the opening runs on through the next read (the reservation) to what
    the agent says of it; a demonstration without a second read keeps its first-read opening."""
    from agentgrpo.envs.transcript import first_reply_index
    from agentgrpo.train.demonstrations import demonstration_openings

    env = small_env_config(oracle_goal=True)
    demos = collect_demonstrations(build_env(env), env, ["covered_seen", "uncovered_seen"], per_task=1, seed=0)
    first, second = demonstration_openings(demos), demonstration_openings(demos, tool_results=2)
    assert len(first) == len(second) == len(demos)
    deeper = 0
    for demo, short, long in zip(demos, first, second):
        assert long.messages == demo.messages[: len(long.messages)] and len(long.messages) >= len(short.messages)
        end = first_reply_index(demo.messages, 2)
        assert len(long.messages) - 1 == (end if end is not None else len(short.messages) - 1)
        assert long.messages[-1]["role"] == "assistant" and not long.messages[-1].get("tool_calls")
        deeper += len(long.messages) > len(short.messages)
    assert deeper >= len(demos) // 2  # most requests are about a reservation read after the profile
    proposals = [o.messages[-1]["content"] for o in second if "(yes/no)" in o.messages[-1]["content"]]
    assert proposals  # the turn that asks to confirm a change is among what the openings now teach
    with pytest.raises(ConfigError, match="data.opening_reads"):
        load_config(SFTConfig, ["data.opening_reads=0"], defaults="sft.yaml")


def test_first_reply_weight_weighs_exactly_the_first_reply_after_a_tool_result(tiny_policy_dir):
    from agentgrpo.envs.transcript import first_reply_index

    _, chat, demos, plain, weighted = _examples_plain_and_weighted(tiny_policy_dir, first_reply=10.0)
    for demo, a, b in zip(demos, plain, weighted):
        assert a.input_ids == b.input_ids and a.labels == b.labels and a.weights is None
        heavy = [i for i, w in enumerate(b.weights) if w == 10.0]
        assert heavy and all(b.labels[i] != -100 for i in heavy) and heavy == list(range(heavy[0], heavy[-1] + 1))
        reply = demo.messages[first_reply_index(demo.messages)]["content"]
        assert chat.decode([b.input_ids[i] for i in heavy]).startswith(reply)  # its text, then the end of turn
        assert set(b.weights) == {1.0, 10.0}
    with pytest.raises(ConfigError, match="trainer.first_reply_weight"):
        load_config(SFTConfig, ["trainer.first_reply_weight=0"], defaults="sft.yaml")


def test_opening_weight_weighs_every_assistant_turn_through_the_first_reply_and_no_later_one(tiny_policy_dir):
    from agentgrpo.agent.masking import assistant_span
    from agentgrpo.envs.transcript import first_reply_index

    _, chat, demos, plain, weighted = _examples_plain_and_weighted(tiny_policy_dir, opening=4.0, first_reply=10.0)
    for demo, a, b in zip(demos, plain, weighted):
        assert a.input_ids == b.input_ids and a.labels == b.labels
        view = policy_view(chat, demo.messages)
        reply = first_reply_index(view)
        assistant = [i for i, m in enumerate(view) if m["role"] == "assistant"]
        spans = {i: assistant_span(chat, view, i, b.input_ids) for i in assistant}
        for index, (start, end) in spans.items():
            expected = 10.0 if index == reply else 4.0 if index < reply else 1.0
            assert set(b.weights[start:end]) == {expected}, (index, reply)
        assert any(i < reply for i in assistant)  # the first read is weighed too, not the reply alone
        labelled_outside = [w for i, w in enumerate(b.weights) if b.labels[i] != -100
                            and not any(s <= i < e for s, e in spans.values())]
        assert set(labelled_outside) <= {1.0}
    with pytest.raises(ConfigError, match="trainer.opening_weight"):
        load_config(SFTConfig, ["trainer.opening_weight=-1"], defaults="sft.yaml")
