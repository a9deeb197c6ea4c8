"""echo_bytes: OUTPUT0[i] = INPUT0[i] reversed byte by byte."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            flat = [bytes(item)[::-1] for item in x.reshape(-1)]
            y = np.array(flat, dtype=np.object_).reshape(x.shape)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", y)]))
        return responses
