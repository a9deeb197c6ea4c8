"""request_id_echo: OUTPUT0 = INPUT0 + 1, and REQUEST_ID, the id this model's request has."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            seen = np.array([[request.request_id().encode()]] * len(x), dtype=np.object_)
            outputs = [
                pb_utils.Tensor("OUTPUT0", (x + 1).astype(np.float32)),
                pb_utils.Tensor("REQUEST_ID", seen),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
