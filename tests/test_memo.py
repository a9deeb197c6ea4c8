"""``memo.remember``: the hot paths' tables hold at most their limit and start over when full."""

from __future__ import annotations

from workbench.memo import remember


def test_a_full_table_starts_over_for_a_new_key_only() -> None:
    table: dict[str, int] = {}
    for index in range(3):
        assert remember(table, f"k{index}", index, limit=3) == index
    assert table == {"k0": 0, "k1": 1, "k2": 2}
    remember(table, "k1", 10, limit=3)  # a key it holds: replaced, nothing forgotten
    assert table == {"k0": 0, "k1": 10, "k2": 2}
    remember(table, "k3", 3, limit=3)  # a new key in a full table: the rest is forgotten
    assert table == {"k3": 3}
