"""Promote tuned models to a production repository that real Triton serves unchanged.

``promote()`` exports, verifies on a real ``tritonserver`` when one is found, writes
``MANIFEST.json`` and, on request, Kubernetes manifests; ``PromoteReport`` tells what it did.
``find_tritonserver``/``TritonProcess`` run real Triton on loopback (the notebook's
``engine="tritonserver"`` uses them too).
"""

from __future__ import annotations

from workbench.export.output_match import Tolerance
from workbench.export.promote import PromoteVerificationError, promote
from workbench.export.report import PromotedModel, PromoteReport
from workbench.export.triton_process import TritonProcess
from workbench.export.tritonserver import TritonBinary, find_tritonserver, tritonserver_available

__all__ = [
    "PromoteReport",
    "PromoteVerificationError",
    "PromotedModel",
    "Tolerance",
    "TritonBinary",
    "TritonProcess",
    "find_tritonserver",
    "promote",
    "tritonserver_available",
]
