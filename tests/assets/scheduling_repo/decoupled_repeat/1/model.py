"""decoupled_repeat: COUNT = n -> n responses OUT = [i], then a final flag with no response.

A negative COUNT gets a single error response carrying the final flag.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            if count < 0:
                error = pb_utils.TritonError("COUNT must not be negative")
                sender.send(
                    pb_utils.InferenceResponse(error=error),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
                continue
            for i in range(count):
                out = pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))
                sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
