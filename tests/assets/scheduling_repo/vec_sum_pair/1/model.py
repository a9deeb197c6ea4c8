"""vec_sum_pair: OUT = A + B."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "A").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "B").as_numpy()
            out = pb_utils.Tensor("OUT", (a + b).astype("float32"))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
