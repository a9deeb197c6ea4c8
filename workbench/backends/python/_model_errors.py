"""``pb_utils.TritonModelException`` and ``pb_utils.TritonError`` (Triton's names and codes).

They live apart from ``pb_utils`` so that the response sender can raise them without an
import cycle; ``pb_utils`` re-exports both.
"""

from __future__ import annotations


class TritonModelException(Exception):
    """Raised by the backend (and by models) for a failure inside a Python model."""

    def __init__(self, msg: str = "") -> None:
        super().__init__(msg)
        self._msg = msg

    def message(self) -> str:
        """The message of the exception."""
        return self._msg


class TritonError:
    """An error carried by an ``InferenceResponse`` (not an exception, as in Triton)."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        if message is None:
            raise TypeError("TritonError message must not be None")
        self._message = message
        self._code = int(code)

    def message(self) -> str:
        """The error message."""
        return self._message

    def code(self) -> int:
        """The ``TRITONSERVER_Error_Code`` (``TritonError.INTERNAL`` ...)."""
        return self._code

    def __str__(self) -> str:
        return self._message
