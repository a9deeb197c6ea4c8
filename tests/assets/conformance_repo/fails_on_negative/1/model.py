"""fails_on_negative: identity, but an error response on negatives and a raise on NaN."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if np.isnan(x).any():
                raise ValueError("NaN input to fails_on_negative")
            if (x < 0).any():
                error = pb_utils.TritonError(f"negative input: min is {float(x.min())}")
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return responses
