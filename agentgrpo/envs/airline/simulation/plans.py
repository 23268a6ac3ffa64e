"""The oracle's dialogue per scenario intent, and the oracle for a generated task.

Every decision is made with the rules in ``policy`` from what the tools returned; the
scenario only supplies what the user has just said. The plans themselves live with
their task families: ``plans_book`` (bookings, information, transfers), ``plans_cancel``
(cancellation, compensation) and ``plans_modify`` (changes to a reservation), on the
wording and steps of ``plans_common``; ``oracle`` is the agent that plays a plan.
"""
from __future__ import annotations

from typing import Any, Literal

from agentgrpo.envs.airline.simulation.oracle import OracleAgent, Plan
from agentgrpo.envs.airline.simulation.plans_book import plan_book, plan_info, plan_transfer
from agentgrpo.envs.airline.simulation.plans_cancel import plan_cancel, plan_compensation
from agentgrpo.envs.airline.simulation.plans_modify import (
    plan_add_bags,
    plan_add_insurance,
    plan_add_passenger,
    plan_change_cabin,
    plan_change_flight,
    plan_update_passengers,
)
from agentgrpo.envs.types import Task

PLANS: dict[str, Plan] = {
    "cancel": plan_cancel,
    "compensation": plan_compensation,
    "change_flight": plan_change_flight,
    "change_cabin": plan_change_cabin,
    "add_bags": plan_add_bags,
    "update_passengers": plan_update_passengers,
    "add_insurance": plan_add_insurance,
    "add_passenger": plan_add_passenger,
    "book": plan_book,
    "info": plan_info,
    "transfer": plan_transfer,
}


def oracle_agent(domain: Any, task: Task, calculator: bool = False, quote_fares: bool = False,
                 state_goal: bool | Literal["think"] = False) -> OracleAgent:
    """The oracle for a generated ``task``, following the plan of its scenario's intent;
    ``calculator``: it gets every sum it states from the ``calculate`` tool; ``quote_fares``: it
    states a chosen flight's fare where it looked it up (``quote_fare``); ``state_goal``: its first
    reads' reasons name the user's request (``goal_phrase``); ``"think"``: and a ``think`` call names it
    again right after the reservation read."""
    return OracleAgent(domain, task, PLANS, calculator=calculator, quote_fares=quote_fares,
                       state_goal=state_goal)
