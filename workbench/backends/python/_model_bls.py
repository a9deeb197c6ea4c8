"""What a model's BLS calls hand back and carry, re-exported by ``pb_utils``: the responses of
a decoupled call (``ResponseIterator``) and a request's trace (``InferenceTrace``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workbench.backends.base import RequestTrace
    from workbench.backends.python.pb_utils import InferenceResponse


class InferenceTrace:
    """A request's trace (``request.trace()``), as Triton's ``c_python_backend_utils`` type.

    A BLS request built with ``InferenceRequest(..., trace=request.trace())`` is traced as a
    child of the request (``parent_id``) when the request is traced; without ``trace=`` a BLS
    request is not traced (as in Triton 2.51, ``docs/triton-trace-facts.md``).
    """

    __slots__ = ("_trace",)

    def __init__(self) -> None:
        #: the backend's handle on the request's trace (None: the request is not traced)
        self._trace: RequestTrace | None = None

    @classmethod
    def _of(cls, trace: RequestTrace | None) -> InferenceTrace:
        made = cls()
        made._trace = trace
        return made

    def get_context(self, key: str = "") -> str | None:
        """The OpenTelemetry context of the request's model span as Triton 2.51 gives it
        (``{"traceparent":"00-<trace id>-<span id>-01"}``), for the model to continue the trace;
        None when the request is not traced or the trace mode is ``triton``."""
        return None if self._trace is None else self._trace.get_context()


class ResponseIterator:
    """The responses of a decoupled BLS call (``exec(decoupled=True)``), as they arrive.

    As Triton's: once the last response was read, iterating again starts from the first.
    """

    def __init__(self, responses: Iterator[InferenceResponse]) -> None:
        self._source = responses
        self._seen: list[InferenceResponse] = []
        self._index = 0
        self._finished = False

    def __iter__(self) -> ResponseIterator:
        if self._finished and self._index >= len(self._seen):
            self._index = 0
        return self

    def __next__(self) -> InferenceResponse:
        if self._finished:
            if self._index >= len(self._seen):
                raise StopIteration
            self._index += 1
            return self._seen[self._index - 1]
        try:
            response = next(self._source)
        except StopIteration:
            self._finished = True
            self._index = len(self._seen)
            raise
        self._seen.append(response)
        return response


__all__ = ["InferenceTrace", "ResponseIterator"]
