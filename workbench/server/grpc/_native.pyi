"""Types of the native gRPC front end's extension (``_native.cpp``)."""

from collections.abc import Iterable
from typing import Any

CALL: int
MESSAGE: int
HALF_CLOSE: int
WRITE_DONE: int
CANCEL: int
DONE: int

class Server:
    def __init__(
        self, streaming: Iterable[str] = ..., share_method: str = ..., share_from: int = ...
    ) -> None: ...
    def start(self, address: str, options: Iterable[tuple[str, int | str]]) -> int: ...
    def shutdown(self, grace_s: float) -> None: ...
    def fileno(self) -> int: ...
    def drain(self) -> list[tuple[Any, ...]]: ...
    def write(self, call_id: int, data: Any) -> None: ...
    def finish(
        self,
        call_id: int,
        code: int,
        details: str,
        data: Any = ...,
        tell_done: bool = ...,
        here: bool = ...,
    ) -> None: ...
    def set_compression(self, call_id: int, algorithm: int) -> None: ...
