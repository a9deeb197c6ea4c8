"""The real-Triton fixtures of ``tests/integration`` (session-scoped: one tritonserver run is
shared with the conformance tests), for the security suite's side-by-side checks."""

from tests.integration.conftest import embedded_server, peers, perf_analyzer, real_triton

__all__ = ["embedded_server", "peers", "perf_analyzer", "real_triton"]
