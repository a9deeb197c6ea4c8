"""bls_traced: add_one twice through BLS, traced as the request's child once."""

import triton_python_backend_utils as pb_utils


def add_one(request, **trace):
    x = pb_utils.get_input_tensor_by_name(request, "INPUT0")
    call = pb_utils.InferenceRequest(
        model_name="add_one", requested_output_names=["OUTPUT0"], inputs=[x], **trace
    )
    response = call.exec()
    if response.has_error():
        raise pb_utils.TritonModelException(response.error().message())
    return pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_numpy()


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            total = add_one(request, trace=request.trace()) + add_one(request)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", total)]))
        return responses
