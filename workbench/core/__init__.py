"""Protocol-neutral serving: requests, model lifecycle, instances, schedulers, statistics."""

from workbench.core.bls_client import CoreClient
from workbench.core.inference_core import TRITON_VERSION, CoreOptions, InferenceCore
from workbench.core.lifecycle import ModelState
from workbench.core.request import InferRequest, InferResponse

__all__ = [
    "TRITON_VERSION",
    "CoreClient",
    "CoreOptions",
    "InferRequest",
    "InferResponse",
    "InferenceCore",
    "ModelState",
]
