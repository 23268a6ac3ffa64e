"""Arithmetic for the ``calculate`` tool: a recursive-descent parser, never ``eval``.

τ-bench's ``calculate`` accepts only the characters ``0-9 + - * / ( ) .`` and space,
evaluates with Python's ``eval`` and rounds to 2 decimals. We accept the same
characters and the same expressions, with one deliberate exception: ``**`` and
``//`` (which ``eval`` would also run) are refused, so no expression can ask for a
gigantic power. Grammar::

    sum     := product (("+" | "-") product)*
    product := unary (("*" | "/") unary)*
    unary   := ("+" | "-") unary | atom
    atom    := NUMBER | "(" sum ")"

Numbers are Python literals (``12``, ``1.5``, ``.5``, ``5.``; an integer may not
have leading zeros) and arithmetic is Python's (ints stay exact until a division,
``/`` is true division), so every accepted expression gives exactly what ``eval``
gives. Failures raise: syntax errors as :class:`ExpressionError`, and Python's own
``ZeroDivisionError`` / ``OverflowError`` with Python's messages.
"""
from __future__ import annotations

import re

ALLOWED_CHARACTERS = frozenset("0123456789+-*/(). ")
MAX_LENGTH = 10_000
"""Longest expression accepted (characters)."""
MAX_DEPTH = 200
"""Deepest nesting of parentheses and unary signs (Python's parser stops at 200)."""

_TOKEN = re.compile(r"\d+\.?\d*|\.\d+|[-+*/()]|\.")


class ExpressionError(ValueError):
    """The expression is not valid arithmetic."""


def tokenize(expression: str) -> list[str]:
    """Split an expression into number, operator and parenthesis tokens."""
    tokens: list[str] = []
    pos = 0
    while pos < len(expression):
        if expression[pos] == " ":
            pos += 1
            continue
        match = _TOKEN.match(expression, pos)
        if match is None:  # unreachable with the allowed characters, kept as a guard
            raise ExpressionError(f"unexpected character {expression[pos]!r}")
        tokens.append(match.group())
        pos = match.end()
    return tokens


def _number(token: str) -> int | float:
    if "." in token:
        return float(token)
    if len(token) > 1 and token[0] == "0" and token.strip("0"):
        raise ExpressionError("leading zeros in decimal integer literals are not permitted")
    return int(token)


class _Parser:
    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.pos = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str | None:
        token = self.peek()
        self.pos += 1
        return token

    def parse(self) -> int | float:
        if not self.tokens:
            raise ExpressionError("empty expression")
        value = self.sum(0)
        if self.peek() is not None:
            raise ExpressionError(f"unexpected {self.peek()!r} at token {self.pos + 1}")
        return value

    def sum(self, depth: int) -> int | float:
        value = self.product(depth)
        while self.peek() in ("+", "-"):
            op = self.take()
            rhs = self.product(depth)
            value = value + rhs if op == "+" else value - rhs
        return value

    def product(self, depth: int) -> int | float:
        value = self.unary(depth)
        while self.peek() in ("*", "/"):
            op = self.take()
            rhs = self.unary(depth)
            value = value * rhs if op == "*" else value / rhs
        return value

    def unary(self, depth: int) -> int | float:
        if depth > MAX_DEPTH:
            raise ExpressionError("expression is nested too deeply")
        if self.peek() in ("+", "-"):
            op = self.take()
            operand = self.unary(depth + 1)
            return operand if op == "+" else -operand
        return self.atom(depth)

    def atom(self, depth: int) -> int | float:
        token = self.take()
        if token is None:
            raise ExpressionError("unexpected end of expression")
        if token == "(":
            value = self.sum(depth + 1)
            if self.take() != ")":
                raise ExpressionError("missing closing parenthesis")
            return value
        if token[0].isdigit() or (token[0] == "." and len(token) > 1):
            return _number(token)
        raise ExpressionError(f"unexpected {token!r} at token {self.pos}")


def evaluate_expression(expression: str) -> int | float:
    """Value of an arithmetic expression, with Python's types and semantics."""
    if not all(char in ALLOWED_CHARACTERS for char in expression):
        raise ExpressionError("invalid characters in expression")
    if len(expression) > MAX_LENGTH:
        raise ExpressionError(f"expression longer than {MAX_LENGTH} characters")
    if "**" in expression or "//" in expression:
        raise ExpressionError("only +, -, * and / are supported (no ** or //)")
    return _Parser(tokenize(expression)).parse()
