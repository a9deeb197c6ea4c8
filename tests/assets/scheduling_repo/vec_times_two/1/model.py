"""vec_times_two: OUT = IN * 2."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            in_ = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            out = pb_utils.Tensor("OUT", (in_ * 2).astype("float32"))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
