"""The toy domain's tasks, scripted user and agents (oracle and format warm-up).

A task is one key. The user opens with the key in one of a few phrasings (picked by the
user seed, so the key's position in the message varies) and ends the conversation after
the agent's first message. The oracle submits the task's key and then says so; the
warm-up demonstrator does the same with a key drawn uniformly at random, whatever the
user said: its transcripts teach the call format and nothing about which key, so a
policy fine-tuned on them starts GRPO at chance (1/K). No torch here.
"""
from __future__ import annotations

import random
from collections.abc import Sequence

from agentgrpo.envs.toy.domain import SUBMIT
from agentgrpo.envs.types import USER_STOP, Action, Task

OPENINGS: tuple[str, ...] = (
    "My key is {key}.",
    "Please submit my key: {key}.",
    "The key is {key}, thanks.",
    "Hello, submit {key} for me please.",
)
"""The user's first message; ``{key}`` is the task's key."""
KEYLESS_OPENINGS: tuple[str, ...] = (
    "Please submit a key.",
    "Submit any key, thanks.",
    "Hello, I need a key submitted.",
    "Any key will do, please submit one.",
)
"""The first message of a user who states no key (the format warm-up's)."""
CLOSING = f"Thank you, bye. {USER_STOP}"
"""The user's reply to any agent message: the episode ends."""
DONE_MESSAGE = "Your key is submitted."
"""What an agent tells the user after its call."""
FAMILY = "submit_key"


def make_tasks(keys: Sequence[str], count: int, seed: int, prefix: str) -> list[Task]:
    """``count`` tasks whose keys cycle through ``keys`` in a seeded order (balanced up to one)."""
    rng = random.Random(f"toy-tasks:{seed}:{prefix}")
    order = list(keys)
    tasks = []
    for i in range(count):
        if i % len(order) == 0:
            rng.shuffle(order)
        key = order[i % len(order)]
        tasks.append(Task(
            task_id=f"{prefix}_{i}", user_id="toy_user", family=FAMILY,
            instruction=f"Your key is {key}. Ask the agent to submit it.",
            actions=[Action(SUBMIT, {"key": key}), Action.respond(DONE_MESSAGE)],
            scenario={"key": key},
        ))
    return tasks


def task_key(task: Task) -> str:
    """The key a toy task's user states."""
    return task.scenario["key"]


class ToyUser:
    """A deterministic user: states the task's key (phrasing by ``seed``), stops after one agent message.

    ``states_key=False``: a user who asks for a key without saying which (``KEYLESS_OPENINGS``),
    for the format warm-up, so that fine-tuning never sees a stated key it must ignore.
    """

    def __init__(self, task: Task, seed: int = 0, states_key: bool = True) -> None:
        self.task = task
        self.seed = seed
        self.states_key = states_key

    def reset(self) -> str:
        phrasings = OPENINGS if self.states_key else KEYLESS_OPENINGS
        phrasing = random.Random(f"toy-user:{self.task.task_id}:{self.seed}").choice(phrasings)
        return phrasing.format(key=task_key(self.task))

    def step(self, agent_message: str) -> str:
        return CLOSING


class ToyAgent:
    """Submits ``key`` with one call, then tells the user (``act(observation) -> Action``).

    ``ToyAgent(task_key(task))`` is the oracle; any other key makes a wrong but well-formed
    demonstration (``warmup_agent``).
    """

    def __init__(self, key: str) -> None:
        self.key = key
        self.turns = 0
        self.last_text = ""
        self.last_error: str | None = None

    def act(self, observation: str) -> Action:
        self.turns += 1
        return Action(SUBMIT, {"key": self.key}) if self.turns == 1 else Action.respond(DONE_MESSAGE)


def warmup_agent(task: Task, keys: Sequence[str], seed: int) -> ToyAgent:
    """The format demonstrator: a key drawn uniformly from ``keys`` by ``(task, seed)``, not the user's."""
    return ToyAgent(random.Random(f"toy-warmup:{task.task_id}:{seed}").choice(list(keys)))
