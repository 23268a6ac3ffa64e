"""User simulators: the scripted user (offline default) and an LLM user (any API).

A user simulator has two methods: ``reset()`` returns the user's first message and
``step(agent_message)`` returns the reply to one agent message. A reply containing
``###STOP###`` ends the episode.

``ScriptedUser`` follows a generated task's ``Scenario``: it answers the agent's
questions from it, says "yes" to a confirmation only when the stated details match
the write it wants, accepts a correct refusal, and stops when its goal is met or
the agent is going nowhere. Its rules are listed in docs/environment-generated.md.
``LLMUser`` plays τ-bench's user with any chat client (``ChatClient``: in practice
``agentgrpo.openai_client.OpenAIChatPolicy`` on an OpenAI-compatible API), which
the caller builds and passes in: this layer does no HTTP of its own.
"""
from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Protocol

from agentgrpo.chat_content import content_text
from agentgrpo.envs.airline.simulation.dialogue import (
    asked_slots,
    confirmation_matches,
    is_confirmation_request,
    is_refusal,
    mentions_transfer,
    outputs_stated,
)
from agentgrpo.envs.airline.simulation.scenario import Scenario
from agentgrpo.envs.airline.simulation.user_script import answer_slots, opening, restatement
from agentgrpo.envs.types import USER_STOP, Task

AGENT_GREETING = "Hi! How can I help you today?"
NON_ANSWERS = ("help", "anything_else")  # slots that ask nothing the user must answer


class UserSimulator(Protocol):
    """What the environment needs from a user."""

    def reset(self) -> str: ...
    def step(self, agent_message: str) -> str: ...


class ScriptedUser:
    """A deterministic user that follows ``task.scenario`` (generated tasks only).

    Args:
        task: A generated task (its ``scenario`` is a ``Scenario`` or its dict).
        seed: Picks among phrasings; same seed and same agent messages, same replies.
        patience: Consecutive unproductive agent messages tolerated before stopping.
        max_turns: Agent messages answered at most before stopping.
    """

    def __init__(self, task: Task, seed: int = 0, patience: int = 4, max_turns: int = 25) -> None:
        self.task = task
        self.scenario = Scenario.of(task.scenario)
        self.seed = seed
        self.patience = patience
        self.max_turns = max_turns
        self.reset_state()

    def reset_state(self) -> None:
        self.rng = random.Random(f"user:{self.task.task_id}:{self.seed}")
        self.confirmed = 0          # confirmations accepted so far
        self.unproductive = 0       # consecutive agent messages that moved nothing
        self.turns = 0
        self.insisted = False
        self.finished = False
        self.slot_counts: dict[str, int] = {}
        self.memory: dict[str, Any] = {}  # per-episode facts of the slot answers

    def reset(self) -> str:
        self.reset_state()
        return opening(self.scenario, self.rng)

    # ---- one reply -----------------------------------------------------------------
    def step(self, agent_message: str) -> str:
        text = agent_message if isinstance(agent_message, str) else str(agent_message)
        self.turns += 1
        s = self.scenario
        if self.finished or self.turns > self.max_turns:
            return self._stop()
        if s.expected == "answer" and outputs_stated(s.answer, text):
            return self._stop()
        if is_confirmation_request(text):
            return self._on_confirmation(text)
        if mentions_transfer(text):
            return self._on_transfer()
        if is_refusal(text):
            return self._on_refusal()
        slots = [slot for slot in asked_slots(text) if slot not in NON_ANSWERS]
        if self._goal_met() and not slots:
            return self._stop()
        reply = answer_slots(s, slots, text, self.rng, self.memory) if slots else ""
        if reply and not self._repeating(slots):
            self.unproductive = 0
            return reply
        return self._drift()

    def _goal_met(self) -> bool:
        """Every write the user wanted was confirmed (even one the policy forbids)."""
        return self.confirmed >= len(self.scenario.confirmations) > 0

    def _repeating(self, slots: list[str]) -> bool:
        """The agent asks again only things answered three times already."""
        for slot in slots:
            self.slot_counts[slot] = self.slot_counts.get(slot, 0) + 1
        return all(self.slot_counts[slot] > 3 for slot in slots)

    def _on_confirmation(self, text: str) -> str:
        confirmations = self.scenario.confirmations
        pending = confirmations[self.confirmed] if self.confirmed < len(confirmations) else None
        if pending is not None and confirmation_matches(pending, text):
            self.confirmed += 1
            self.unproductive = 0
            return self.rng.choice(("Yes, please go ahead.", "Yes.", "Yes, that's right."))
        self.unproductive += 1
        if self.unproductive >= self.patience:
            return self._stop()
        return "No, that's not what I want. " + restatement(self.scenario)

    def _on_transfer(self) -> str:
        if self.scenario.expected == "transfer":
            self.finished = True  # the next message, if any, ends the conversation
            return "Okay, thank you."
        return self._insist("I don't want to be transferred; I'd like you to handle this.")

    def _on_refusal(self) -> str:
        if self.scenario.expected == "refusal":
            return self._stop()
        if self.scenario.expected == "transfer":
            return self._insist("Then could you transfer me to someone who can help?")
        return self._insist("Are you sure? " + restatement(self.scenario))

    def _insist(self, text: str) -> str:
        if self.insisted:
            return self._stop()
        self.insisted = True
        return text

    def _drift(self) -> str:
        self.unproductive += 1
        if self.unproductive >= self.patience:
            return self._stop()
        prefix = self.rng.choice(("", "Sorry, I'm not sure what you mean. ", "Hmm. "))
        return prefix + restatement(self.scenario)

    def _stop(self) -> str:
        self.finished = True
        return USER_STOP


# ---- LLM user --------------------------------------------------------------------
def user_system_prompt(instruction: str) -> str:
    """τ-bench-style user prompt, in our words: play the user, one line at a time."""
    return (
        "You play a customer talking to an airline customer-service agent.\n\n"
        f"Instruction: {instruction}\n\n"
        "Rules:\n"
        "- Write one line at a time, as the customer would.\n"
        "- Reveal only what the current step needs; do not recite the whole instruction.\n"
        "- Never invent facts the instruction does not give (ids, dates, names): if asked "
        "for something you do not know, say so.\n"
        f"- When your goal is reached, or cannot be reached, reply with {USER_STOP} alone.\n"
        "- Use your own words and keep the personality the instruction describes."
    )


class ChatClient(Protocol):
    """A chat-completions client (``OpenAIChatPolicy`` is one): the model, URL, retries and
    API key are its business; the user simulator only sends messages."""

    base_url: str

    def complete(self, messages: Sequence[dict[str, Any]], *, temperature: float | None = 0.0,
                 seed: int | None = None) -> dict[str, Any]: ...


class LLMUser:
    """A user played by a chat model through ``client``.

    Args:
        task: Any task; its ``instruction`` drives the model.
        client: The chat client (e.g. ``OpenAIChatPolicy(base_url, model)``); one client
            may serve every episode, as it keeps no conversation state.
        temperature: Sampling temperature; ``None`` sends none, so the server's default
            applies (what τ-bench's user does).
        seed: Sent as the request's ``seed`` (servers that support it sample
            reproducibly); ``None`` sends none.

    A client error (``agentgrpo.config.EndpointError``) propagates: the environment ends
    the episode as ``aborted`` if it was built to (``make_env(..., abort_on_endpoint_error=True)``).
    """

    def __init__(self, task: Task, client: ChatClient, temperature: float | None = 0.0,
                 seed: int | None = None) -> None:
        self.task = task
        self.client = client
        self.temperature = temperature
        self.seed = seed
        self.messages: list[dict[str, str]] = []

    @property
    def base_url(self) -> str:
        """The API root this user simulator talks to (always ending in ``/v1``)."""
        return self.client.base_url

    def reset(self) -> str:
        # Roles are mirrored: the model is the customer, so the agent speaks as "user".
        self.messages = [{"role": "system", "content": user_system_prompt(self.task.instruction)},
                         {"role": "user", "content": AGENT_GREETING}]
        return self._next()

    def step(self, agent_message: str) -> str:
        self.messages.append({"role": "user", "content": agent_message})
        return self._next()

    def _next(self) -> str:
        reply = self.client.complete(self.messages, temperature=self.temperature, seed=self.seed)
        text = content_text(reply.get("content")).strip()
        self.messages.append({"role": "assistant", "content": text})
        return USER_STOP if USER_STOP in text else text
