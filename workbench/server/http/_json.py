"""JSON in and out of the HTTP front end (python-rapidjson: several times faster than ``json``).

Parse errors and member-access errors carry Triton's texts (``TritonJson`` in
triton-inference-server/common) and, like Triton, are ``INTERNAL`` errors (HTTP 500).
"""

from __future__ import annotations

import re
from typing import Any, cast

import rapidjson

from workbench.errors import InternalError

_NUMBER_MODE = rapidjson.NM_NAN  # Triton reads and writes NaN/Infinity
#: an ``Encoder`` made once: ``rapidjson.dumps`` spends more on its keyword arguments than on a
#: small document
_ENCODER = rapidjson.Encoder(number_mode=_NUMBER_MODE, ensure_ascii=False)
_PARSE_ERROR = re.compile(r"Parse error at offset (\d+): (.*)")


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse a request body; Triton's message on failure."""
    if isinstance(data, memoryview):
        data = bytes(data)
    try:
        return rapidjson.loads(data, number_mode=_NUMBER_MODE)
    except rapidjson.JSONDecodeError as exc:
        match = _PARSE_ERROR.match(str(exc))
        detail = f"{match[2]} at {match[1]}" if match else str(exc)
        raise InternalError(f"failed to parse the request JSON buffer: {detail}") from None
    except (UnicodeDecodeError, TypeError, ValueError) as exc:
        raise InternalError(f"failed to parse the request JSON buffer: {exc}") from None


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON."""
    return cast(str, _ENCODER(value)).encode()


def access_error(context: str, expected: str, member: str | None = None) -> InternalError:
    """Triton's "Unable to parse 'x': attempt to access ..." error for a wrong JSON value."""
    if member is not None:
        return InternalError(
            f"Unable to parse '{context}': attempt to access non-existing object member '{member}'"
        )
    return InternalError(f"Unable to parse '{context}': attempt to access JSON {expected}")


#: the ``expected`` texts of ``access_error`` by the Python type a value should have
NON_STRING = "non-string as string"
NON_ARRAY = "non-array as array"
NON_OBJECT = "non-object as object"
NON_BOOL = "non-boolean as boolean"
NON_UINT = "non-unsigned-integer as unsigned-integer"
NON_INT = "non-signed-integer as signed-integer"
NON_NUMBER = "non-number as double"
