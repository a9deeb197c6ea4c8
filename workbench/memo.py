"""The hot paths' remembered results: small tables that start over when full.

The front ends remember what repeats from request to request (a binary request's plan, a
reply's head or frame, a gRPC message's layout), and the core which plans passed a model's
checks, in plain dicts looked up with ``dict.get``.
A table that reaches its limit is emptied rather than pruned by recency: clients send a few
distinct requests again and again, and a client whose every request differs gains nothing
from any order of eviction.
"""

from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")

#: entries a table holds at most, unless its owner says otherwise
LIMIT = 256


def remember(table: dict[K, V], key: K, value: V, limit: int = LIMIT) -> V:
    """Put ``value`` in ``table`` under ``key`` (emptying a full table first); ``value``."""
    if len(table) >= limit and key not in table:
        table.clear()
    table[key] = value
    return value


__all__ = ["LIMIT", "remember"]
