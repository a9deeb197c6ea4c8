"""Rows of dicts as a pandas DataFrame, an HTML table, or a plain-text table.

The facade builds plain rows first so that its rich display needs no pandas; ``DataFrame``
is only imported when a caller asks for one.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from workbench.errors import MissingDependencyError

Row = Mapping[str, Any]


def pandas() -> Any:
    """The pandas module, or a ``MissingDependencyError`` naming the extra that provides it."""
    try:
        import pandas
    except ImportError:
        raise MissingDependencyError("pandas", "notebook") from None
    return pandas


def to_frame(rows: Sequence[Row], columns: Sequence[str]) -> Any:
    """A DataFrame with exactly ``columns`` (also when there are no rows)."""
    return pandas().DataFrame([dict(row) for row in rows], columns=list(columns))


def _cell(value: Any) -> str:
    return "" if value is None else str(value)


def html_table(rows: Sequence[Row], columns: Sequence[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(row.get(c)))}</td>" for c in columns) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def text_table(rows: Sequence[Row], columns: Sequence[str]) -> str:
    """Columns padded to their widest cell, for a terminal or a log."""
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = [list(columns)] + cells
    return "\n".join(
        "  ".join(value.ljust(width) for value, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


__all__ = ["html_table", "pandas", "text_table", "to_frame"]
