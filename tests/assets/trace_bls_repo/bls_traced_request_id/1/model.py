"""bls_traced_request_id: request_id_echo through BLS, with a request id and the trace."""

import triton_python_backend_utils as pb_utils

OUTPUTS = ["OUTPUT0", "REQUEST_ID"]


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            call = pb_utils.InferenceRequest(
                model_name="request_id_echo",
                inputs=[pb_utils.get_input_tensor_by_name(request, "INPUT0")],
                requested_output_names=OUTPUTS,
                request_id="child-1",
                trace=request.trace(),
            )
            response = call.exec()
            if response.has_error():
                raise pb_utils.TritonModelException(response.error().message())
            outputs = [
                pb_utils.Tensor(name, pb_utils.get_output_tensor_by_name(response, name).as_numpy())
                for name in OUTPUTS
            ]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
