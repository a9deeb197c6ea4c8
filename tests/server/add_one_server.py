"""The embedded server on ephemeral ports serving only ``add_one`` of the conformance
repository (FP32[1,16] in, the same plus one out; python backend, dynamic batching)."""

from __future__ import annotations

from pathlib import Path

from workbench.server.hosting import Server

REPOSITORY = Path(__file__).resolve().parents[1] / "assets" / "conformance_repo"


def add_one_server() -> Server:
    """Not started yet: use it as a context manager."""
    return Server(
        REPOSITORY,
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        model_control_mode="explicit",
        load_model=["add_one"],
    )
