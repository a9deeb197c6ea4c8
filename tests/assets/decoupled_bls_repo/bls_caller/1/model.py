import asyncio
import json

import numpy as np
import triton_python_backend_utils as pb_utils

CODES = ("UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE", "UNSUPPORTED")


def describe(responses):
    """Each response as JSON: its error (message and code name) and its outputs."""
    seen = []
    for response in responses:
        error = response.error()
        if error is not None:
            codes = [c for c in CODES if error.code() == getattr(pb_utils.TritonError, c)]
            error = [error.message(), codes]
        outputs = {t.name(): t.as_numpy().tolist() for t in response.output_tensors()}
        seen.append({"error": error, "outputs": outputs})
    return seen


def bls(request, model="repeat", inputs=None):
    if inputs is None:
        inputs = [pb_utils.get_input_tensor_by_name(request, n) for n in ("IN", "LAST_WITH_DATA")]
    return pb_utils.InferenceRequest(
        model_name=model, requested_output_names=["OUT"], inputs=inputs
    )


class TritonPythonModel:
    async def execute(self, requests):
        return [await self.report(request) for request in requests]

    async def report(self, request):
        report = {}
        stream = bls(request).exec(decoupled=True)
        report["type"] = type(stream).__name__
        report["stream"] = describe(stream)
        report["again"] = describe(stream)  # a finished iterator starts again
        report["single"] = describe([bls(request).exec()])
        report["bytes_name"] = describe(bls(request, b"repeat").exec(decoupled=True))
        report["missing"] = describe(bls(request, "nope").exec(decoupled=True))
        report["single_missing"] = describe([bls(request, "nope").exec()])
        wrong = [pb_utils.Tensor("WRONG", np.array([1], dtype=np.int32))]
        report["bad_input"] = describe(bls(request, inputs=wrong).exec(decoupled=True))
        abandoned = bls(request).exec(decoupled=True)
        report["first"] = describe([next(iter(abandoned))])
        del abandoned  # the rest is drained
        first, second = await asyncio.gather(
            bls(request).async_exec(decoupled=True), bls(request).async_exec(decoupled=True)
        )
        report["async"] = [describe(first), describe(second)]
        report["async_single"] = describe([await bls(request).async_exec()])
        report_tensor = np.array([json.dumps(report).encode()], dtype=np.object_)
        return pb_utils.InferenceResponse([pb_utils.Tensor("REPORT", report_tensor)])
