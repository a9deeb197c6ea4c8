"""``Workbench(..., engine="tritonserver")``: real Triton hosted behind the same facade."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workbench._types import StrPath
from workbench.errors import InvalidArgumentError
from workbench.export import TritonProcess, find_tritonserver

ENGINES = ("workbench", "tritonserver")


def triton_engine(
    repository: Path,
    engine: str,
    host: str,
    tritonserver: StrPath | None,
    server_options: Mapping[str, Any],
) -> TritonProcess:
    """A (not yet started) tritonserver on ``repository`` for the facade."""
    if engine not in ENGINES:
        raise InvalidArgumentError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if server_options:
        raise InvalidArgumentError(
            "engine='tritonserver' takes no embedded-server options "
            f"({', '.join(sorted(server_options))}); put them in the model configs instead"
        )
    return TritonProcess(repository, binary=find_tritonserver(tritonserver), host=host)


__all__ = ["ENGINES", "triton_engine"]
