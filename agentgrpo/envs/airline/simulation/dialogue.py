"""Reading agent messages: entity extraction by schema and dialogue-act detection.

The scripted user must understand both the oracle and a learned imitation of it, so
it reads messages the way PRM-Lite reads observations: entities are recognised by
their schema (reservation ids, flight numbers, dates, cabins, amounts, payment ids,
bag counts), never by free substring matching, and dialogue acts (a question about a
slot, a confirmation request, a refusal, a transfer) by small keyword patterns.
Everything here is total: any string gives a result, nothing raises.
"""
from __future__ import annotations

import re
from datetime import date

from agentgrpo.envs.airline.simulation.scenario import Confirmation

MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
          "september", "october", "november", "december")
ENTITY_TYPES = ("reservation_id", "flight_number", "date", "cabin", "payment_id",
                "amount", "bag_count", "user_id")

_FLIGHT = re.compile(r"\bHAT\d{3}\b")
_RESERVATION = re.compile(r"\b[A-Z0-9]{6}\b")
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_SPOKEN_DATE = re.compile(r"\b(" + "|".join(MONTHS) + r")\s+(\d{1,2})(?:st|nd|rd|th)?\b",
                          re.IGNORECASE)
_CABIN = re.compile(r"basic[ _-]economy|economy|business", re.IGNORECASE)
_PAYMENT = re.compile(r"\b(?:credit_card|gift_card|certificate)_\d+\b")
_AMOUNT = re.compile(r"\$\s?(\d[\d,]*(?:\.\d+)?)")
_BAGS = re.compile(r"\b(\d{1,2})\s+(?:[a-z-]+\s+)?(?:checked\s+)?bags?\b", re.IGNORECASE)
_USER_ID = re.compile(r"\b[a-z]+_[a-z]+_\d{4}\b")

_CONFIRM = re.compile(r"\(yes/no\)|\byes or no\b|\bshall i proceed\b|\bshould i proceed\b|"
                      r"\bdo you want me to proceed\b|\bplease confirm\b|\bdo you confirm\b|"
                      r"\bconfirm (?:that )?you want\b|\bgo ahead\?")
_REFUSAL = re.compile(r"\bcannot\b|\bcan't\b|\bcan ?not\b|\bunable\b|\bnot able\b|"
                      r"\bnot eligible\b|\bnot allowed\b|\bnot possible\b|\bnot permitted\b|"
                      r"\bwon't be able\b|\bi'm sorry, but\b")
_TRANSFER = re.compile(r"\btransfer")
_YES = re.compile(r"^\W*(yes|yeah|yep|sure|ok|okay|correct|confirmed|go ahead|please do)\b",
                  re.IGNORECASE)
_ASKS = re.compile(r"\?|\bplease (?:provide|tell|give|share|let me know)\b|\bcould you\b|"
                   r"\bcan you\b|\bwhich\b|\bwhat\b|\bhow many\b")

SLOT_PATTERNS: dict[str, re.Pattern[str]] = {
    "user_id": re.compile(r"\buser ?id\b|\buser-id\b"),
    "reservation_id": re.compile(r"reservation (?:id|number|code)|which reservation|"
                                 r"booking (?:id|number|reference)|confirmation number"),
    "reason": re.compile(r"\breason\b|\bwhy\b"),
    "trip": re.compile(r"\borigin\b|\bdestination\b|where would you like to fly|"
                       r"one[- ]way or (?:a )?round[- ]trip|trip type|travel dates?|"
                       r"fly from and to"),
    "cabin": re.compile(r"\bcabin\b|\bclass\b"),
    "flight": re.compile(r"which flight|which option|which one|\bchoose\b|\bselect\b|"
                         r"\bprefer\b"),
    "change": re.compile(r"what change|which change|what would you like to change|new date|"
                         r"which date would you like|what date would you like"),
    "update": re.compile(r"what needs to be (?:changed|corrected|updated)|"
                         r"what (?:should|would you like to) (?:be )?(?:correct|update|change)|"
                         r"which passenger"),
    "passengers": re.compile(r"(?<!per )\bpassengers?\b|\btravell?ers?\b|\bfirst name\b|"
                             r"\bdate of birth\b"),
    "bags": re.compile(r"\b(?:bags?|baggages?|luggage)\b(?! fees?)"),
    "insurance": re.compile(r"\binsurance\b"),
    "payment": re.compile(r"\bpay\b|\bpayment\b|\bpaid\b|\brefund method\b"),
    "help": re.compile(r"how can i help|how may i help|what can i do for you|"
                       r"how can i assist"),
    "anything_else": re.compile(r"anything else"),
}


def spoken_date(iso: str) -> str:
    """'2024-05-20' -> 'May 20' (how users say dates)."""
    day = date.fromisoformat(iso)
    return f"{MONTHS[day.month - 1].capitalize()} {day.day}"


def _number(text: str) -> int | float:
    value = float(text.replace(",", ""))
    return int(value) if value.is_integer() else value


def _reservation_ids(text: str) -> set[str]:
    found = set()
    for token in _RESERVATION.findall(text):
        if _FLIGHT.fullmatch(token):
            continue
        if any(c.isdigit() for c in token) and any(c.isalpha() for c in token) or \
                token.startswith("HATHA"):
            found.add(token)
    return found


def _dates(text: str) -> set[str]:
    found = set()
    for year, month, day in _ISO_DATE.findall(text):
        found.add(f"{year}-{month}-{day}")
    for month, day in _SPOKEN_DATE.findall(text):
        number = int(day)
        if 1 <= number <= 31:
            found.add(f"2024-{MONTHS.index(month.lower()) + 1:02d}-{number:02d}")
    return found


def extract_entities(text: str) -> dict[str, set]:
    """Entities stated in ``text``, by type (see ``ENTITY_TYPES``)."""
    if not isinstance(text, str):
        text = str(text)
    return {
        "reservation_id": _reservation_ids(text),
        "flight_number": set(_FLIGHT.findall(text)),
        "date": _dates(text),
        "cabin": {m.lower().replace(" ", "_").replace("-", "_") for m in _CABIN.findall(text)},
        "payment_id": set(_PAYMENT.findall(text)),
        "amount": {_number(m) for m in _AMOUNT.findall(text) if any(c.isdigit() for c in m)},
        "bag_count": {int(n) for n in _BAGS.findall(text)},
        "user_id": set(_USER_ID.findall(text)),
    }


def is_confirmation_request(text: str) -> bool:
    return bool(_CONFIRM.search(text.lower()))


def is_refusal(text: str) -> bool:
    return bool(_REFUSAL.search(text.lower().replace("’", "'")))


def mentions_transfer(text: str) -> bool:
    low = text.lower()
    return bool(_TRANSFER.search(low)) and ("human" in low or "agent" in low)


def is_yes(text: str) -> bool:
    """An explicit agreement (the user's reply to a confirmation request)."""
    return bool(_YES.search(text.strip()))


def asked_slots(text: str) -> list[str]:
    """Slots asked about in the question sentences of ``text``, in ``SLOT_PATTERNS`` order."""
    questions = " | ".join(question_sentences(text))
    return [slot for slot, pattern in SLOT_PATTERNS.items() if pattern.search(questions)]


def confirmation_matches(spec: Confirmation, text: str) -> bool:
    """The agent's confirmation request states the write ``spec`` describes, and no other.

    A keyword of the action must appear; every required entity must be stated; for
    each entity type the spec mentions, no other value may be stated; every required
    name must appear (``confirmation_faults`` lists what breaks these).
    """
    return not confirmation_faults(spec, text)


def confirmation_faults(spec: Confirmation, text: str) -> list[str]:
    """Why ``text`` does not confirm ``spec``'s write, one fault per broken rule of
    ``confirmation_matches``: ``no keyword``, ``missing <type>`` (a required value not stated),
    ``other <type>`` (a value stated that the write does not have), ``missing name``. Empty:
    it matches."""
    low = text.lower()
    faults = [] if any(keyword in low for keyword in spec.keywords) else ["no keyword"]
    found = extract_entities(text)
    for kind in ENTITY_TYPES:
        if kind not in spec.required and kind not in spec.allowed:
            continue
        required = set(spec.required.get(kind, []))
        if not required <= found.get(kind, set()):
            faults.append(f"missing {kind}")
        if not found.get(kind, set()) <= required | set(spec.allowed.get(kind, [])):
            faults.append(f"other {kind}")
    if not all(name.lower() in low for name in spec.names):
        faults.append("missing name")
    return faults


def outputs_stated(outputs: list[str], text: str) -> bool:
    """All outputs appear in ``text`` the way the grader looks for them."""
    flat = text.lower().replace(",", "")
    return bool(outputs) and all(out.lower() in flat for out in outputs)


def question_sentences(text: str) -> list[str]:
    """Sentences that ask something (end with '?' or are polite requests)."""
    parts = re.split(r"(?<=[.!?])\s+|\n+", text.lower())
    return [p for p in parts if p.strip() and _ASKS.search(p)]
