"""Test doubles shared by the python-backend tests."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from workbench._types import Tensor
from workbench.backends.base import ExecResult
from workbench.errors import NotFoundError


class FakeClient:
    """Answers BLS calls: ``double`` doubles ``X``; anything else is not found."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str] | None]] = []
        #: the ``trace`` of each call (the calling request's, or None)
        self.traces: list[object] = []
        #: the ``request_id`` of each call
        self.request_ids: list[str] = []

    def infer_sync(
        self,
        model_name: str,
        inputs: Sequence[Tensor],
        *,
        model_version: int = -1,
        requested_outputs: Sequence[str] | None = None,
        parameters: dict[str, Any] | None = None,
        timeout_s: float | None = None,
        trace: object = None,
        request_id: str = "",
    ) -> list[Tensor]:
        self.traces.append(trace)
        self.request_ids.append(request_id)
        self.calls.append((model_name, list(requested_outputs) if requested_outputs else None))
        if model_name != "double":
            raise NotFoundError(f"Request for unknown model: '{model_name}' is not found")
        return [Tensor("Y", "FP32", inputs[0].array * 2)]

    def infer_stream_sync(
        self, model_name: str, inputs: Sequence[Tensor], **options: Any
    ) -> Iterator[tuple[ExecResult, bool]]:
        """``infer_sync``'s answer as the one final response of a stream."""
        yield ExecResult(self.infer_sync(model_name, inputs, **options)), True

    def is_model_ready(self, model_name: str, model_version: int = -1) -> bool:
        return model_name == "double"


__all__ = ["FakeClient"]
