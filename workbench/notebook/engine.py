"""``Workbench(..., engine="tritonserver")``: real Triton hosted behind the same facade."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
    trace_config: Sequence[str] = (),
) -> TritonProcess:
    """A (not yet started) tritonserver on ``repository`` for the facade, with
    ``--trace-config`` flags (the trace file ``Workbench.trace`` reads)."""
    if engine not in ENGINES:
        raise InvalidArgumentError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if server_options:
        raise InvalidArgumentError(
            "engine='tritonserver' takes no embedded-server options "
            f"({', '.join(sorted(server_options))}); put them in the model configs instead"
        )
    flags = [arg for value in trace_config for arg in ("--trace-config", value)]
    return TritonProcess(
        repository, binary=find_tritonserver(tritonserver), host=host, extra_args=flags
    )


__all__ = ["ENGINES", "triton_engine"]
