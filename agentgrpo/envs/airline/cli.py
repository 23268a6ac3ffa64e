"""``agentgrpo env ...``: list, inspect, play and solve airline tasks.

* ``env tasks``  — list the tasks of a source (``generated`` or ``tau_bench``) / split;
* ``env show N`` — one task: instruction, scenario, gold actions, outputs;
* ``env play N`` — you are the agent at the terminal; the user simulator answers;
* ``env oracle`` — the oracle agent with the scripted user on N generated tasks:
  pass^1 per family and overall, optionally every transcript as JSONL;
* ``env import-tau-bench PATH`` — an upstream τ-bench checkout's airline data, policy and
  test tasks (``tasks_test.py`` parsed, never run) into a directory for ``env.source=tau_bench``.

``N`` is a position in the listing or a task id. Plain text output, no torch.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, TextIO

from agentgrpo.config import ConfigError, MissingFileError
from agentgrpo.envs.types import Action, Task

SOURCES = ("generated", "tau_bench")



def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (a count or a limit)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value

def _add_source_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--source", choices=SOURCES, default="generated",
                        help="generated worlds (default) or a τ-bench data directory")
    parser.add_argument("--data-dir", default=None,
                        help="τ-bench airline directory (default: $AGENTGRPO_TAU_BENCH_DIR, else "
                             "data/tau_bench_airline as env import-tau-bench writes it, else "
                             "../shared/tau_bench_airline)")
    parser.add_argument("--seed", type=int, default=0, help="world/task seed (generated)")
    parser.add_argument("--n-tasks", type=positive_int, default=100, help="tasks to generate")
    parser.add_argument("--split", default=None,
                        help="only this split (generated: covered_seen, uncovered_seen, "
                             "unseen; τ-bench: test)")
    parser.add_argument("--compat", choices=("fixed", "tau_bench"), default=None,
                        help="tool semantics (default: fixed for generated, tau_bench for "
                             "τ-bench data)")


def register(subparsers: Any) -> None:
    env = subparsers.add_parser("env", help="inspect, play and solve airline tasks")
    actions = env.add_subparsers(dest="env_command", metavar="ACTION", required=True)

    tasks = actions.add_parser("tasks", help="list tasks")
    _add_source_args(tasks)
    tasks.set_defaults(func=cmd_tasks)

    show = actions.add_parser("show", help="show one task")
    show.add_argument("task", help="position in the listing or task id")
    _add_source_args(show)
    show.set_defaults(func=cmd_show)

    play = actions.add_parser("play", help="play the agent yourself against the user")
    play.add_argument("task", help="position in the listing or task id")
    _add_source_args(play)
    play.add_argument("--user", choices=("scripted", "llm"), default="scripted")
    play.add_argument("--user-seed", type=int, default=0)
    play.add_argument("--user-model", default="gpt-4o-mini")
    play.add_argument("--user-base-url", default=None)
    play.add_argument("--max-steps", type=positive_int, default=30)
    play.set_defaults(func=cmd_play)

    imp = actions.add_parser("import-tau-bench", help="import an upstream τ-bench checkout's airline data and tasks")
    imp.add_argument("path", help="root of a clone of github.com/sierra-research/tau-bench")
    imp.add_argument("--out", default="data/tau_bench_airline", help="directory to write (default: %(default)s)")
    imp.set_defaults(func=cmd_import_tau_bench)

    oracle = actions.add_parser("oracle", help="run the oracle agent on generated tasks")
    oracle.add_argument("--n", type=positive_int, default=300, help="number of generated tasks")
    oracle.add_argument("--seed", type=int, default=0)
    oracle.add_argument("--user-seed", type=int, default=0)
    oracle.add_argument("--compat", choices=("fixed", "tau_bench"), default="fixed")
    oracle.add_argument("--max-steps", type=positive_int, default=30)
    oracle.add_argument("--calculator", action="store_true",
                        help="the oracle gets every sum it states from the calculate tool "
                             "(env.oracle_arithmetic=calculator)")
    oracle.add_argument("--quoted", action="store_true",
                        help="as --calculator, and each chosen flight's fare stated where it was looked up "
                             "(env.oracle_arithmetic=quoted)")
    oracle.add_argument("--goal", action="store_true",
                        help="the oracle's first reads name the user's request (env.oracle_goal=true)")
    oracle.add_argument("--goal-think", action="store_true",
                        help="as --goal, and a think call names it again after the reservation read "
                             "(env.oracle_goal=think)")
    oracle.add_argument("--out", default=None, help="write every transcript to this JSONL")
    oracle.set_defaults(func=cmd_oracle)


# ---- loading --------------------------------------------------------------------------
def _tau_bench_dir(explicit: str | None) -> Path:
    """``--data-dir`` (checked), else the first complete directory of the usual places."""
    from agentgrpo.envs.airline.core.tau_bench import check_tau_bench_dir, missing_files

    if explicit:
        return check_tau_bench_dir(explicit, "--data-dir:")
    candidates = [os.environ.get("AGENTGRPO_TAU_BENCH_DIR"),
                  str(Path.cwd() / "data" / "tau_bench_airline"),  # where `env import-tau-bench` writes
                  str(Path.cwd().parent / "shared" / "tau_bench_airline"),
                  str(Path(__file__).resolve().parents[4] / "shared" / "tau_bench_airline")]
    for candidate in candidates:
        if candidate and Path(candidate).is_dir() and not missing_files(candidate):
            return Path(candidate)
    raise MissingFileError("τ-bench airline data not found: pass --data-dir DIR or set AGENTGRPO_TAU_BENCH_DIR "
                           "(a directory with users.json, flights.json, reservations.json, policy.md and "
                           "tasks_test.json), or write data/tau_bench_airline with `agentgrpo env import-tau-bench "
                           "YOUR_TAU_BENCH_CLONE`")


def load_source(args: argparse.Namespace) -> tuple[Any, list[Task]]:
    """The domain and the listed tasks (after the split filter) for the CLI arguments."""
    if args.source == "tau_bench":
        from agentgrpo.envs.airline.core.tau_bench import load_tau_bench

        domain = load_tau_bench(_tau_bench_dir(args.data_dir), compat=args.compat or "tau_bench")
    else:
        from agentgrpo.envs.airline.tasks.generate import generate_domain, split_tasks

        domain = generate_domain(args.seed, n_tasks=args.n_tasks, compat=args.compat or "fixed")
        if args.split:
            split_tasks(domain.tasks, seed=args.seed)
    tasks = [t for t in domain.tasks if args.split is None or t.split == args.split]
    if args.split is not None and not tasks:
        splits = sorted({t.split for t in domain.tasks if t.split})
        raise ConfigError(f"--split {args.split!r} has no tasks here; choose from {splits}")
    return domain, tasks


def _select(tasks: list[Task], key: str) -> Task:
    for task in tasks:
        if task.task_id == key:
            return task
    if key.isdigit() and int(key) < len(tasks):
        return tasks[int(key)]
    raise ConfigError(f"no task {key!r} (there are {len(tasks)}; use a position or a task id)")


# ---- commands ---------------------------------------------------------------------------
def cmd_tasks(args: argparse.Namespace) -> int:
    _, tasks = load_source(args)
    for index, task in enumerate(tasks):
        instruction = " ".join(task.instruction.split())
        short = instruction if len(instruction) <= 90 else instruction[:87] + "..."
        print(f"{index:4d}  {task.task_id:<36} {task.family:<28} {task.split or '-':<15} {short}")
    print(f"{len(tasks)} tasks")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    _, tasks = load_source(args)
    task = _select(tasks, args.task)
    print(f"task:        {task.task_id}")
    print(f"family:      {task.family}    split: {task.split or '-'}    user: {task.user_id}")
    print(f"instruction: {task.instruction}")
    print("gold actions:")
    for action in task.actions:
        print(f"  {action.name} {json.dumps(action.kwargs)}")
    print(f"outputs:     {task.outputs}")
    if task.scenario is not None:
        scenario = task.to_dict()["scenario"]
        print("scenario:")
        print(json.dumps({k: v for k, v in scenario.items() if v not in (None, [], {})},
                         indent=2))
    return 0


def _make_user(args: argparse.Namespace, task: Task) -> Any:
    from agentgrpo.envs.airline.factory import UserConfig
    from agentgrpo.envs.user_sim import LLMUser, ScriptedUser

    if args.user == "llm":  # the command is a composition point: it builds the HTTP client
        from agentgrpo.openai_client import llm_user_client

        base_url = args.user_base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        return LLMUser(task, llm_user_client(UserConfig("llm", args.user_model, base_url)))
    if task.scenario is None:
        raise ConfigError("this task has no scenario for the scripted user: use --user llm")
    return ScriptedUser(task, seed=args.user_seed)


def parse_play_line(line: str) -> Action | None:
    """A typed line as an action: text, ``/tool name {json}``, or ``/quit`` (None)."""
    stripped = line.strip()
    if stripped in ("/quit", "/exit"):
        return None
    if stripped.startswith("/tool"):
        parts = stripped.split(maxsplit=2)
        name = parts[1] if len(parts) > 1 else ""
        try:
            kwargs = json.loads(parts[2]) if len(parts) > 2 else {}
        except json.JSONDecodeError:
            kwargs = {"_unparsed": parts[2]}  # becomes an error observation
        return Action(name, kwargs if isinstance(kwargs, dict) else {"_value": kwargs})
    return Action.respond(stripped)


def play(domain: Any, task: Task, user: Any, max_steps: int, stdin: TextIO,
         stdout: TextIO) -> float | None:
    """Interactive loop; returns the reward, or None if the player quit early."""
    from agentgrpo.envs.airline.core.environment import AirlineEnv

    env = AirlineEnv(domain, task, user, max_steps=max_steps)
    tools = ", ".join(sorted(domain.tool_names))
    print(f"[policy: {len(domain.policy)} characters; tools: {tools}]", file=stdout)
    print(f"user: {env.reset()}", file=stdout)
    while not env.done:
        stdout.write("agent> ")
        stdout.flush()
        line = stdin.readline()
        if not line:  # end of input: same as /quit
            line = "/quit"
        action = parse_play_line(line)
        if action is None:
            reward = domain.reward(env.state, task, env.replies)
            print(f"quit; the reward at this point would be {reward}", file=stdout)
            return None
        result = env.step(action)
        label = "user" if action.is_respond else f"tool {action.name}"
        print(f"{label}: {result.observation}", file=stdout)
    print(f"episode over ({env.termination}); reward = {env.info['grade']['reward']}",
          file=stdout)
    return env.info["grade"]["reward"]


def cmd_play(args: argparse.Namespace) -> int:
    domain, tasks = load_source(args)
    task = _select(tasks, args.task)
    print(f"task {task.task_id} ({task.family}). Type a message, '/tool name {{json}}', or "
          f"'/quit'.")
    play(domain, task, _make_user(args, task), args.max_steps, sys.stdin, sys.stdout)
    return 0


def cmd_import_tau_bench(args: argparse.Namespace) -> int:
    from agentgrpo.envs.airline.core.tau_bench import load_tau_bench
    from agentgrpo.envs.airline.core.tau_bench_import import import_tau_bench

    written = import_tau_bench(args.path, args.out)
    domain = load_tau_bench(args.out)  # the loader reads it back, or the import is wrong
    print(f"wrote {written['out']}: {len(domain.tasks)} tasks, {len(domain.data['users'])} users, "
          f"{len(domain.data['flights'])} flights, {len(domain.data['reservations'])} reservations, policy.md"
          + (", LICENSE" if written["license"] else ""))
    print(f"evaluate with: agentgrpo eval env.source=tau_bench env.data_dir={written['out']} ...")
    return 0


def cmd_oracle(args: argparse.Namespace) -> int:
    from agentgrpo.envs.airline.core.environment import AirlineEnv, run_episode
    from agentgrpo.envs.airline.simulation.plans import oracle_agent
    from agentgrpo.envs.airline.tasks.generate import generate_domain
    from agentgrpo.envs.user_sim import ScriptedUser
    from agentgrpo.preflight import check_writable_dir

    if args.out:  # a bad --out fails before any episode runs, naming the flag
        check_writable_dir(Path(args.out).parent, "--out")
    domain = generate_domain(args.seed, n_tasks=args.n, compat=args.compat)
    rewards: dict[str, list[float]] = defaultdict(list)
    out = open(args.out, "w", encoding="utf-8") if args.out else None
    try:
        for task in domain.tasks:
            env = AirlineEnv(domain, task, ScriptedUser(task, seed=args.user_seed),
                             max_steps=args.max_steps)
            agent = oracle_agent(domain, task, calculator=args.calculator or args.quoted, quote_fares=args.quoted,
                                 state_goal="think" if args.goal_think else args.goal)
            result = run_episode(env, agent)
            rewards[task.family].append(result.reward)
            if out:
                out.write(json.dumps(result.to_dict()) + "\n")
    finally:
        if out:
            out.close()
    print(f"{'family':<30} {'tasks':>5} {'pass^1':>7}")
    for family in sorted(rewards):
        values = rewards[family]
        print(f"{family:<30} {len(values):>5} {sum(values) / len(values):>7.3f}")
    every = [r for values in rewards.values() for r in values]
    print(f"{'overall':<30} {len(every):>5} {sum(every) / max(1, len(every)):>7.3f}")
    if args.out:
        print(f"transcripts written to {args.out}")
    return 0
