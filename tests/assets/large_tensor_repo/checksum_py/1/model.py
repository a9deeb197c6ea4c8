import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            total = np.array([data.sum(dtype=np.uint64)], dtype=np.uint64)
            out = pb_utils.Tensor("OUTPUT0", total)
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
