"""JSON in and out of the HTTP front end (python-rapidjson: several times faster than ``json``).

Parse errors and member-access errors carry Triton's texts (``TritonJson`` in
triton-inference-server/common) and, like Triton, are ``INTERNAL`` errors (HTTP 500).
"""

from __future__ import annotations

import json
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
    """Parse a request body; Triton's message on failure.

    Bytes that are not UTF-8 are taken as they are, as Triton's rapidjson does: in strings
    they become lone surrogates (``surrogateescape``), which ``dumps`` writes back as the
    same bytes.
    """
    if isinstance(data, memoryview):
        data = bytes(data)
    try:
        return rapidjson.loads(data, number_mode=_NUMBER_MODE)
    except rapidjson.JSONDecodeError as exc:
        raise _parse_error(exc) from None
    except UnicodeDecodeError:
        assert not isinstance(data, str)
        return _loads_not_utf8(bytes(data))
    except (TypeError, ValueError) as exc:
        raise InternalError(f"failed to parse the request JSON buffer: {exc}") from None


def _loads_not_utf8(data: bytes) -> Any:
    text = data.decode("utf-8", errors="surrogateescape")
    try:  # rapidjson says whether (and where) it is malformed: each odd byte -> one '?'
        parsed = rapidjson.loads(text.encode("utf-8", errors="replace"), number_mode=_NUMBER_MODE)
    except rapidjson.JSONDecodeError as exc:
        raise _parse_error(exc) from None
    try:
        return json.loads(text)  # the standard parser keeps the odd bytes, as surrogates
    except ValueError:
        return parsed  # what rapidjson reads past (its input ends at a NUL), '?' for them


def _parse_error(exc: rapidjson.JSONDecodeError) -> InternalError:
    match = _PARSE_ERROR.match(str(exc))
    detail = f"{match[2]} at {match[1]}" if match else str(exc)
    return InternalError(f"failed to parse the request JSON buffer: {detail}")


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON; strings holding bytes that are not UTF-8 (as lone surrogates, from
    a request or a file name) are written as those bytes, as Triton does."""
    try:
        return cast(str, _ENCODER(value)).encode()
    except UnicodeEncodeError:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        return text.encode("utf-8", errors="surrogateescape")


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
