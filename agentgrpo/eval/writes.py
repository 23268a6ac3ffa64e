"""Why write tasks fail: an evaluation's write calls, their errors, and each failure's outcome class.

``agentgrpo eval --writes DIR`` reads an evaluation directory (``eval_config.yaml``,
``transcripts.jsonl``), rebuilds its tasks from the saved config and reads each episode's
steps back from its messages (``agentgrpo.rewards.messages.parse_messages``). Which tools
write is the domain's ``write_tools`` (``agentgrpo.envs.registry.write_tools``). Aborted
episodes are left out. The report (``writes.json``, ``writes.md``) has:

1. per write tool: calls attempted, calls executed (observation not an error), calls in the
   gold actions of the evaluated episodes (what the oracle executes), and the errors grouped
   by kind (ids, numbers and the value after "got" blanked, so one kind is one message);
2. per failed write episode (the task's gold actions change the database, reward 0) one
   outcome class (``OUTCOMES``, first that applies), counted per family, with the median
   turn (assistant message, from 1) of the first write call and of the first rejected one;
3. writes executed on tasks that need none (e.g. a cancel in a refusal family), per family;
4. where the domain can say why its user declines a confirmation request (its optional
   ``confirmation_faults(task, text)``: the airline's scripted user), the confirmation requests
   of the failed write episodes and their faults (``missing <type>``, ``other <type>``, ``no
   keyword``, ``missing name``), per family: a wrong total shows as ``other amount``;
5. calls named for another tool's arguments: a call carrying an argument its tool does not take,
   all of which another tool takes (``misnamed_calls``; every tool, not only the writes): the
   name chosen wrong, the arguments those of the intended call, per pair and per family;
6. after a rejected write call: the agent's next turn (the same call again, the same tool with other
   arguments, another write, another tool, a message, a malformed turn, or nothing), how often the
   same tool executes later in the episode, and how many episodes with a rejected write are won;
7. whether the request was read: the agent's first message to the user after its first tool
   result (in the airline, the question after the profile), per family the most common one and
   its share, and in how many families one message leads. One question that leads in every
   family (the one of the commonest request) says the policy acts before it reads the request.

The classes after ``wrong_tool`` replay the episode's tool calls on a fresh database of its
world. A delexicalised transcript's calls hold slots, not ids: with a scripted user the episode
is played again through a delexicalising environment (the same user seed, so the same slots).
An episode neither reproduces (an LLM user's) cannot say what the database became: ``unreplayable``.
No torch; the analysis (``analyse_writes``) takes records and tasks, ``analyse_eval_dir`` the files,
``writes_markdown`` renders the report.
"""
from __future__ import annotations

import json
import re
import statistics
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentgrpo.agent.chat import tool_signatures
from agentgrpo.config import DataError
from agentgrpo.envs.transcript import first_reply_index
from agentgrpo.envs.types import CUT_OFF, ERROR_PREFIX, Action, Step
from agentgrpo.rewards.messages import parse_messages

if TYPE_CHECKING:
    from agentgrpo.envs.config import EnvConfig
    from agentgrpo.envs.types import Task
    from agentgrpo.eval.tasks import EvalTask
    from agentgrpo.eval.types import EpisodeRecord

WRITES_JSON = "writes.json"
WRITES_MD = "writes.md"
OUTCOMES: dict[str, str] = {
    "no_write_call": "no call to a write tool",
    "all_rejected": "every write call rejected (an error observation)",
    "wrong_tool": "a write executed with a tool the gold actions do not use",
    "missing_write": "the executed writes are right but incomplete (the gold writes never executed complete "
                     "the gold database)",
    "wrong_arguments": "only the gold actions' write tools executed, the database differs",
    "right_db": "the database is the gold one: an output missing, or the episode cut off",
    "unreplayable": "no replay reproduces the recorded observations (e.g. ids as slots, an LLM user)",
}
"""The outcome classes of a failed write episode, in the order they are tested."""
ERRORS_SHOWN = 6
"""Error kinds listed per tool (the most frequent); writes.json has them all."""
SHORT_NAMES = {"no_write_call": "no write", "all_rejected": "all rejected", "wrong_tool": "wrong tool",
               "missing_write": "missing write", "wrong_arguments": "wrong args", "right_db": "right db",
               "unreplayable": "unreplayable"}
"""The outcome classes as writes.md's column heads."""


@dataclass(frozen=True)
class WriteCall:
    """One call to a write tool in an episode: its tool, assistant turn (from 1) and outcome."""

    name: str
    turn: int
    error: bool
    observation: str


@dataclass
class EpisodeWrites:
    """One episode's write calls and, for a failed write episode, its outcome class."""

    task_id: str
    trial: int
    family: str
    needs_write: bool
    reward: float
    calls: list[WriteCall] = field(default_factory=list)
    outcome: str | None = None
    """An ``OUTCOMES`` key for a failed write episode; None otherwise."""
    cut_off: bool = False
    gold_tools: tuple[str, ...] = ()
    """The write tools of the task's gold actions, sorted, once each."""

    @property
    def executed(self) -> list[WriteCall]:
        return [c for c in self.calls if not c.error]


def error_kind(observation: str) -> str:
    """An error observation as its kind: the ``Error:`` prefix off, the value after "got" and
    every token holding a digit (ids, amounts, dates) blanked, list indices as ``[i]``."""
    text = observation[len(ERROR_PREFIX):] if observation.startswith(ERROR_PREFIX) else observation
    text = re.sub(r"[,;] got .*$", "", text.strip(), flags=re.S)
    text = re.sub(r"\[\d+\]", "[i]", text)
    return re.sub(r"[\w.:+-]*\d[\w.:+-]*", "…", text)[:160]


def episode_writes(record: EpisodeRecord, task: EvalTask, write_tools: Collection[str],
                   env: EnvConfig | None = None) -> EpisodeWrites:
    """The write calls of ``record`` (an episode of ``task``) and, if it failed a write task, its
    outcome; ``env`` (the evaluation's) lets a delexicalised episode be played again (``_database``)."""
    conversation = parse_messages(record.messages)
    calls = [WriteCall(s.name, turn + 1, bool(s.error), s.observation)
             for s, turn in zip(conversation.steps, conversation.turn_of_step)
             if s.kind == "tool" and s.name in write_tools]
    facts = task.facts
    result = EpisodeWrites(record.task_id, record.trial, record.family, facts.write, record.reward, calls,
                           cut_off=record.termination in CUT_OFF,
                           gold_tools=tuple(sorted({a.name for a in task.task.actions if a.name in write_tools})))
    if facts.write and record.reward < 1.0:
        result.outcome = _outcome(result, record, conversation.steps, task, write_tools, env)
    return result


def _outcome(episode: EpisodeWrites, record: EpisodeRecord, steps: Sequence[Step], task: EvalTask,
             write_tools: Collection[str], env: EnvConfig | None) -> str:
    if not episode.calls:
        return "no_write_call"
    executed = episode.executed
    if not executed:
        return "all_rejected"
    gold_writes = [a for a in task.task.actions if a.name in write_tools]
    if any(c.name not in {a.name for a in gold_writes} for c in executed):
        return "wrong_tool"
    domain = task.bundle.domain
    state = _database(record, steps, task, env)
    if state is None:
        return "unreplayable"
    if domain.grade(state, task.task, []).db_match:
        return "right_db"
    done = Counter(c.name for c in executed)
    never_executed = []
    for action in gold_writes:  # the gold writes beyond the executed count of their tool
        if done[action.name] > 0:
            done[action.name] -= 1
        else:
            never_executed.append(action)
    for action in never_executed:
        domain.execute(state, action.name, dict(action.kwargs))
    if never_executed and domain.grade(state, task.task, []).db_match:
        return "missing_write"
    return "wrong_arguments"


def _database(record: EpisodeRecord, steps: Sequence[Step], task: EvalTask, env: EnvConfig | None) -> Any | None:
    """The database the episode left: its calls replayed on a fresh one, or, when they do not
    replay as recorded (ids as slots) and ``env``'s user is scripted, the episode played again
    through a delexicalising environment with the user's seed; None when neither reproduces it."""
    state = _replay(task.bundle.domain, steps)
    if state is None and env is not None and env.user.kind == "scripted" and record.user_seed is not None:
        state = _replay_delexicalised(record.user_seed, steps, task, env)
    return state


def _replay_delexicalised(user_seed: int, steps: Sequence[Step], task: EvalTask, env: EnvConfig) -> Any | None:
    """The episode's turns played again through ``make_env(..., delexicalise=True)``: the scripted
    user answers as it did, slots map to the same ids; None when a tool's observation differs."""
    from agentgrpo.config import ConfigError
    from agentgrpo.envs.registry import make_env

    try:
        episode = make_env(task.bundle, task.task, env, user_seed, max_steps=len(steps) + 1, delexicalise=True)
    except ConfigError:  # the domain declares no id kinds: nothing was delexicalised
        return None
    episode.reset()
    for step in steps:
        if step.kind == "invalid":  # a malformed turn never reached the environment
            continue
        if episode.done:
            return None
        action = Action.respond(str(step.arguments.get("content", ""))) if step.kind == "respond" \
            else Action(step.name, dict(step.arguments))
        observation = episode.step(action).observation
        if step.kind == "tool" and observation != step.observation:
            return None
    return episode.state


def _replay(domain: Any, steps: Sequence[Step]) -> Any | None:
    """A fresh database after the episode's tool calls, or None when a call fails or succeeds
    otherwise than recorded (the transcript does not hold the calls that ran)."""
    state = domain.new_state()
    for step in steps:
        if step.kind != "tool":
            continue
        observation = domain.execute(state, step.name, dict(step.arguments))
        if domain.is_error(observation) != bool(step.error):
            return None
    return state


def _median(values: list[int]) -> float | None:
    return float(statistics.median(values)) if values else None


ConfirmationFaults = Callable[["Task", str], "list[str] | None"]
"""A domain's ``confirmation_faults``: why its user declines an agent message asking to confirm
a write (empty: it would not), None when the message asks none or the task wants no write."""


def tool_parameters(schemas: Sequence[dict[str, Any]]) -> dict[str, frozenset[str]]:
    """Each tool's parameter names, from OpenAI function schemas (``domain.tool_schemas()``)."""
    return {name: signature.parameters for name, signature in tool_signatures(schemas).items()}


def tools_fitting(name: str, arguments: Collection[str], parameters: Mapping[str, frozenset[str]]) -> list[str]:
    """For a call of ``name`` with an argument ``name`` does not take: the other tools that take
    every one of ``arguments``, the closest (Jaccard of the names) first, ties kept, sorted; [] for a
    call its tool's parameters cover, a tool ``parameters`` lacks, or arguments no tool takes."""
    keys = frozenset(arguments)
    if not keys or name not in parameters or keys <= parameters[name]:
        return []
    fits = {tool: len(keys) / len(taken) for tool, taken in parameters.items() if tool != name and keys <= taken}
    if not fits:
        return []
    best = max(fits.values())
    return sorted(tool for tool, score in fits.items() if score == best)


def misnamed_calls(records: Sequence[EpisodeRecord], parameters: Mapping[str, frozenset[str]]) -> dict[str, Any]:
    """The tool calls of ``records`` whose arguments fit another tool and not the named one
    (``tools_fitting``): their number among all calls, per ``"<name> for <fitting tools>"`` and
    per family (calls, misnamed)."""
    calls = misnamed = 0
    pairs: Counter[str] = Counter()
    by_family: dict[str, list[int]] = {}
    for record in records:
        row = by_family.setdefault(record.family, [0, 0])
        for step in parse_messages(record.messages).steps:
            if step.kind != "tool":
                continue
            calls += 1
            row[0] += 1
            fits = tools_fitting(step.name, step.arguments, parameters)
            if fits:
                misnamed += 1
                row[1] += 1
                pairs[f"{step.name} for {'/'.join(fits)}"] += 1
    return {"calls": calls, "misnamed": misnamed, "pairs": dict(pairs.most_common()),
            "by_family": {family: {"calls": n, "misnamed": m} for family, (n, m) in sorted(by_family.items()) if m}}


def analyse_writes(records: Sequence[EpisodeRecord], tasks: Mapping[str, EvalTask],
                   write_tools: Collection[str], env: EnvConfig | None = None,
                   confirmation_faults: ConfirmationFaults | None = None) -> dict[str, Any]:
    """The report (see the module docstring) of ``records`` (aborted ones skipped), whose tasks
    ``tasks`` maps by id; a record of a task not there is a DataError. ``env``: the evaluation's
    environment settings (without them a delexicalised episode is ``unreplayable``);
    ``confirmation_faults``: the domain's, for the report's ``confirmations`` (None without).
    The tools' parameters (``misnamed``) are read from the first task's domain."""
    missing = sorted({r.task_id for r in records if r.task_id not in tasks})
    if missing:
        raise DataError(f"transcripts hold task(s) {missing[:3]} that the saved config does not evaluate")
    finished = [r for r in records if not r.aborted]
    if finished and not any(r.messages for r in finished):
        raise DataError("the transcripts hold no messages (the evaluation ran with save_transcripts=false); "
                        "evaluate again with save_transcripts=true")
    episodes = [episode_writes(r, tasks[r.task_id], write_tools, env) for r in finished]
    gold = Counter[str]()
    for record in finished:
        gold.update(a.name for a in tasks[record.task_id].task.actions if a.name in write_tools)
    return {"episodes": len(episodes), "aborted": len(records) - len(finished),
            "write_tools": sorted(write_tools),
            "tools": _per_tool(episodes, gold, write_tools),
            "failed_writes": _failed_writes(episodes),
            "unneeded_writes": _unneeded_writes(episodes),
            "after_rejected": after_rejected(finished, write_tools),
            "confirmations": None if confirmation_faults is None else _confirmations(
                [r for r, e in zip(finished, episodes) if e.outcome is not None], tasks, confirmation_faults),
            "misnamed": misnamed_calls(finished, tool_parameters(
                next(iter(tasks.values())).bundle.domain.tool_schemas()) if tasks else {}),
            "first_replies": first_replies(finished),
            "second_replies": first_replies(finished, tool_results=2, chars=SECOND_REPLY_CHARS)}


def _per_tool(episodes: list[EpisodeWrites], gold: Counter[str], write_tools: Collection[str]) -> dict[str, Any]:
    tools: dict[str, Any] = {}
    for name in sorted(write_tools):
        calls = [c for e in episodes for c in e.calls if c.name == name]
        errors = Counter(error_kind(c.observation) for c in calls if c.error)
        tools[name] = {"attempted": len(calls), "executed": sum(not c.error for c in calls),
                       "gold": gold[name], "errors": dict(errors.most_common())}
    return tools


def _failed_writes(episodes: list[EpisodeWrites]) -> dict[str, Any]:
    failed = [e for e in episodes if e.outcome is not None]
    by_family: dict[str, dict[str, int]] = {}
    for e in failed:
        by_family.setdefault(e.family, dict.fromkeys(OUTCOMES, 0))[e.outcome] += 1  # type: ignore[index]
    first_write = [e.calls[0].turn for e in failed if e.calls]
    first_rejected = [next(c.turn for c in e.calls if c.error) for e in failed if any(c.error for c in e.calls)]
    return {"write_episodes": sum(e.needs_write for e in episodes), "failed": len(failed),
            "outcomes": {k: sum(e.outcome == k for e in failed) for k in OUTCOMES},
            "right_db_cut_off": sum(e.outcome == "right_db" and e.cut_off for e in failed),
            "wrong_tool_instead": _wrong_tools(failed),
            "by_family": dict(sorted(by_family.items())),
            "median_turn_first_write": _median(first_write), "median_turn_first_rejected": _median(first_rejected),
            "episodes": [{"task_id": e.task_id, "trial": e.trial, "family": e.family, "outcome": e.outcome,
                          "calls": [[c.name, c.turn, "rejected" if c.error else "executed"] for c in e.calls]}
                         for e in failed]}


def _wrong_tools(failed: list[EpisodeWrites]) -> dict[str, int]:
    """``"<executed tool> for <gold tools>"`` -> episodes, over the ``wrong_tool`` episodes."""
    pairs: Counter[str] = Counter()
    for e in failed:
        if e.outcome == "wrong_tool":
            wrong = sorted({c.name for c in e.executed} - set(e.gold_tools))
            pairs.update(f"{name} for {'+'.join(e.gold_tools)}" for name in wrong)
    return dict(pairs.most_common())


def _unneeded_writes(episodes: list[EpisodeWrites]) -> dict[str, Any]:
    by_family: dict[str, dict[str, Any]] = {}
    for e in episodes:
        if e.needs_write:
            continue
        row = by_family.setdefault(e.family, {"episodes": 0, "with_write": 0, "executed": {}})
        row["episodes"] += 1
        row["with_write"] += bool(e.executed)
        for call in e.executed:
            row["executed"][call.name] = row["executed"].get(call.name, 0) + 1
    return dict(sorted(by_family.items()))


NEXT_AFTER_REJECTED: dict[str, str] = {
    "same_call": "the same call again",
    "same_tool": "the same tool, other arguments",
    "other_write": "another write tool",
    "other_tool": "a tool that does not write (a read, think, a transfer)",
    "message": "a message to the user",
    "malformed": "a malformed turn",
    "end": "nothing: the episode ends",
}
"""What the agent's turn after a rejected write call can be, in the report's order."""


def _next_after_rejected(rejected: Step, following: Step | None, write_tools: Collection[str]) -> str:
    if following is None:
        return "end"
    if following.kind == "respond":
        return "message"
    if following.kind != "tool":
        return "malformed"
    if following.name == rejected.name:
        return "same_call" if following.arguments == rejected.arguments else "same_tool"
    return "other_write" if following.name in write_tools else "other_tool"


def after_rejected(records: Sequence[EpisodeRecord], write_tools: Collection[str]) -> dict[str, Any]:
    """Whether the agent recovers from a rejected write call (an error observation): its next turn
    (``NEXT_AFTER_REJECTED``), per write tool how many rejected calls are followed later in the
    episode by an executed call of the same tool, and the episodes with a rejected write and how
    many of them were won (reward 1)."""
    following = dict.fromkeys(NEXT_AFTER_REJECTED, 0)
    by_tool: dict[str, dict[str, int]] = {}
    episodes = won = 0
    for record in records:
        steps = parse_messages(record.messages).steps
        rejected = [i for i, s in enumerate(steps) if s.kind == "tool" and s.name in write_tools and s.error]
        for i in rejected:
            step = steps[i]
            following[_next_after_rejected(step, steps[i + 1] if i + 1 < len(steps) else None, write_tools)] += 1
            row = by_tool.setdefault(step.name, {"rejected": 0, "executed_later": 0})
            row["rejected"] += 1
            row["executed_later"] += any(s.kind == "tool" and s.name == step.name and not s.error
                                         for s in steps[i + 1:])
        if rejected:
            episodes += 1
            won += record.reward >= 1.0
    return {"rejected_calls": sum(following.values()), "next": following,
            "executed_later": sum(row["executed_later"] for row in by_tool.values()),
            "by_tool": dict(sorted(by_tool.items())), "episodes": episodes, "episodes_won": won}


def _confirmations(failed: list[EpisodeRecord], tasks: Mapping[str, EvalTask],
                   faults_of: ConfirmationFaults) -> dict[str, Any]:
    """The confirmation requests of the failed write episodes ``failed``: how many, how many the user
    would accept, and the faults of the others (each fault once per request), overall and per family."""
    requests = accepted = 0
    faults: Counter[str] = Counter()
    by_family: dict[str, Counter[str]] = {}
    for record in failed:
        for message in record.messages:
            if message.get("role") != "assistant" or message.get("tool_calls"):
                continue
            found = faults_of(tasks[record.task_id].task, str(message.get("content") or ""))
            if found is None:
                continue
            requests += 1
            accepted += not found
            if found:
                faults.update(found)
                by_family.setdefault(record.family, Counter()).update(found)
    return {"requests": requests, "accepted": accepted, "faults": dict(faults.most_common()),
            "by_family": {family: dict(counts.most_common()) for family, counts in sorted(by_family.items())}}


FIRST_REPLY_CHARS = 120
"""How much of a first reply ``first_replies`` compares (a message's opening says what it asks)."""
SECOND_REPLY_CHARS = 40
"""How much of the reply after the second read it compares: that reply states values (a
reservation, its flights, a refund) after a fixed opening that says what it does ("Here is what I
will do: cancel reservation", "Which payment method from your profile")."""


def first_reply(messages: Sequence[Mapping[str, Any]], tool_results: int = 1,
                chars: int = FIRST_REPLY_CHARS) -> str | None:
    """The agent's first message to the user (no tool call) after the episode's ``tool_results``-th
    tool result (``first_reply_index``), whitespace collapsed and cut to ``chars``; None where
    there is none."""
    index = first_reply_index(messages, tool_results)
    return None if index is None else " ".join(str(messages[index].get("content") or "").split())[:chars]


def first_replies(records: Sequence[EpisodeRecord], tool_results: int = 1,
                  chars: int = FIRST_REPLY_CHARS) -> dict[str, Any]:
    """Per family: episodes, the most common ``first_reply`` and how many episodes made it; and the
    message that leads in the most families, with those families (``leading``)."""
    by_family: dict[str, Counter[str]] = {}
    for record in records:
        reply = first_reply(record.messages, tool_results, chars)
        by_family.setdefault(record.family, Counter())[reply if reply is not None else ""] += 1
    families = {}
    for family, replies in sorted(by_family.items()):
        reply, count = replies.most_common(1)[0]
        families[family] = {"episodes": sum(replies.values()), "reply": reply, "count": count}
    leads = Counter(row["reply"] for row in families.values() if row["reply"])
    top = leads.most_common(1)[0][0] if leads else None
    return {"families": families,
            "leading": {"reply": top, "families": sorted(f for f, row in families.items() if row["reply"] == top)}}


# ---- the evaluation directory ---------------------------------------------------------------
def load_eval_dir(out_dir: str | Path) -> tuple[Any, list[EpisodeRecord], dict[str, EvalTask]]:
    """The saved config, the episode records and the evaluated tasks by id of an evaluation
    directory; a directory that holds no evaluation is a MissingFileError saying so."""
    from agentgrpo.eval.runner import read_eval_dir
    from agentgrpo.eval.tasks import eval_tasks

    config, records = read_eval_dir(out_dir)
    wanted = {r.task_id for r in records}
    tasks = {t.task.task_id: t for t in eval_tasks(config) if t.task.task_id in wanted}
    return config, records, tasks


def analyse_eval_dir(out_dir: str | Path) -> dict[str, Any]:
    """The write report of an evaluation directory, also written there as writes.json and writes.md."""
    from agentgrpo.envs.registry import get_domain, write_tools
    from agentgrpo.policy.hf import resolve_view

    config, records, tasks = load_eval_dir(out_dir)
    tools = write_tools(config.env)
    if tools is None:
        raise DataError(f"{config.env.domain!r} declares no write_tools: nothing says which of its calls write")
    faults = getattr(get_domain(config.env.domain), "confirmation_faults", None)
    # a delexicalised episode is played again in the view its policy read (its places as slots or not)
    policy_env = resolve_view(config.env, config.policy.init)
    analysis = analyse_writes(records, tasks, tools, policy_env, faults)
    report = {"eval_dir": str(out_dir), "policy": config.policy.init, **analysis}
    out = Path(out_dir)
    (out / WRITES_JSON).write_text(json.dumps(report, indent=2))
    (out / WRITES_MD).write_text(writes_markdown(report))
    return report


# ---- writes.md ------------------------------------------------------------------------------
def writes_markdown(report: Mapping[str, Any]) -> str:
    failed = report["failed_writes"]
    lines = [f"# Write calls: `{report.get('policy', '')}`", "",
             f"{report['episodes']} finished episodes ({report['aborted']} aborted, left out); "
             f"{failed['write_episodes']} on tasks whose gold actions change the database, "
             f"{failed['failed']} of them failed.", "",
             "## Per write tool", "",
             "| tool | attempted | executed | gold | top errors (count) |", "|---|---|---|---|---|"]
    for name, row in report["tools"].items():
        errors = "; ".join(f"{kind} ({n})" for kind, n in list(row["errors"].items())[:ERRORS_SHOWN]) or "-"
        lines.append(f"| {name} | {row['attempted']} | {row['executed']} | {row['gold']} | {_cell(errors)} |")
    lines += ["", "## Failed write episodes by outcome", "",
              "Outcome classes, the first that applies: "
              + "; ".join(f"**{SHORT_NAMES[k]}**: {text}" for k, text in OUTCOMES.items()) + ".", ""]
    lines += _outcome_table(failed)
    instead = "; ".join(f"{pair} ({n})" for pair, n in failed["wrong_tool_instead"].items()) or "-"
    lines += ["", f"Wrong tools executed, for the gold tools: {instead}.",
              "", f"Right-database episodes cut off by the turn limit: {failed['right_db_cut_off']}. "
              f"Median turn (assistant message, from 1) of the first write call: "
              f"{_number(failed['median_turn_first_write'])}; of the first rejected one: "
              f"{_number(failed['median_turn_first_rejected'])}.", ""]
    lines += _unneeded_table(report["unneeded_writes"])
    lines += _after_rejected_lines(report.get("after_rejected"))
    lines += _confirmation_lines(report.get("confirmations"))
    lines += _misnamed_lines(report.get("misnamed"))
    lines += _first_reply_lines(report.get("first_replies"), "The first reply after a tool result",
                                "The agent's first message to the user after its first tool result (in the "
                                "airline, what it asks after reading the profile)")
    lines += _first_reply_lines(report.get("second_replies"), "The reply after the second tool result",
                                "The agent's first message to the user after its second tool result (in the "
                                "airline, what it makes of the reservation it read: the change it proposes, a "
                                f"refusal), its first {SECOND_REPLY_CHARS} characters")
    return "\n".join(lines) + "\n"


def _first_reply_lines(replies: Mapping[str, Any] | None, title: str, what: str) -> list[str]:
    if not replies or not replies["families"]:
        return []
    leading, families = replies["leading"], replies["families"]
    lines = ["", f"## {title}", "",
             f"{what}: per family the most common one. "
             + (f"One leads in {len(leading['families'])} of {len(families)} families: "
                f"\"{_cell(leading['reply'])}\"." if leading["reply"] else "None was made."), "",
             "| family | episodes | most common reply | of them |", "|---|---|---|---|"]
    for family, row in families.items():
        lines.append(f"| {family} | {row['episodes']} | {_cell(row['reply']) or '(none)'} | {row['count']} |")
    return lines


MISNAMED_SHOWN = 8
"""Pairs (named tool, fitting tools) listed in writes.md; writes.json has them all."""


def _misnamed_lines(misnamed: Mapping[str, Any] | None) -> list[str]:
    if not misnamed or not misnamed["calls"]:
        return []
    lines = ["", "## Calls named for another tool's arguments", "",
             f"{misnamed['misnamed']} of {misnamed['calls']} tool calls carry an argument the named tool does not "
             "take, all of which another tool takes: the name chosen wrong, the arguments those of the call "
             "intended (every tool, reads included).", ""]
    if not misnamed["misnamed"]:
        return lines[:-1]
    lines += ["| named | arguments fit | calls |", "|---|---|---|"]
    for pair, n in list(misnamed["pairs"].items())[:MISNAMED_SHOWN]:
        named, fits = pair.split(" for ", 1)
        lines.append(f"| {named} | {fits} | {n} |")
    families = "; ".join(f"{family} {row['misnamed']}/{row['calls']}" for family, row in misnamed["by_family"].items())
    return [*lines, "", f"Per family (misnamed/calls): {families}."]


def _after_rejected_lines(after: Mapping[str, Any] | None) -> list[str]:
    if not after or not after["rejected_calls"]:
        return []
    following = "; ".join(f"{NEXT_AFTER_REJECTED[k]} {n}" for k, n in after["next"].items() if n)
    tools = "; ".join(f"{name} {row['executed_later']} of {row['rejected']}" for name, row in after["by_tool"].items())
    return ["", "## After a rejected write call", "",
            f"{after['rejected_calls']} write calls rejected, in {after['episodes']} episodes "
            f"({after['episodes_won']} of them won). The agent's next turn: {following}. "
            f"The same tool executed later in the episode: {after['executed_later']} of "
            f"{after['rejected_calls']} ({tools})."]


def _confirmation_lines(confirmations: Mapping[str, Any] | None) -> list[str]:
    if confirmations is None:
        return []
    lines = ["", "## Confirmation requests in failed write episodes", "",
             f"{confirmations['requests']} requests, {confirmations['accepted']} of them for a write the user "
             f"wants. Why the user declines the others (a request may have several faults; **other X**: a "
             f"value of X stated that the write does not have, e.g. a wrong total; **missing X**: one it "
             f"has, not stated):", ""]
    if not confirmations["faults"]:
        return [*lines, "No fault."]
    lines += ["| family | faults (count) |", "|---|---|"]
    for family, counts in confirmations["by_family"].items():
        lines.append(f"| {family} | {_cell('; '.join(f'{k} ({n})' for k, n in counts.items()))} |")
    total = "; ".join(f"{k} ({n})" for k, n in confirmations["faults"].items())
    return [*lines, f"| **all** | {_cell(total)} |"]


def _outcome_table(failed: Mapping[str, Any]) -> list[str]:
    header = "| family | " + " | ".join(SHORT_NAMES[k] for k in OUTCOMES) + " | failed |"
    lines = [header, "|---|" + "---|" * (len(OUTCOMES) + 1)]
    for family, counts in failed["by_family"].items():
        lines.append(f"| {family} | " + " | ".join(str(counts[k]) for k in OUTCOMES)
                     + f" | {sum(counts.values())} |")
    lines.append("| **all** | " + " | ".join(str(failed["outcomes"][k]) for k in OUTCOMES)
                 + f" | {failed['failed']} |")
    return lines


def _unneeded_table(unneeded: Mapping[str, Any]) -> list[str]:
    lines = ["## Writes executed on tasks that need none", ""]
    if not unneeded:
        return [*lines, "No evaluated task lacks a write."]
    lines += ["| family | episodes | with an executed write | executed calls |", "|---|---|---|---|"]
    for family, row in unneeded.items():
        calls = ", ".join(f"{name} {n}" for name, n in sorted(row["executed"].items())) or "-"
        lines.append(f"| {family} | {row['episodes']} | {row['with_write']} | {calls} |")
    return lines


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
