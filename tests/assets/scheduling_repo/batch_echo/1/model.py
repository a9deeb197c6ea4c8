"""batch_echo: OUTPUT0 = INPUT0; BATCH_SIZE = rows in this execute() call, for every request."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        rows = sum(x.shape[0] for x in inputs)
        responses = []
        for x in inputs:
            size = np.full((x.shape[0], 1), rows, dtype=np.int32)
            outputs = [pb_utils.Tensor("OUTPUT0", x), pb_utils.Tensor("BATCH_SIZE", size)]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
