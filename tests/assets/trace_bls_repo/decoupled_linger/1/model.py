"""decoupled_linger: COUNT = n -> n responses OUT = [i], the final flag alone, then 0.3 s more
in ``execute``: the request ends (and its trace with it) after its caller had every response."""

import time

import numpy as np
import triton_python_backend_utils as pb_utils

LINGER_S = 0.3


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            for i in range(count):
                out = pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))
                sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        time.sleep(LINGER_S)
        return None
