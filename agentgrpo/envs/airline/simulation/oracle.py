"""The oracle (teacher) agent: solves generated tasks the way the policy asks.

It behaves like a careful human agent: asks for the user id, reads the profile and
the reservation before acting, applies the rules in ``policy`` to what it read,
states every write and waits for an explicit "yes", makes one tool call per turn
(with a one-sentence reason as its text) and never mixes a call with a message,
reports results, refuses what the policy forbids and transfers what is out of scope.
Every price or sum it states it either works out silently, as a human agent would (the
default), or, with ``calculator=True``, gets from one ``calculate`` call whose expression
holds only numbers already in the conversation, so a small policy learns to copy the
operands rather than to do the arithmetic (``OracleAgent.reckon``). With ``state_goal=True`` the
reasons of its first reads (the profile, the reservation) name what the user asked for in one fixed
phrase per request (``goal_phrase``), so the decisions that follow them read the request from the
agent's own words, a few tokens back, not from the user's opening line beyond a profile. With
``state_goal="think"`` it also calls ``think`` with that phrase right after reading the reservation
the user names, so the reply after the reservation's record reads the request just before it.
It knows the user's answers from the task's scenario, but only uses each one after
the user has said it, so its transcripts are clean teacher data for SFT.

Each intent's dialogue is a plan: a generator that yields ``Move`` s and receives
observations, given to the agent in a ``{intent: plan}`` table (``plans.PLANS``, which
builds on this module's building blocks; ``plans.oracle_agent`` puts the two together).
``OracleAgent.act`` drives the plan one step at a time.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agentgrpo.envs.airline.simulation.dialogue import is_yes
from agentgrpo.envs.airline.simulation.scenario import Scenario, their_request
from agentgrpo.envs.types import Action, Task, is_error_observation

CLOSING = "Is there anything else I can help you with?"
AUTH_QUESTION = "I can look into that. Could you please give me your user id?"
_GOALS = {
    "cancel": "to cancel a reservation",
    "compensation": "compensation for a disrupted flight",
    "change_flight": "to change the flights of a reservation",
    "change_cabin": "to change the cabin of a reservation",
    "add_bags": "to add checked bags to a reservation",
    "update_passengers": "to correct a passenger of a reservation",
    "add_insurance": "to add travel insurance to a reservation",
    "add_passenger": "to add a passenger to a reservation",
    "book": "to book a new trip",
}
_QUESTIONS = {
    "gift_card_balance": "to know their gift card balance",
    "reservation_total": "to know what they paid for a reservation",
    "upcoming_count": "to know how many of their reservations have not started",
}


def goal_phrase(scenario: Scenario) -> str:
    """What the user asked for, as the oracle names it with ``state_goal`` (``"to cancel a
    reservation"``): one phrase per request, whatever words the user chose."""
    if scenario.intent == "info":
        return _QUESTIONS[scenario.question or "upcoming_count"]
    if scenario.intent == "transfer":
        return "to " + their_request(scenario.request or "lost_item")
    return _GOALS[scenario.intent]


@dataclass(frozen=True)
class Move:
    """One oracle turn: an action and the text that goes with it (a tool call's reason)."""

    action: Action
    text: str = ""


Script = Generator[Move, str, Any]
Plan = Callable[["OracleAgent"], Script]


class Abort(Exception):
    """The dialogue cannot go on (a tool failed unexpectedly): transfer to a human."""

    def __init__(self, summary: str) -> None:
        super().__init__(summary)
        self.summary = summary


class OracleAgent:
    """Policy-following agent for generated tasks; ``act(observation) -> Action``.

    ``last_text`` holds the text accompanying the last action (the reason given with a
    tool call; the message itself for a respond action).
    """

    def __init__(self, domain: Any, task: Task, plans: Mapping[str, Plan], calculator: bool = False,
                 quote_fares: bool = False, state_goal: bool | Literal["think"] = False) -> None:
        self.domain = domain
        self.calculator, self.quote_fares, self.state_goal = calculator, quote_fares, state_goal
        self._quote = ""  # what the next message or tool-call reason opens with (``quote``)
        self.task = task
        self.scenario = Scenario.of(task.scenario)
        self.plan = plans[self.scenario.intent]
        self.last_text = ""
        self._script: Script | None = None

    def act(self, observation: str) -> Action:
        if self._script is None:  # the first observation is the user's opening message
            self._script = self._run()
            move = next(self._script)
        else:
            move = self._script.send(observation)
        self.last_text = move.text or move.action.kwargs.get("content", "")
        return move.action

    def _run(self) -> Script:
        try:
            yield from self.plan(self)
        except Abort as abort:
            yield Move(Action("transfer_to_human_agents", {"summary": abort.summary}),
                       "Something went wrong on my side, so I am handing over to a human agent.")
        while True:
            yield Move(Action.respond(CLOSING))

    # ---- building blocks used by the plans -------------------------------------------
    def quote(self, text: str) -> None:
        """With ``quote_fares``: open the next message or tool-call reason with ``text`` (a value a
        later sum needs, said where it was looked up); without, nothing."""
        if self.quote_fares:
            self._quote += text + " "

    def _quoted(self, text: str) -> str:
        text, self._quote = self._quote + text, ""
        return text

    def say(self, text: str) -> Script:
        """Send a message; returns the user's reply."""
        reply = yield Move(Action.respond(self._quoted(text)))
        return reply

    def call(self, name: str, kwargs: dict[str, Any], reason: str) -> Script:
        """Make one tool call; returns the observation (an error aborts the dialogue)."""
        observation = yield Move(Action(name, kwargs), self._quoted(reason))
        if is_error_observation(observation):
            raise Abort(f"The tool {name} failed with: {observation}")
        return observation

    def read(self, name: str, kwargs: dict[str, Any], reason: str) -> Script:
        """A read tool call whose JSON observation is parsed."""
        observation = yield from self.call(name, kwargs, reason)
        try:
            return json.loads(observation)
        except json.JSONDecodeError as exc:
            raise Abort(f"The tool {name} returned unreadable data.") from exc

    def reckon(self, expression: str, value: int, reason: str) -> Script:
        """A sum the oracle is about to state: ``value``, which ``expression`` computes. With the
        calculator, one ``calculate`` call first (its result must be ``value``: the expression and
        the rule that priced it can never disagree unnoticed); without, no move."""
        if not self.calculator:
            return value
        observation = yield from self.call("calculate", {"expression": expression}, reason)
        if float(observation) != value:
            raise ValueError(f"calculate({expression!r}) gave {observation}, the rule {value}")
        return value

    def _goal_sentence(self) -> str:
        """The user's request as the oracle states it: "The user wants to cancel a reservation."."""
        return f"The user wants {goal_phrase(self.scenario)}."

    def _with_goal(self, reason: str) -> str:
        """``reason``, opened with the user's request under ``state_goal``."""
        return f"{self._goal_sentence()} {reason}" if self.state_goal else reason

    def authenticate(self) -> Script:
        """Ask for the user id, then read the profile."""
        yield from self.say(AUTH_QUESTION)
        uid = self.scenario.user_id
        reason = "The user gave their user id, so I look up the profile."
        if self.state_goal:
            reason = f"The user wants {goal_phrase(self.scenario)} and gave their user id, so I look up the profile."
        profile = yield from self.read("get_user_details", {"user_id": uid}, reason)
        return profile

    def reservation(self, question: str) -> Script:
        """Ask which reservation (with ``question``), then read it."""
        yield from self.say(question)
        rid = self.scenario.reservation_id
        found = yield from self.read("get_reservation_details", {"reservation_id": rid},
                                     self._with_goal(f"I check reservation {rid} before anything else."))
        if self.state_goal == "think":
            # the decision after a long record reads the request from right before it (an exact
            # copy of the read's reason, which a small policy makes far more reliably)
            yield from self.call("think", {"thought": self._goal_sentence()}, "")
        return found

    def confirm(self, details: str) -> Script:
        """State a write and ask for an explicit yes; returns whether the user agreed."""
        reply = yield from self.say(f"{details} Shall I proceed (yes/no)?")
        if is_yes(reply):
            return True
        yield from self.say(f"Understood, I will not make that change. {CLOSING}")
        return False

    def transfer(self, summary: str, reason: str) -> Script:
        yield Move(Action("transfer_to_human_agents", {"summary": summary}), reason)
