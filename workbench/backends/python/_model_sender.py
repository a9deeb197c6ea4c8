"""``pb_utils.InferenceResponseSender``: how a model sends responses instead of returning them.

Non-decoupled models may send their one response (then the FINAL flag) through it; the backend
collects it when ``execute`` returns. Decoupled models send any number of responses, from any
thread and even after ``execute`` returned; each goes straight to ``deliver``. The checks and
messages are Triton's (python_backend ``response_sender.cc``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from workbench.backends.python._model_errors import TritonModelException

#: ``TRITONSERVER_RESPONSE_COMPLETE_FINAL`` (re-exported by ``pb_utils``)
FINAL_FLAG = 1

#: ``deliver(response, final)``: one response of a decoupled request (``None``: flag only)
Deliver = Callable[[Any, bool], None]


def _check_flags(response: Any, flags: int) -> None:
    if flags not in (0, FINAL_FLAG):
        raise TritonModelException("Unable to send response. Unsupported flag provided.")
    if flags == 0 and response is None:
        raise TritonModelException(
            "Inference Response object must be provided when the response flags is set to zero."
        )


class InferenceResponseSender:
    """Sends the responses of one request; the FINAL flag closes it."""

    def __init__(self, deliver: Deliver | None = None) -> None:
        #: ``None`` for non-decoupled models: the one response is kept in ``response``
        self._deliver = deliver
        self.response: Any = None
        self.closed = False
        self._lock = threading.Lock()

    def send(self, response: Any = None, flags: int = 0) -> None:
        """Send ``response``; ``flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL`` closes the sender."""
        _check_flags(response, flags)
        # The lock keeps the responses of one request in order when threads race to send.
        with self._lock:
            if self._deliver is None:
                self._check_single(response, flags)
            if self.closed:
                raise TritonModelException(
                    "Unable to send response. Response sender has been closed."
                )
            self.closed = flags == FINAL_FLAG
            if self._deliver is None:
                self.response = response if response is not None else self.response
            else:
                self._deliver(response, self.closed)

    def _check_single(self, response: Any, flags: int) -> None:
        if response is not None and self.response is not None:
            raise TritonModelException(
                "Unable to send response. Non-decoupled model cannot send more than one response."
            )
        if response is None and flags == FINAL_FLAG and self.response is None:
            raise TritonModelException(
                "Unable to send response. Non-decoupled model cannot send complete final "
                "before sending a response."
            )

    def is_cancelled(self) -> bool:
        """Always False: cancellation does not reach python models yet."""
        return False

    def _close(self) -> bool:
        """Close the sender (an execution failed); whether it was still open."""
        with self._lock:
            was_open = not self.closed
            self.closed = True
            return was_open
