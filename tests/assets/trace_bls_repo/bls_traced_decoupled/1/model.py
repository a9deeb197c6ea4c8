"""bls_traced_decoupled: decoupled_linger twice through decoupled BLS, both traced."""

import numpy as np
import triton_python_backend_utils as pb_utils


def repeat(request, **options):
    count = pb_utils.get_input_tensor_by_name(request, "COUNT")
    return pb_utils.InferenceRequest(
        model_name="decoupled_linger",
        inputs=[count],
        requested_output_names=["OUT"],
        trace=request.trace(),
        **options,
    )


def collect(responses):
    seen = []
    for response in responses:
        if response.has_error():
            raise pb_utils.TritonModelException(response.error().message())
        out = pb_utils.get_output_tensor_by_name(response, "OUT")
        if out is not None:
            seen.extend(out.as_numpy().tolist())
    return seen


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            seen = collect(repeat(request, request_id="stream-1").exec(decoupled=True))
            seen += collect(await repeat(request).async_exec(decoupled=True))
            out = pb_utils.Tensor("OUT", np.array(seen, dtype=np.int32))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
