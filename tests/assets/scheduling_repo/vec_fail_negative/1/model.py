"""vec_fail_negative: an error response when IN has a negative value, else OUT = IN."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if (x < 0).any():
                error = pb_utils.TritonError("negative input to vec_fail_negative")
                responses.append(pb_utils.InferenceResponse(error=error))
            else:
                out = pb_utils.Tensor("OUT", x)
                responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
