"""τ-bench's results files, read and written.

τ-bench (sierra-research/tau-bench, ``run.py``) saves a run as one JSON list of
``{task_id, reward, info, traj, trial}``: ``task_id`` the task's index, ``trial`` the trial
index, ``traj`` the OpenAI-style messages of the conversation (system = the policy, user,
assistant with ``tool_calls`` — only the first call of a message is executed — and ``tool``
messages with ``tool_call_id``, ``name`` and ``content``), ``info`` the task, the last step's
source and the grade (``reward_info``). An episode whose agent raised is recorded with
reward 0, ``info = {"error", "traceback"}`` and an empty ``traj``: τ-bench counts it as a
failure.

``read_results`` checks a file and returns its records; ``export_eval_dir`` writes an
``agentgrpo eval`` directory's transcripts in this schema (``tau_bench_results.json``), so
τ-bench's own tools read them: ``task_id`` is τ-bench's index for τ-bench tasks and the
task's position in the evaluated set otherwise, aborted episodes are reward-0 records with
``info.error``, and ``info.agentgrpo`` keeps what our metrics need (our task id, split,
family, user seed, PRM-Lite score, the task-defining settings). ``replay`` regrades a
trajectory by running its tool calls through our environment; a trajectory that did not
end by itself (no ``###STOP###`` from the user, no terminating tool) was cut off by the agent
loop's step limit and scores 0, as τ-bench scores it.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentgrpo.config import DataError, MissingFileError, from_dict, to_dict
from agentgrpo.envs.types import CUT_OFF, USER_STOP, GradeResult, Task

if TYPE_CHECKING:
    from agentgrpo.eval.config import EvalConfig
    from agentgrpo.eval.tasks import EvalTask
    from agentgrpo.eval.types import EpisodeRecord

RESULTS_FILE = "tau_bench_results.json"
SUCCESS_TOLERANCE = 1e-6
"""τ-bench's success test: a reward within 1e-6 of 1."""
TASK_KEYS = ("env", "splits", "tasks_per_split", "tasks_per_family", "heldout_seed", "seed", "trials", "task_ids")
"""The evaluation settings that decide its tasks, worlds and user seeds (kept in each record)."""


@dataclass(frozen=True)
class TauBenchResult:
    """One record of a τ-bench results file."""

    task_id: int | str
    reward: float
    info: dict[str, Any]
    traj: list[dict[str, Any]]
    trial: int

    @property
    def ours(self) -> dict[str, Any]:
        """``info.agentgrpo`` (our exports), or {}."""
        extra = self.info.get("agentgrpo")
        return extra if isinstance(extra, dict) else {}

    @property
    def key(self) -> str:
        """Our task id: the one we exported, else τ-bench's index as text ("0".."49")."""
        return str(self.ours.get("task_id", self.task_id))

    @property
    def success(self) -> bool:
        return abs(self.reward - 1.0) <= SUCCESS_TOLERANCE

    @property
    def aborted(self) -> bool:
        """The episode did not finish: our aborted flag, or τ-bench's crash record (``error``, no grade)."""
        if "aborted" in self.ours:
            return bool(self.ours["aborted"])
        return "error" in self.info and "reward_info" not in self.info


# ---- reading --------------------------------------------------------------------------------
def read_results(path: str | Path) -> list[TauBenchResult]:
    """The records of a τ-bench results file; a malformed file is a DataError naming the file,
    the record and the field."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"{path}: no such results file (τ-bench's run.py writes one per run into its "
                               "--log-dir; `agentgrpo eval --format tau-bench` writes tau_bench_results.json)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: not a JSON file ({' '.join(str(e).split())})") from None
    if not isinstance(data, list) or not data:
        raise DataError(f"{path}: a τ-bench results file is a non-empty JSON list of {{task_id, reward, info, traj, "
                        f"trial}} records, got {_kind(data)}")
    results = [_record(item, i, path) for i, item in enumerate(data)]
    seen: dict[tuple[str, int], int] = {}
    for i, r in enumerate(results):
        if (r.key, r.trial) in seen:
            raise DataError(f"{path}: records {seen[(r.key, r.trial)]} and {i} are both task {r.task_id} trial "
                            f"{r.trial}")
        seen[(r.key, r.trial)] = i
    return results


def _record(item: Any, index: int, path: Path) -> TauBenchResult:
    def bad(what: str) -> DataError:
        return DataError(f"{path}: record {index}: {what}")

    if not isinstance(item, dict):
        raise bad(f"expected an object with task_id, reward, info, traj, trial, got {_kind(item)}")
    missing = [k for k in ("task_id", "reward", "trial") if k not in item]
    if missing:
        raise bad(f"missing {', '.join(missing)}")
    task_id, reward, trial = item["task_id"], item["reward"], item["trial"]
    if isinstance(task_id, bool) or not isinstance(task_id, (int, str)) or task_id == "":
        raise bad(f"task_id must be an integer (or a task id string), got {task_id!r}")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        raise bad(f"reward must be a finite number, got {reward!r}")
    if isinstance(trial, bool) or not isinstance(trial, int) or trial < 0:
        raise bad(f"trial must be an integer >= 0, got {trial!r}")
    info, traj = item.get("info", {}), item.get("traj", [])
    if not isinstance(info, dict):
        raise bad(f"info must be an object, got {_kind(info)}")
    if not isinstance(traj, list) or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in traj):
        raise bad("traj must be a list of chat messages (objects with a 'role')")
    return TauBenchResult(task_id, float(reward), info, traj, trial)


def _kind(value: Any) -> str:
    return "an empty list" if value == [] else type(value).__name__


# ---- replaying ----------------------------------------------------------------------------------
def replay(domain: Any, task: Task, traj: list[dict[str, Any]], termination: str | None = None) -> GradeResult:
    """Grade a trajectory by replaying it on a fresh database of ``domain``.

    Every assistant message with ``tool_calls`` runs its first call (as τ-bench's agent
    does; arguments that are not a JSON object are a malformed turn that never ran); an
    assistant message without calls is a reply to the user, unless a ``tool`` message
    answers it (how a malformed turn of our policies is recorded), and the replies are
    searched for the task's outputs.

    A cut-off episode scores 0 (the grade's other fields are the database's): one whose
    recorded ``termination`` (our exports) is in ``CUT_OFF``, or, when none is recorded, one
    that did not end by itself (``ended_by_itself``).
    """
    state = domain.new_state()
    replies: list[str] = []
    for i, message in enumerate(traj):
        if message.get("role") != "assistant":
            continue
        calls = message.get("tool_calls") or []
        if calls:
            name, arguments = _first_call(calls)
            if arguments is not None:
                domain.execute(state, name, arguments)
            continue
        answered_by_tool = i + 1 < len(traj) and traj[i + 1].get("role") == "tool"
        if not answered_by_tool:
            content = message.get("content")
            replies.append(content if isinstance(content, str) else "")
    grade = domain.grade(state, task, replies)
    cut_off = termination in CUT_OFF if termination else not ended_by_itself(traj, domain.terminal_tools)
    return replace(grade, reward=0.0) if cut_off else grade


def ended_by_itself(traj: list[dict[str, Any]], terminal_tools: Any) -> bool:
    """Whether τ-bench's loop would have stopped the episode itself: a user message says
    ``###STOP###``, or the agent called a terminating tool (τ-bench ends on the call, whatever
    it returned). Otherwise the loop ran out of steps, and τ-bench's reward is 0."""
    for message in traj:
        role = message.get("role")
        if role == "user" and USER_STOP in str(message.get("content") or ""):
            return True
        if role == "assistant" and message.get("tool_calls"):
            name, _ = _first_call(message["tool_calls"])
            if name in terminal_tools:
                return True
    return False


def _first_call(calls: list[Any]) -> tuple[Any, dict[str, Any] | None]:
    """Name and arguments (None: not a JSON object) of a message's first tool call."""
    function = calls[0].get("function") if isinstance(calls[0], dict) else None
    function = function if isinstance(function, dict) else {}
    return function.get("name"), _arguments(function.get("arguments"))


def _arguments(raw: Any) -> dict[str, Any] | None:
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


# ---- writing ------------------------------------------------------------------------------------
def export_eval_dir(out_dir: str | Path, path: str | Path | None = None) -> tuple[Path, int]:
    """Write ``out_dir``'s transcripts as a τ-bench results file (default
    ``out_dir/tau_bench_results.json``); returns the path and the number of records."""
    from agentgrpo.eval.runner import read_eval_dir
    from agentgrpo.eval.tasks import eval_tasks

    out = Path(out_dir)
    config, records = read_eval_dir(out)
    tasks = eval_tasks(config)
    results = tau_bench_results(records, tasks, config)
    target = Path(path) if path else out / RESULTS_FILE
    target.write_text(json.dumps(results, indent=2))
    return target, len(results)


def eval_config_from(data: Mapping[str, Any]) -> EvalConfig:
    """An EvalConfig from a saved config (the whole of it, or its ``TASK_KEYS``)."""
    from agentgrpo.eval.config import EvalConfig  # here: it imports torch, which reading results needs not

    return from_dict(EvalConfig, dict(data))


def tau_bench_results(records: list[EpisodeRecord], tasks: list[EvalTask], config: EvalConfig) -> list[dict]:
    """Our episode records as τ-bench's results records, in the order of ``records``."""
    position = {t.task.task_id: (i, t) for i, t in enumerate(tasks)}
    settings = {k: v for k, v in to_dict(config).items() if k in TASK_KEYS}
    missing = [r.task_id for r in records if r.task_id not in position]
    if missing:
        raise DataError(f"transcripts hold task(s) {missing[:3]} that the saved config does not evaluate")
    return [to_tau_bench(r, *position[r.task_id], settings) for r in records]


def to_tau_bench(record: EpisodeRecord, index: int, task: EvalTask, settings: dict[str, Any]) -> dict[str, Any]:
    """One episode as τ-bench records it (see the module docstring)."""
    gold = task.task
    ours = {"task_id": record.task_id, "split": record.split, "family": record.family,
            "user_seed": record.user_seed, "process_score": record.process_score,
            "termination": record.termination, "aborted": record.aborted, "eval": settings}
    info: dict[str, Any] = {"task": {"user_id": gold.user_id, "actions": [a.to_dict() for a in gold.actions],
                                     "instruction": gold.instruction, "outputs": list(gold.outputs)}}
    if record.aborted:
        info |= {"error": record.error or "aborted", "traceback": ""}
    else:
        grade = replay(task.bundle.domain, gold, record.messages)
        info |= {"source": _last_source(record.messages), "user_cost": None,
                 "reward_info": _reward_info(record.reward, grade, gold, task.bundle.domain)}
    info["agentgrpo"] = ours
    task_id = int(gold.task_id) if gold.task_id.isdigit() else index
    return {"task_id": task_id, "reward": 0.0 if record.aborted else float(record.reward), "info": info,
            "traj": record.messages, "trial": record.trial}


def _reward_info(reward: float, grade: GradeResult, task: Task, domain: Any) -> dict[str, Any]:
    """τ-bench's ``reward_info``: the output check when the task has outputs, else the database check."""
    if task.outputs:
        detail = {"r_outputs": float(all(grade.outputs_found.values())), "outputs": grade.outputs_found}
    else:
        detail = {"r_actions": float(grade.db_match), "gt_data_hash": grade.gold_hash}
    actions = [a.to_dict() for a in task.actions if a.name != "respond"]
    return {"reward": float(reward), "info": detail, "actions": actions}


def _last_source(messages: list[dict[str, Any]]) -> str:
    """τ-bench's ``info.source``: who produced the last observation (``user`` or the tool's name)."""
    last = messages[-1] if messages else {}
    return str(last.get("name") or "user") if last.get("role") == "tool" else "user"
