"""Strings in, strings out: UPPER is TEXT upper-cased, LENGTH its length in characters."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.model_name = args["model_name"]

    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            decoded = [item.decode("utf-8") for item in text.reshape(-1)]
            upper = np.array([s.upper().encode("utf-8") for s in decoded], dtype=np.object_)
            length = np.array([len(s) for s in decoded], dtype=np.int32)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("UPPER", upper.reshape(text.shape)),
                        pb_utils.Tensor("LENGTH", length.reshape(text.shape)),
                    ]
                )
            )
        return responses
